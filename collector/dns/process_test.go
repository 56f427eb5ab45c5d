package dns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestProcessTable guards the series bound: at most max (name, main,
// cgroup) processes, the rest "other"; one idle for the idle time gives its
// place to a new one; label values bounded and valid UTF-8.
func TestProcessTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProcessTable(3, 10*time.Minute)
		p.add(processKey{"java", "", "pod:0b1c2d3e-0000-4000-8000-000000000001/3f2a9c1b7d4e"}, 5)
		p.add(processKey{"java", "", "kafka.service"}, 2) // the same name in another cgroup: its own series
		p.add(processKey{"getent", "", "cron.service"}, 1)
		p.add(processKey{"curl", "", "/"}, 2)        // full, nothing idle: other
		p.add(processKey{"", "", "cron.service"}, 1) // no name: other
		if p.other.n != 3 || p.names[processKey{"java", "", "kafka.service"}].n != 2 || len(p.names) != 3 {
			t.Fatalf("other %d names %v", p.other.n, p.names)
		}
		collectortest.Advance(11 * time.Minute)
		p.add(processKey{"java", "", "kafka.service"}, 1)
		p.addQueries(processKey{"java", "", "pod:0b1c2d3e-0000-4000-8000-000000000001/3f2a9c1b7d4e"}, qtPTR, 4)
		p.add(processKey{"storm", "", ""}, 300) // getent idle for 11 min: replaced; no cgroup is "unknown"
		if _, ok := p.names[processKey{"getent", "", "cron.service"}]; ok || p.names[processKey{"storm", "", unknownCgroup}].n != 300 ||
			p.names[processKey{"java", "", "kafka.service"}].n != 3 || p.other.n != 3 {
			t.Fatalf("after eviction: other %d names %v", p.other.n, p.names)
		}
		collectortest.Advance(11 * time.Minute)
		// Two JVMs in one cgroup: a series each, by what they run.
		p.add(processKey{"java", "BrokerStartup", "rocketmq.service"}, 1)
		p.add(processKey{"java", "consumer-app.jar", "rocketmq.service"}, 1)
		if len(p.names) != 3 || p.names[processKey{"java", "BrokerStartup", "rocketmq.service"}].n != 1 {
			t.Fatalf("two JVMs in one cgroup: names %v", p.names)
		}
		collectortest.Advance(11 * time.Minute)
		p.add(processKey{strings.Repeat("x", 100) + "\xff", strings.Repeat("z", 100) + "\xff", strings.Repeat("y", 100) + "\xff"}, 1) // bounded and valid UTF-8 even from /proc
		for k := range p.names {
			if len(k.comm) > collector.MaxLabelBytes+len("…") || len(k.main) > maxMainLen+len("…") || len(k.cgroup) > maxCgroupLen+len("…") {
				t.Errorf("labels %q longer than %d/%d/%d bytes", k, collector.MaxLabelBytes, maxMainLen, maxCgroupLen)
			}
		}
	})
}

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
		if got := cgroupName(path); got != want {
			t.Errorf("cgroupName(%q) = %q, want %q", path, got, want)
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
	c := newCgroupNames(root, func(elem ...string) string { return filepath.Join(append([]string{proc}, elem...)...) })

	c.startDrain()
	if got := c.name(kafka, 42, true); got != "kafka.service" || len(c.byID) != 1 {
		t.Errorf("live process: %q with %d cached ids, want kafka.service from /proc without a walk", got, len(c.byID))
	}
	if got := c.name(0, 42, true); got != "kafka.service" {
		t.Errorf("no id, live process: %q", got)
	}
	if got := c.name(cron, 7, false); got != "cron.service" {
		t.Errorf("exited process: %q, want cron.service by a walk", got)
	}
	// A cgroup made after the walk is not found in the same drain (one
	// walk per drain), nor is an id the walk missed; the next drain walks
	// again and finds the new one.
	late := mkdir("system.slice/late.service")
	if got := c.name(late, 8, false); got != unknownCgroup {
		t.Errorf("a cgroup newer than this drain's walk: %q, want unknown", got)
	}
	c.startDrain()
	if got := c.name(late, 8, false); got != "late.service" {
		t.Errorf("the same id in the next drain: %q, want late.service by a second walk", got)
	}
	c.startDrain()
	if got := c.name(999999999, 9, false); got != unknownCgroup {
		t.Errorf("an id no cgroup has: %q", got)
	}
	gone := mkdir("system.slice/gone.service")
	c.startDrain()
	if got := c.name(999999999, 9, false); got != unknownCgroup {
		t.Errorf("a missed id: %q", got)
	}
	if _, ok := c.byID[gone]; ok {
		t.Errorf("an id already missed caused a walk (it found %s)", c.byID[gone])
	}
	if got := c.name(0, 9, false); got != unknownCgroup {
		t.Errorf("no id, exited: %q", got)
	}
	// A live process whose recorded id is not its current cgroup's (it
	// moved after its lookups): named by the id, not by /proc.
	c.startDrain()
	if got := c.name(cron, 42, true); got != "cron.service" {
		t.Errorf("moved process: %q, want cron.service (the cgroup of its lookups)", got)
	}
}

// FuzzCgroupName: any path gives a short, valid label value.
func FuzzCgroupName(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_4f50_4a6b_8c7d_9e0f1a2b3c4d.slice/cri-containerd-3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope")
	f.Add("/system.slice/cron.service")
	f.Add("/a/\xff\xfe/" + strings.Repeat("é", 50))
	f.Fuzz(func(t *testing.T, path string) {
		got := cgroupName(path)
		if got == "" || len(got) > maxCgroupLen+len("…") || !utf8.ValidString(got) {
			t.Fatalf("cgroupName(%q) = %q", path, got)
		}
	})
}

// privateMountsEnv, set to 1, tells TestOpenCgroup2 that it is the child
// it started in a mount namespace of its own.
const privateMountsEnv = "STALL_DNS_TEST_PRIVATE_MOUNTS"

// TestOpenCgroup2 guards both ways of opening the cgroup v2 hierarchy where
// nothing mounts it: each gives the hierarchy's root, readable through its
// /proc/self/fd path, and leaves no mount and no directory behind. The
// second mounts the hierarchy for a moment, so the test runs itself again
// in a mount namespace of its own: a test killed at that moment leaves
// nothing in this machine's mount table.
func TestOpenCgroup2(t *testing.T) {
	collectortest.RequireRoot(t, "mounting cgroup2 needs CAP_SYS_ADMIN")
	if os.Getenv(privateMountsEnv) != "1" {
		child := exec.Command(os.Args[0], "-test.run=^TestOpenCgroup2$", "-test.v")
		child.Env = append(os.Environ(), privateMountsEnv+"=1")
		child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // and / made private, by the Go runtime
		out, err := child.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestOpenCgroup2") {
			t.Fatalf("child in its own mount namespace: %v\n%s", err, out)
		}
		return
	}
	mounts := func() int {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), " - cgroup2 ")
	}
	temps := func() []string {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), "stall-dns-cgroup2-*"))
		return m
	}
	before, tempsBefore := mounts(), len(temps())
	for name, open := range map[string]func() (int, error){"fsmount": fsmountCgroup2, "mount and detach": detachedCgroup2} {
		fd, err := open()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var st unix.Statfs_t
		if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			t.Errorf("%s: file system type %#x (%v), want cgroup2", name, st.Type, err)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/self/fd/%d/cgroup.procs", fd)); err != nil {
			t.Errorf("%s: the root's cgroup.procs through the descriptor: %v", name, err)
		}
		if n := mounts(); n != before {
			t.Errorf("%s: %d cgroup2 mounts, %d before", name, n, before)
		}
		if n := len(temps()); n != tempsBefore {
			t.Errorf("%s: temporary directories left: %v", name, temps())
		}
		unix.Close(fd)
	}
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
		mount, root, err := findCgroup2Root(path)
		if err != nil || mount != tc.mount || root != tc.root {
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, mount, root, err, tc.mount, tc.root)
		}
	}
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte("30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := findCgroup2Root(path); err == nil || !strings.Contains(err.Error(), "no cgroup2 file system mounted") {
		t.Errorf("cgroup v1 only: %v", err)
	}
}
