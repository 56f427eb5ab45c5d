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

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
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
		if p.Other().n != 3 || count(p, processKey{"java", "", "kafka.service"}) != 2 || p.Len() != 3 {
			t.Fatalf("other %d %d names", p.Other().n, p.Len())
		}
		collectortest.Advance(11 * time.Minute)
		p.add(processKey{"java", "", "kafka.service"}, 1)
		p.addQueries(processKey{"java", "", "pod:0b1c2d3e-0000-4000-8000-000000000001/3f2a9c1b7d4e"}, qtPTR, 4)
		p.add(processKey{"storm", "", ""}, 300) // getent idle for 11 min: replaced; no cgroup is "unknown"
		if _, ok := p.Lookup(processKey{"getent", "", "cron.service"}.labels()); ok || count(p, processKey{"storm", "", proclabel.Unknown}) != 300 ||
			count(p, processKey{"java", "", "kafka.service"}) != 3 || p.Other().n != 3 {
			t.Fatalf("after eviction: other %d %d names", p.Other().n, p.Len())
		}
		collectortest.Advance(11 * time.Minute)
		// Two JVMs in one cgroup: a series each, by what they run.
		p.add(processKey{"java", "BrokerStartup", "rocketmq.service"}, 1)
		p.add(processKey{"java", "consumer-app.jar", "rocketmq.service"}, 1)
		if p.Len() != 3 || count(p, processKey{"java", "BrokerStartup", "rocketmq.service"}) != 1 {
			t.Fatalf("two JVMs in one cgroup: %d names", p.Len())
		}
		collectortest.Advance(11 * time.Minute)
		p.add(processKey{strings.Repeat("x", 100) + "\xff", strings.Repeat("z", 100) + "\xff", strings.Repeat("y", 100) + "\xff"}, 1) // bounded and valid UTF-8 even from /proc
		p.Each(func(k proclabel.Key, _ *processCount) {
			if len(k.Comm) > collector.MaxLabelBytes+len("…") || len(k.Main) > proclabel.MaxMainLen+len("…") || len(k.Cgroup) > proclabel.MaxCgroupLen+len("…") {
				t.Errorf("labels %q longer than %d/%d/%d bytes", k, collector.MaxLabelBytes, proclabel.MaxMainLen, proclabel.MaxCgroupLen)
			}
		})
	})
}

// count is process k's lookups, 0 without a series.
func count(p *processTable, k processKey) uint64 {
	if c, ok := p.Lookup(k.labels()); ok {
		return c.n
	}
	return 0
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
