package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// A release as `make release` writes it into its DIST directory.
type release struct {
	dist               string
	version, revision  string
	epoch              time.Time // SOURCE_DATE_EPOCH: every time stamp of the release
	branch             string
	archive, deb, rpms map[string]string // GOARCH → file name
	image              string
	chart              string // the packaged Helm chart
}

// The packaged files, the same in the .deb and the .rpm (deploy/packages/nfpm.yaml), with the
// modes they are installed with; docs/*.md are added by packagedFiles.
var packagedFixed = map[string]fs.FileMode{
	"/usr/bin/stall_exporter":                                              0o755,
	"/usr/lib/systemd/system/stall_exporter.service":                       0o644,
	"/etc/default/stall_exporter":                                          0o644,
	"/etc/stall_exporter/redis-password":                                   0o600,
	"/usr/share/doc/stall-exporter/README.md":                              0o644,
	"/usr/share/doc/stall-exporter/CHANGELOG.md":                           0o644,
	"/usr/share/doc/stall-exporter/LICENSE":                                0o644,
	"/usr/share/doc/stall-exporter/examples/stall_exporter-dns.conf":       0o644,
	"/usr/share/doc/stall-exporter/examples/stall_exporter-writeback.conf": 0o644,
}

// The directories only this package owns.
var packagedDirs = map[string]fs.FileMode{
	"/etc/stall_exporter":                    0o700,
	"/usr/share/doc/stall-exporter":          0o755,
	"/usr/share/doc/stall-exporter/docs":     0o755,
	"/usr/share/doc/stall-exporter/examples": 0o755,
}

// The configuration files: kept on upgrade and removal, deleted by a purge.
var packagedConfig = []string{"/etc/default/stall_exporter", "/etc/stall_exporter/redis-password"}

func packagedFiles(t *testing.T) map[string]fs.FileMode {
	t.Helper()
	files := map[string]fs.FileMode{}
	for p, m := range packagedFixed {
		files[p] = m
	}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v %v", docs, err)
	}
	for _, d := range docs {
		files["/usr/share/doc/stall-exporter/docs/"+filepath.Base(d)] = 0o644
	}
	return files
}

// TestRelease runs `make release` twice, from two copies of the working tree at different paths
// and in different time zones, as two machines would, and checks what it promises: the same
// bytes both times; checksums that verify; archives with the listed files, owner 0 and the
// commit's time; binaries for the right machine, static, that print the release's version; the
// .deb installed, upgraded, removed and purged in a scratch root (its maintainer scripts run with
// a stand-in systemctl) and its unit verified by systemd-analyze; the .rpm's files, configuration
// flags and scripts, and the same .rpm installed, upgraded and erased; and the image index, one
// image per architecture carrying that architecture's release binary.
func TestRelease(t *testing.T) {
	collectortest.RequireRoot(t, "buildah's image store, and dpkg's and rpm's chroot into a scratch root to run the packages' scripts")
	for _, tool := range []string{"git", "make", "buildah", "rpm", "dpkg", "ldd", "systemd-analyze"} {
		collectortest.RequireTool(t, tool)
	}
	version := releaseVersion(t)
	revision := strings.TrimSpace(run(t, ".", "git", "rev-parse", "HEAD"))
	epoch := strings.TrimSpace(run(t, ".", "git", "log", "-1", "--format=%ct"))

	a := makeRelease(t, version, revision, epoch, "UTC")
	b := makeRelease(t, version, revision, epoch, "Pacific/Auckland")

	t.Run("reproducible", func(t *testing.T) { checkSameBytes(t, a.dist, b.dist) })
	t.Run("checksums", func(t *testing.T) { checkChecksums(t, a) })
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("archive-"+arch, func(t *testing.T) { checkArchive(t, a, arch) })
		t.Run("rpm-"+arch, func(t *testing.T) { checkRPM(t, a, arch) })
	}
	t.Run("deb-arm64", func(t *testing.T) { checkDebContents(t, a, "arm64") })
	t.Run("deb-install", func(t *testing.T) { checkDebInstall(t, a) })
	t.Run("rpm-install", func(t *testing.T) { checkRPMInstall(t, a) })
	t.Run("image", func(t *testing.T) { checkImage(t, a) })
	t.Run("chart", func(t *testing.T) { checkChartArchive(t, filepath.Join(a.dist, a.chart), a.epoch) })
}

// makeRelease copies the working tree (tracked and untracked files, not ignored ones) into a
// new directory and runs `make release` there with the commit's revision and time, the clone
// having no git metadata of its own.
func makeRelease(t *testing.T, version, revision, epoch, tz string) release {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "stall_exporter")
	copyWorkingTree(t, src)
	r := release{
		dist: filepath.Join(dir, "dist"), version: version, revision: revision, branch: "release-test",
		archive: map[string]string{}, deb: map[string]string{}, rpms: map[string]string{},
		image: "stall_exporter-" + version + ".oci.tar",
		chart: chartRelease + "-" + chartVersion(t) + ".tgz",
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	r.epoch = time.Unix(sec, 0).UTC()
	for arch, rpmArch := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		r.archive[arch] = fmt.Sprintf("stall_exporter-%s.linux-%s.tar.gz", version, arch)
		r.deb[arch] = fmt.Sprintf("stall-exporter_%s-1_%s.deb", version, arch)
		r.rpms[arch] = fmt.Sprintf("stall-exporter-%s-1.%s.rpm", version, rpmArch)
	}
	cmd := exec.Command("make", "release", "DIST="+r.dist, "REVISION="+revision, "BRANCH="+r.branch,
		"SOURCE_DATE_EPOCH="+epoch)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "TZ="+tz)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release in %s: %v\n%s", src, err, out)
	}
	t.Logf("make release (TZ=%s) took %s", tz, time.Since(start).Round(time.Second))
	return r
}

// copyWorkingTree copies what `git ls-files` lists in the working tree (tracked files as they are
// now, and untracked files not ignored) to dst, with their modes.
func copyWorkingTree(t *testing.T, dst string) {
	t.Helper()
	list := run(t, ".", "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for _, name := range strings.Split(strings.TrimRight(list, "\x00"), "\x00") {
		info, err := os.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(name)
			if err == nil {
				err = os.Symlink(target, to)
			}
			if err != nil {
				t.Fatal(err)
			}
		case info.Mode().IsRegular():
			b, err := os.ReadFile(name)
			if err == nil {
				err = os.WriteFile(to, b, info.Mode().Perm())
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

func checkSameBytes(t *testing.T, a, b string) {
	t.Helper()
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, e := range entries {
			n = append(n, e.Name())
		}
		return n
	}
	na, nb := names(a), names(b)
	if !slices.Equal(na, nb) {
		t.Fatalf("the two builds wrote different files:\n%v\n%v", na, nb)
	}
	for _, n := range na {
		if !bytes.Equal(readBytes(t, filepath.Join(a, n)), readBytes(t, filepath.Join(b, n))) {
			t.Errorf("%s differs between the two builds", n)
		}
	}
}

func checkChecksums(t *testing.T, r release) {
	want := []string{r.image, r.chart}
	for _, m := range []map[string]string{r.archive, r.deb, r.rpms} {
		for _, n := range m {
			want = append(want, n)
		}
	}
	want = append(want, "sha256sums.txt")
	entries, err := os.ReadDir(r.dist)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("dist holds %v, want %v", got, want)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(readText(t, filepath.Join(r.dist, "sha256sums.txt"))), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("sha256sums.txt: %q is not sha256sum's `<hash>  <file>`", line)
		}
		h := sha256.Sum256(readBytes(t, filepath.Join(r.dist, name)))
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("sha256sums.txt: %s does not match its checksum", name)
		}
		listed = append(listed, name)
	}
	if want := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return n == "sha256sums.txt" }); !slices.Equal(listed, want) {
		t.Errorf("sha256sums.txt lists %v, want %v", listed, want)
	}
}

// checkArchive reads the archive of one architecture: its entries in order, with owner 0, the
// commit's time and their modes; the files as they are in the repository; a gzip header without
// name or time; and the binary (checkBinary).
func checkArchive(t *testing.T, r release, arch string) {
	raw := readBytes(t, filepath.Join(r.dist, r.archive[arch]))
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q at %v; want neither (gzip -n)", zr.Name, zr.ModTime)
	}
	top := strings.TrimSuffix(r.archive[arch], ".tar.gz") + "/"
	want := []struct {
		name, source string
		mode         int64
	}{
		{top, "", 0o755},
		{top + "CHANGELOG.md", "CHANGELOG.md", 0o644},
		{top + "LICENSE", "LICENSE", 0o644},
		{top + "README.md", "README.md", 0o644},
		{top + "stall_exporter", "", 0o755},
		{top + "stall_exporter-dns.conf", "deploy/systemd/stall_exporter-dns.conf", 0o644},
		{top + "stall_exporter-writeback.conf", "deploy/systemd/stall_exporter-writeback.conf", 0o644},
		{top + "stall_exporter.default", "deploy/systemd/stall_exporter.default", 0o644},
		{top + "stall_exporter.service", "deploy/systemd/stall_exporter.service", 0o644},
	}
	tr := tar.NewReader(zr)
	var bin []byte
	for i := 0; ; i++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if i != len(want) {
				t.Errorf("%d entries, want %d", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(want) || h.Name != want[i].name {
			t.Fatalf("entry %d is %s; want, in this order: %v", i, h.Name, want)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.Mode != want[i].mode || !h.ModTime.Equal(r.epoch) {
			t.Errorf("%s: uid %d gid %d %q/%q mode %o time %v; want 0 0 numeric, %o, %v",
				h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Mode, h.ModTime, want[i].mode, r.epoch)
		}
		switch {
		case want[i].source != "":
			if !bytes.Equal(body, readBytes(t, want[i].source)) {
				t.Errorf("%s is not the repository's %s", h.Name, want[i].source)
			}
		case strings.HasSuffix(h.Name, "/stall_exporter"):
			bin = body
		}
	}
	checkBinary(t, r, arch, bin)
}

// checkBinary checks that bin is a static executable for arch and, where this machine can run
// it, that --version and stall_exporter_build_info give the release's version, revision, branch
// (and --version its date).
func checkBinary(t *testing.T, r release, arch string, bin []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("binary is %v %v, want %v ET_EXEC", f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header: not static (CGO_ENABLED=0)", p.Type)
		}
	}
	if arch != runtime.GOARCH {
		return
	}
	path := filepath.Join(t.TempDir(), "stall_exporter")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("stall_exporter --version: %v\n%s", err, out)
	}
	for _, want := range []string{
		fmt.Sprintf("stall_exporter, version %s (branch: %s, revision: %s)\n", r.version, r.branch, r.revision),
		"build date:       " + r.epoch.Format("20060102-15:04:05") + "\n",
		"platform:         linux/" + arch + "\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stall_exporter --version does not say %q:\n%s", want, out)
		}
	}
	var info string
	for _, line := range strings.Split(e2etest.Scrape(t, e2etest.StartExporter(t, path).URL), "\n") {
		if strings.HasPrefix(line, "stall_exporter_build_info{") {
			info = line
		}
	}
	for _, want := range []string{`branch="` + r.branch + `"`, `revision="` + r.revision + `"`, `version="` + r.version + `"`, `goarch="` + arch + `"`} {
		if !strings.Contains(info, want) || !strings.HasSuffix(info, "} 1") {
			t.Errorf("stall_exporter_build_info does not say %s: %q", want, info)
		}
	}
}

// checkRPM reads the .rpm with rpm (checkRPMInstall installs it): its name, version, architecture and licence; every file with
// its mode and configuration flags ("cn": %config(noreplace)); and its scripts, which are
// deploy/packages'.
func checkRPM(t *testing.T, r release, arch string) {
	pkg := filepath.Join(r.dist, r.rpms[arch])
	rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]
	if got, want := run(t, ".", "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH} %{LICENSE}", pkg),
		"stall-exporter "+r.version+" 1 "+rpmArch+" Apache-2.0"; got != want {
		t.Errorf("rpm -qp: %q, want %q", got, want)
	}
	var want []string
	for p, m := range packagedFiles(t) {
		flags := ""
		if slices.Contains(packagedConfig, p) {
			flags = "cn"
		}
		want = append(want, p+" "+m.String()+" "+flags)
	}
	for p, m := range packagedDirs {
		want = append(want, p+" "+(fs.ModeDir|m).String()+" ")
	}
	slices.Sort(want)
	got := strings.Split(strings.TrimRight(run(t, ".", "rpm", "-qp", "--qf",
		`[%{FILENAMES} %{FILEMODES:perms} %{FILEFLAGS:fflags}\n]`, pkg), "\n"), "\n")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("rpm file list (name mode flags):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := strings.Fields(run(t, ".", "rpm", "-qp", "--configfiles", pkg)); !slices.Equal(got, packagedConfig) {
		t.Errorf("rpm --configfiles: %v, want %v", got, packagedConfig)
	}
	for tag, script := range map[string]string{"POSTIN": "postinstall.sh", "PREUN": "preremove.sh", "POSTUN": "postremove.sh"} {
		got := run(t, ".", "rpm", "-qp", "--qf", "%{"+tag+"}", pkg)
		if strings.TrimSpace(got) != strings.TrimSpace(readText(t, "deploy/packages/"+script)) {
			t.Errorf("the rpm's %s script is not deploy/packages/%s:\n%s", tag, script, got)
		}
	}
}

// checkDebContents checks a .deb this machine cannot install (another architecture) by its
// control fields, conffiles and file list.
func checkDebContents(t *testing.T, r release, arch string) {
	pkg := filepath.Join(r.dist, r.deb[arch])
	if got, want := run(t, ".", "dpkg-deb", "--showformat=${Package} ${Version} ${Architecture}", "--show", pkg),
		"stall-exporter "+r.version+"-1 "+arch; got != want {
		t.Errorf("dpkg-deb --show: %q, want %q", got, want)
	}
	if got := strings.Fields(run(t, ".", "dpkg-deb", "--info", pkg, "conffiles")); !slices.Equal(got, packagedConfig) {
		t.Errorf("conffiles: %v, want %v", got, packagedConfig)
	}
	var got, want []string
	for _, line := range strings.Split(strings.TrimSpace(run(t, ".", "dpkg-deb", "--contents", pkg)), "\n") {
		f := strings.Fields(line)
		if name := strings.TrimPrefix(f[len(f)-1], "."); !strings.HasSuffix(name, "/") {
			got = append(got, f[0]+" "+name)
		}
	}
	for p, m := range packagedFiles(t) {
		want = append(want, "-"+m.String()[1:]+" "+p)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("dpkg-deb --contents (files):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// checkDebInstall installs this machine's .deb with dpkg into a scratch root, which holds only a
// shell (for the maintainer scripts, which dpkg runs chrooted there), /dev/null and a systemctl
// that records its arguments; /run/systemd/system says systemd runs, as on a booted host. It
// checks each step's files and systemctl calls: install, reinstall over a changed
// configuration, remove, purge; and, in a root where systemd does not run, that the scripts
// call no systemctl.
func checkDebInstall(t *testing.T, r release) {
	pkg := filepath.Join(r.dist, r.deb[runtime.GOARCH])
	root := scratchRoot(t, true)
	dpkg := func(args ...string) {
		t.Helper()
		run(t, ".", "dpkg", append([]string{"--root=" + root}, args...)...)
	}
	calls := func(want ...string) {
		t.Helper()
		checkSystemctlCalls(t, root, want...)
	}
	inRoot := func(p string) string { return filepath.Join(root, p) }

	dpkg("--install", pkg)
	calls("daemon-reload", "enable --now stall_exporter.service")
	files := packagedFiles(t)
	var listed []string
	for _, l := range strings.Split(strings.TrimSpace(run(t, ".", "dpkg", "--root="+root, "--listfiles", "stall-exporter")), "\n") {
		if info, err := os.Lstat(inRoot(l)); err == nil && !info.IsDir() {
			listed = append(listed, l)
		}
	}
	for p, mode := range files {
		if info, err := os.Stat(inRoot(p)); err != nil {
			t.Errorf("not installed: %v", err)
		} else if info.Mode() != mode {
			t.Errorf("installed %s with mode %v, want %v", p, info.Mode(), mode)
		}
	}
	for p, mode := range packagedDirs {
		if info, err := os.Stat(inRoot(p)); err != nil || info.Mode() != fs.ModeDir|mode {
			t.Errorf("installed directory %s: %v, want %v", p, err, fs.ModeDir|mode)
		}
	}
	if len(listed) != len(files) {
		t.Errorf("dpkg --listfiles: %d files %v, want %d", len(listed), listed, len(files))
	}
	if !bytes.Equal(readBytes(t, inRoot("/usr/bin/stall_exporter")), releaseBinary(t, r, runtime.GOARCH)) {
		t.Error("/usr/bin/stall_exporter is not the release archive's binary")
	}
	for p, source := range map[string]string{
		"/usr/share/doc/stall-exporter/README.md":      "README.md",
		"/usr/share/doc/stall-exporter/LICENSE":        "LICENSE",
		"/usr/share/doc/stall-exporter/CHANGELOG.md":   "CHANGELOG.md",
		"/usr/share/doc/stall-exporter/docs/alerts.md": "docs/alerts.md",
	} {
		if !bytes.Equal(readBytes(t, inRoot(p)), readBytes(t, source)) {
			t.Errorf("%s is not the repository's %s", p, source)
		}
	}
	// One source for the unit: deploy/systemd's, with ExecStart at the packaged binary.
	unit := readText(t, "deploy/systemd/stall_exporter.service")
	if strings.Count(unit, "\nExecStart=/usr/local/bin/stall_exporter ") != 1 {
		t.Fatal("deploy/systemd/stall_exporter.service has not one ExecStart=/usr/local/bin/stall_exporter")
	}
	if got, want := readText(t, inRoot("/usr/lib/systemd/system/stall_exporter.service")),
		strings.Replace(unit, "\nExecStart=/usr/local/bin/", "\nExecStart=/usr/bin/", 1); got != want {
		t.Errorf("the installed unit is not deploy/systemd's with ExecStart=/usr/bin/stall_exporter:\n%s", got)
	}
	if got := readText(t, inRoot("/etc/default/stall_exporter")); got != readText(t, "deploy/systemd/stall_exporter.default") {
		t.Errorf("/etc/default/stall_exporter is not deploy/systemd/stall_exporter.default:\n%s", got)
	}
	if b := readBytes(t, inRoot("/etc/stall_exporter/redis-password")); len(b) != 0 {
		t.Errorf("/etc/stall_exporter/redis-password holds %q, want empty", b)
	}

	// systemd-analyze verify on the installed unit, in the scratch root: the binary at ExecStart
	// is the packaged one; the host's targets and slices stand in for the rest of systemd, in the
	// runtime unit directory that also tells the scripts systemd runs.
	for _, pattern := range []string{"/usr/lib/systemd/system/*.target", "/usr/lib/systemd/system/*.slice"} {
		units, _ := filepath.Glob(pattern)
		for _, u := range units {
			if err := os.WriteFile(inRoot("/run/systemd/system/"+filepath.Base(u)), readBytes(t, u), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := exec.Command("systemd-analyze", "--root="+root, "verify", "--man=no",
		"/usr/lib/systemd/system/stall_exporter.service").CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify on the installed unit: %v\n%s", err, out)
	}

	// An upgrade (the same version again) keeps a changed configuration and restarts the
	// enabled service.
	changed := readText(t, inRoot("/etc/default/stall_exporter")) + "STALL_EXPORTER_ARGS=\"--redis.addr=redis://localhost:6379\"\n"
	if err := os.WriteFile(inRoot("/etc/default/stall_exporter"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg("--install", pkg)
	calls("daemon-reload", "daemon-reload", "--quiet is-enabled stall_exporter.service", "restart stall_exporter.service")
	if got := readText(t, inRoot("/etc/default/stall_exporter")); got != changed {
		t.Errorf("an upgrade replaced the changed /etc/default/stall_exporter:\n%s", got)
	}

	dpkg("--remove", "stall-exporter")
	calls("stop stall_exporter.service", "daemon-reload")
	for _, p := range []string{"/usr/bin/stall_exporter", "/usr/lib/systemd/system/stall_exporter.service"} {
		if _, err := os.Stat(inRoot(p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("dpkg --remove left %s (%v)", p, err)
		}
	}
	if got := readText(t, inRoot("/etc/default/stall_exporter")); got != changed {
		t.Errorf("dpkg --remove did not keep /etc/default/stall_exporter:\n%s", got)
	}
	if _, err := os.Stat(inRoot("/etc/stall_exporter/redis-password")); err != nil {
		t.Errorf("dpkg --remove did not keep the Redis password file: %v", err)
	}

	dpkg("--purge", "stall-exporter")
	calls("disable stall_exporter.service", "daemon-reload")
	for _, p := range []string{"/etc/default/stall_exporter", "/etc/stall_exporter"} {
		if _, err := os.Stat(inRoot(p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("dpkg --purge left %s (%v)", p, err)
		}
	}

	// Where systemd does not run (a chroot, an image build), the scripts leave it alone.
	root = scratchRoot(t, false)
	dpkg("--install", pkg)
	calls()
}

// checkRPMInstall installs this machine's .rpm with rpm --root into a scratch root like the
// .deb's, and checks each step's systemctl calls and configuration: install applies the preset;
// an upgrade (the same package again) restarts the service and keeps a changed configuration;
// erase disables the service and saves the changed configuration as .rpmsave.
func checkRPMInstall(t *testing.T, r release) {
	pkg := filepath.Join(r.dist, r.rpms[runtime.GOARCH])
	root := scratchRoot(t, true)
	rpm := func(args ...string) {
		t.Helper()
		run(t, ".", "rpm", append([]string{"--root=" + root}, args...)...)
	}
	inRoot := func(p string) string { return filepath.Join(root, p) }
	rpm("--initdb")
	// --nodeps: the package requires /bin/sh, which no package provides in the scratch root.
	rpm("--install", "--nodeps", pkg)
	checkSystemctlCalls(t, root, "daemon-reload", "preset stall_exporter.service")
	for _, p := range append([]string{"/usr/bin/stall_exporter", "/usr/lib/systemd/system/stall_exporter.service"}, packagedConfig...) {
		if _, err := os.Stat(inRoot(p)); err != nil {
			t.Errorf("rpm --install: %v", err)
		}
	}

	changed := readText(t, inRoot("/etc/default/stall_exporter")) + "STALL_EXPORTER_ARGS=\"--redis.addr=redis://localhost:6379\"\n"
	if err := os.WriteFile(inRoot("/etc/default/stall_exporter"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	rpm("--upgrade", "--replacepkgs", "--nodeps", pkg)
	checkSystemctlCalls(t, root, "daemon-reload", "daemon-reload", "try-restart stall_exporter.service")
	if got := readText(t, inRoot("/etc/default/stall_exporter")); got != changed {
		t.Errorf("an upgrade replaced the changed /etc/default/stall_exporter:\n%s", got)
	}

	rpm("--erase", "stall-exporter")
	checkSystemctlCalls(t, root, "disable --now stall_exporter.service", "daemon-reload")
	for _, p := range []string{"/usr/bin/stall_exporter", "/etc/default/stall_exporter", "/etc/stall_exporter"} {
		if _, err := os.Stat(inRoot(p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("rpm --erase left %s (%v)", p, err)
		}
	}
	if got := readText(t, inRoot("/etc/default/stall_exporter.rpmsave")); got != changed {
		t.Errorf("rpm --erase did not save the changed configuration as .rpmsave:\n%s", got)
	}
}

// checkSystemctlCalls compares the systemctl calls recorded in root's /systemctl.log with want,
// and empties the log.
func checkSystemctlCalls(t *testing.T, root string, want ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "systemctl.log"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var got []string
	if s := strings.TrimSpace(string(b)); s != "" {
		got = strings.Split(s, "\n")
	}
	if !slices.Equal(got, want) {
		t.Errorf("systemctl calls: %q, want %q", got, want)
	}
	_ = os.Remove(filepath.Join(root, "systemctl.log"))
}

// scratchRoot makes a root for dpkg --root and rpm --root: an empty dpkg database, /bin/sh (this machine's, with
// the libraries it loads), /dev/null, and a systemctl that appends its arguments to
// /systemctl.log; with systemd, also /run/systemd/system.
func scratchRoot(t *testing.T, systemd bool) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/log", "usr/bin", "bin", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if systemd {
		if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, b []byte, mode fs.FileMode) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), b, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("var/lib/dpkg/status", nil, 0o644)
	write("usr/bin/systemctl", []byte("#!/bin/sh\necho \"$*\" >>/systemctl.log\n"), 0o755)
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	write("bin/sh", readBytes(t, sh), 0o755)
	for _, f := range strings.Fields(run(t, ".", "ldd", sh)) {
		if strings.HasPrefix(f, "/") {
			write(f, readBytes(t, f), 0o755)
		}
	}
	if err := unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	return root
}

// The parts of the OCI image layout the test reads.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	} `json:"platform"`
}

type ociIndex struct {
	Manifests []ociDescriptor `json:"manifests"`
}

type ociManifest struct {
	Config ociDescriptor   `json:"config"`
	Layers []ociDescriptor `json:"layers"`
}

type ociConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       struct {
		User         string              `json:"User"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
}

// checkImage reads the OCI archive: its one index, tagged with the version, names an image for
// linux/amd64 and one for linux/arm64; each has the configuration the README promises
// (entrypoint, user 65532, port 29110, OCI labels) and one layer holding that architecture's
// release binary, the licence, CA certificates and a sticky /tmp. Every blob matches its digest.
func checkImage(t *testing.T, r release) {
	blobs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(readBytes(t, filepath.Join(r.dist, r.image))))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[path.Clean(h.Name)] = b
	}
	blob := func(d ociDescriptor, v any) []byte {
		t.Helper()
		hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
		b, found := blobs["blobs/sha256/"+hexDigest]
		if !ok || !found {
			t.Fatalf("no blob %s", d.Digest)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest {
			t.Fatalf("blob %s does not match its digest", d.Digest)
		}
		if v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("blob %s: %v", d.Digest, err)
			}
		}
		return b
	}
	var layout ociIndex
	if err := json.Unmarshal(blobs["index.json"], &layout); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(layout.Manifests) != 1 || layout.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != r.version {
		t.Fatalf("index.json: want one image index tagged %s, got %+v", r.version, layout.Manifests)
	}
	var index ociIndex
	blob(layout.Manifests[0], &index)
	var platforms []string
	for _, m := range index.Manifests {
		if m.Platform == nil {
			t.Fatalf("index entry %s has no platform", m.Digest)
		}
		arch := m.Platform.Architecture
		platforms = append(platforms, m.Platform.OS+"/"+arch)
		var manifest ociManifest
		blob(m, &manifest)
		var config ociConfig
		blob(manifest.Config, &config)
		c := config.Config
		if config.Architecture != arch || config.OS != "linux" || c.User != "65532:65532" ||
			!slices.Equal(c.Entrypoint, []string{"/bin/stall_exporter"}) || len(c.Cmd) != 0 ||
			len(c.ExposedPorts) != 1 || !hasKey(c.ExposedPorts, "29110/tcp") || !config.Created.Equal(r.epoch) {
			t.Errorf("%s config: want linux/%s, entrypoint /bin/stall_exporter and no cmd, user 65532:65532, port 29110/tcp only, created %v; got %+v",
				arch, arch, r.epoch, config)
		}
		for label, want := range map[string]string{
			"org.opencontainers.image.source":   "https://github.com/stall-exporter/stall_exporter",
			"org.opencontainers.image.version":  r.version,
			"org.opencontainers.image.revision": r.revision,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.title":    "stall_exporter",
			"org.opencontainers.image.created":  r.epoch.Format(time.RFC3339),
		} {
			if c.Labels[label] != want {
				t.Errorf("%s label %s=%q, want %q", arch, label, c.Labels[label], want)
			}
		}
		if c.Labels["org.opencontainers.image.description"] == "" {
			t.Errorf("%s has no org.opencontainers.image.description", arch)
		}
		if len(manifest.Layers) != 1 {
			t.Fatalf("%s: %d layers, want 1", arch, len(manifest.Layers))
		}
		files := layerFiles(t, blob(manifest.Layers[0], nil))
		if !bytes.Equal(files["bin/stall_exporter"].body, releaseBinary(t, r, arch)) {
			t.Errorf("%s: /bin/stall_exporter is not the release archive's binary", arch)
		}
		if !bytes.Equal(files["LICENSE"].body, readBytes(t, "LICENSE")) {
			t.Errorf("%s: no /LICENSE", arch)
		}
		if len(files["etc/ssl/certs/ca-certificates.crt"].body) == 0 {
			t.Errorf("%s: no CA certificates", arch)
		}
		if tmp, ok := files["tmp/"]; !ok || tmp.mode&0o7777 != 0o1777 {
			t.Errorf("%s: /tmp mode %o (present: %v), want 1777", arch, tmp.mode, ok)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("image index platforms %v, want linux/amd64 and linux/arm64", platforms)
	}
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

type layerFile struct {
	mode int64
	body []byte
}

func layerFiles(t *testing.T, layer []byte) map[string]layerFile {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]layerFile{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "./")] = layerFile{mode: h.Mode, body: b}
	}
}

// releaseBinary returns the binary in the release archive of arch.
func releaseBinary(t *testing.T, r release, arch string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(readBytes(t, filepath.Join(r.dist, r.archive[arch]))))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no binary in %s: %v", r.archive[arch], err)
		}
		if path.Base(h.Name) == "stall_exporter" {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// run runs a command in dir and returns its standard output; a failure fails the test.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// releaseVersion is VERSION's: the one source of the release's version.
func releaseVersion(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(readText(t, "VERSION"))
}

// chartVersion is the chart's own version, from its Chart.yaml.
func chartVersion(t *testing.T) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Metadata.Version
}

// TestOneVersion: every place a user or a tool reads the release's version from gives VERSION's:
// the chart's appVersion and the image tag the chart renders by default, the image tag of the
// kustomize base, the CHANGELOG's top entry, and the install commands of README.md, docs/*.md and
// the chart's README (`V=`, the image `ghcr.io/stall-exporter/stall_exporter:<version>`, the
// release's file names, the chart README's "Chart version …, stall_exporter …"); their
// `helm install … --version` gives the chart's own version, from Chart.yaml.
func TestOneVersion(t *testing.T) {
	version := releaseVersion(t)
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(version) {
		t.Fatalf("VERSION holds %q, want a semantic version x.y.z", version)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.AppVersion != version {
		t.Errorf("%s/Chart.yaml: appVersion %q, want VERSION's %s", chartDir, ch.Metadata.AppVersion, version)
	}
	const image = "ghcr.io/stall-exporter/stall_exporter"
	manifest, err := helmTemplate(nil)
	if err != nil {
		t.Fatal(err)
	}
	chartDS := onlyObject[*appsv1.DaemonSet](t, decodeManifests(t, chartDir, []byte(manifest)))
	if got := chartDS.Spec.Template.Spec.Containers[0].Image; got != image+":"+version {
		t.Errorf("the chart's default image is %s, want %s:%s", got, image, version)
	}
	kustDS := onlyObject[*appsv1.DaemonSet](t, kustomize(t, "deploy/kubernetes"))
	if got := kustDS.Spec.Template.Spec.Containers[0].Image; got != image+":"+version {
		t.Errorf("the kustomize base's image is %s, want %s:%s", got, image, version)
	}
	top := regexp.MustCompile(`(?m)^## (\S+) / \d{4}-\d{2}-\d{2}$`).FindStringSubmatch(readText(t, "CHANGELOG.md"))
	if top == nil || top[1] != version {
		t.Errorf("CHANGELOG.md's top entry is %q, want ## %s / <date>", top, version)
	}

	docs, _ := filepath.Glob("docs/*.md")
	docs = append(docs, "README.md", filepath.Join(chartDir, "README.md"))
	found := map[string]int{}
	for _, c := range []struct {
		what    string
		pattern *regexp.Regexp
		want    string
	}{
		{"V=", regexp.MustCompile(`(?m)^\s*V=(\S*)`), version},
		{"the image", regexp.MustCompile(regexp.QuoteMeta(image) + `:(\d[^\s` + "`" + `]*)`), version},
		{"a release file", regexp.MustCompile(`stall_exporter-(\d[\d.]*\d)\.(?:oci\.tar|linux-)`), version},
		{"helm --version", regexp.MustCompile(`(?m)^\s*helm (?:install|upgrade)\b[^\n]*(?:\\\n[^\n]*)*?--version[ =](\d\S*)`), ch.Metadata.Version},
	} {
		for _, doc := range docs {
			for _, m := range c.pattern.FindAllStringSubmatch(readText(t, doc), -1) {
				found[c.what]++
				if m[1] != c.want {
					t.Errorf("%s: %s gives %s, want %s", doc, strings.TrimSpace(m[0]), m[1], c.want)
				}
			}
		}
	}
	chartReadme := regexp.MustCompile(`Chart version (\S+), stall_exporter (\S+)\.`).FindStringSubmatch(readText(t, filepath.Join(chartDir, "README.md")))
	if chartReadme == nil || chartReadme[1] != ch.Metadata.Version || chartReadme[2] != version {
		t.Errorf("%s/README.md says %q, want Chart version %s, stall_exporter %s.", chartDir, chartReadme, ch.Metadata.Version, version)
	}
	// The install commands must be found, or this test checks nothing.
	for _, what := range []string{"V=", "the image", "a release file", "helm --version"} {
		if found[what] == 0 {
			t.Errorf("no %s in the install commands of %v", what, docs)
		}
	}
}

func readBytes(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readText(t *testing.T, name string) string { return string(readBytes(t, name)) }
