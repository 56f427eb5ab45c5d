package proclabel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// TestCgroupName guards the cgroup label: systemd units, containers of
// each runtime, both kubelet cgroup drivers, and bounded paths.
func TestCgroupName(t *testing.T) {
	const (
		id         = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
		uid        = "0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
		uidSystemd = "0b1c2d3e_4f50_4a6b_8c7d_9e0f1a2b3c4d"
	)
	for path, want := range map[string]string{
		"/":                          "/",
		"":                           "/",
		"/system.slice/cron.service": "cron.service",
		"/system.slice/system-getty.slice/getty@tty1.service":                 "getty@tty1.service",
		"/user.slice/user-1000.slice/session-3.scope":                         "session-3.scope",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service": "foo.service",
		"/user.slice/user-1000.slice":                                         "user-1000.slice",
		"/system.slice/docker-" + id + ".scope":                               "docker:3f2a9c1b7d4e",
		"/docker/" + id:                                                       "docker:3f2a9c1b7d4e",
		"/machine.slice/libpod-" + id + ".scope":                              "podman:3f2a9c1b7d4e",
		"/system.slice/crio-" + id + ".scope":                                 "crio:3f2a9c1b7d4e",
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSystemd + ".slice/cri-containerd-" + id + ".scope": "pod:" + uid + "/3f2a9c1b7d4e",
		"/kubepods.slice/kubepods-pod" + uidSystemd + ".slice/crio-" + id + ".scope":                                              "pod:" + uid + "/3f2a9c1b7d4e",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidSystemd + ".slice":                               "pod:" + uid,
		"/kubepods/burstable/pod" + uid + "/" + id:                                                                                "pod:" + uid + "/3f2a9c1b7d4e",
		"/kubepods.slice/kubepods-burstable.slice":                                                                                "kubepods-burstable.slice",
		"/../../kubepods/burstable/pod" + uid + "/" + id:                                                                          "pod:" + uid + "/3f2a9c1b7d4e",
		"/stall-test/child":               "/stall-test/child",
		"/lxc/" + strings.Repeat("a", 80): "…" + strings.Repeat("a", 64),
		"/system.slice/docker-abc.scope":  "docker-abc.scope", // not a container id: a unit
	} {
		if got := Cgroup(path); got != want {
			t.Errorf("Cgroup(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestCgroupNames resolves ids (directory inodes) of a fake cgroup tree:
// from /proc/<tgid>/cgroup for a live process, by a walk for an exited one,
// at most one walk per drain and none for an id already missed (a walk
// costs milliseconds on a large host).
func TestCgroupNames(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	mkdir := func(rel string) uint64 {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	cron, kafka := mkdir("system.slice/cron.service"), mkdir("system.slice/kafka.service")
	if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "42", "cgroup"), []byte("1:name=systemd:/x\n0::/system.slice/kafka.service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewCgroupNames(root, func(elem ...string) string { return filepath.Join(append([]string{proc}, elem...)...) })

	c.StartDrain()
	if got := c.Name(kafka, 42, true); got != "kafka.service" || len(c.byID) != 1 {
		t.Errorf("live process: %q with %d cached ids, want kafka.service from /proc without a walk", got, len(c.byID))
	}
	if got := c.Name(0, 42, true); got != "kafka.service" {
		t.Errorf("no id, live process: %q", got)
	}
	if got := c.Name(cron, 7, false); got != "cron.service" {
		t.Errorf("exited process: %q, want cron.service by a walk", got)
	}
	// A cgroup made after the walk is not found in the same drain (one
	// walk per drain), nor is an id the walk missed; the next drain walks
	// again and finds the new one.
	late := mkdir("system.slice/late.service")
	if got := c.Name(late, 8, false); got != Unknown {
		t.Errorf("a cgroup newer than this drain's walk: %q, want unknown", got)
	}
	c.StartDrain()
	if got := c.Name(late, 8, false); got != "late.service" {
		t.Errorf("the same id in the next drain: %q, want late.service by a second walk", got)
	}
	c.StartDrain()
	if got := c.Name(999999999, 9, false); got != Unknown {
		t.Errorf("an id no cgroup has: %q", got)
	}
	gone := mkdir("system.slice/gone.service")
	c.StartDrain()
	if got := c.Name(999999999, 9, false); got != Unknown {
		t.Errorf("a missed id: %q", got)
	}
	if _, ok := c.byID[gone]; ok {
		t.Errorf("an id already missed caused a walk (it found %s)", c.byID[gone])
	}
	if got := c.Name(0, 9, false); got != Unknown {
		t.Errorf("no id, exited: %q", got)
	}
	// A live process whose recorded id is not its current cgroup's (it
	// moved after its lookups): named by the id, not by /proc.
	c.StartDrain()
	if got := c.Name(cron, 42, true); got != "cron.service" {
		t.Errorf("moved process: %q, want cron.service (the cgroup of its lookups)", got)
	}
}

// FuzzCgroupName: any path gives a short, valid label value.
func FuzzCgroupName(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_4f50_4a6b_8c7d_9e0f1a2b3c4d.slice/cri-containerd-3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope")
	f.Add("/system.slice/cron.service")
	f.Add("/a/\xff\xfe/" + strings.Repeat("é", 50))
	f.Fuzz(func(t *testing.T, path string) {
		got := Cgroup(path)
		if got == "" || len(got) > MaxCgroupLen+len("…") || !utf8.ValidString(got) {
			t.Fatalf("Cgroup(%q) = %q", path, got)
		}
	})
}

// TestFindCgroup2Root guards the choice among cgroup2 mounts: the whole
// hierarchy before a bind-mounted subtree, then the shortest mount point,
// with mountinfo's octal escapes undone and malformed lines skipped.
func TestFindCgroup2Root(t *testing.T) {
	for _, tc := range []struct{ name, mountinfo, mount, root string }{
		{"unified", "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup", "/"},
		{"hybrid", "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified", "/"},
		{"container subtree, then the host's", "40 1 0:30 /kubepods.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n" +
			"malformed line\n" +
			"41 1 0:30 / /host/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "/host/sys/fs/cgroup", "/"},
		{"shortest", "50 1 0:30 / /a/long/path rw - cgroup2 cgroup2 rw\n50 1 0:30 / /short rw - cgroup2 cgroup2 rw\n", "/short", "/"},
		{"escaped", `60 1 0:30 /my\040pod /mnt/cg\134x rw - cgroup2 cgroup2 rw` + "\n", `/mnt/cg\x`, "/my pod"},
	} {
		path := filepath.Join(t.TempDir(), "mountinfo")
		if err := os.WriteFile(path, []byte(tc.mountinfo), 0o644); err != nil {
			t.Fatal(err)
		}
		mount, root, err := FindCgroup2Root(path)
		if err != nil || mount != tc.mount || root != tc.root {
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, mount, root, err, tc.mount, tc.root)
		}
	}
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte("30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := FindCgroup2Root(path); err == nil || !strings.Contains(err.Error(), "no cgroup2 file system mounted") {
		t.Errorf("cgroup v1 only: %v", err)
	}
}

// BenchmarkCgroupWalk measures the walk that names the cgroups of exited
// processes, on a real cgroup2 tree (root needed, as the DNS collector's
// tests) shaped like a Kubernetes node's: a QoS slice with 250 pods of 3
// containers, 1,001 cgroups with the kernel's interface files, one walk
// per op. A walk runs at most once per drain (5 s or a scrape), and only
// when a drained process's cgroup id is unknown.
func BenchmarkCgroupWalk(b *testing.B) {
	root, _, err := FindCgroup2Root("/proc/self/mountinfo")
	if err != nil {
		b.Fatal(err)
	}
	top := filepath.Join(root, fmt.Sprintf("stcgbench%d.slice", os.Getpid()))
	var dirs []string
	mk := func(dir string) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatalf("%v (the benchmark needs root and cgroup v2)", err)
		}
		dirs = append(dirs, dir)
	}
	b.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	})
	mk(top)
	for p := range 250 {
		pod := filepath.Join(top, fmt.Sprintf("kubepods-burstable-pod%08x_0000_4000_8000_000000000000.slice", p))
		mk(pod)
		for c := range 3 {
			mk(filepath.Join(pod, fmt.Sprintf("cri-containerd-%064x.scope", p*3+c)))
		}
	}
	c := NewCgroupNames(top, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c.walk()
	}
	b.ReportMetric(float64(len(c.byID)), "cgroups")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(c.byID)), "ns/cgroup")
}
