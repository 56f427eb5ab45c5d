//go:build livevm

package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestCgroupDirtyV2Throttle is the container case on a real cgroup v2
// kernel: a writer in a cgroup with memory.max 256 MiB writes 400 MiB
// (no fsync) to ext4 on a loop device whose writeback the cgroup's
// io.max slows to 2 MiB/s. The cgroup's own throttle ratio must reach 1
// while the host's stays low, and the kernel must really pause the writer
// in balance_dirty_pages() (its /proc/<pid>/wchan) while it is there; the
// sampler counts throttled seconds for the cgroup.
//
// It needs cgroup v2 with the memory and io controllers, which this
// development machine cannot give (memory is bound to v1), so it is built
// only with the livevm tag, by scripts/live-vm.sh for its cgroup-v2-only VM:
//
//	PKG=collector/host TAGS=livevm RUN='^TestCgroupDirtyV2Throttle$' scripts/live-vm.sh
func TestCgroupDirtyV2Throttle(t *testing.T) {
	collectortest.RequireRoot(t, "cgroups, a loop device and a mount")
	l, err := findMemoryCgroups("/proc/self/mountinfo")
	if err == nil && !l.v2 {
		err = errors.New("the memory controller is on cgroup v1 here (scripts/live-vm.sh boots a cgroup-v2-only kernel)")
	}
	collectortest.Require(t, "cgroup v2 with the memory controller", err)
	for _, tool := range []string{"losetup", "mkfs.ext4", "dd"} {
		collectortest.RequireTool(t, tool)
	}
	collectortest.RequireDisposable(t, "enables the memory and io controllers in the root cgroup and mounts ext4 on a loop device")

	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(l.root+"/cgroup.subtree_control", []byte("+memory +io"), 0); err != nil {
		t.Fatalf("enabling memory and io for the root's children: %v", err)
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	run("mkfs.ext4", "-q", dev)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-t", "ext4", dev, mnt)
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	majmin := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))

	p := fmt.Sprintf("/stall-test-%d-v2", os.Getpid())
	cg := l.root + p
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Errorf("removing %s: %v", cg, err)
		}
	})
	for file, v := range map[string]string{"memory.max": "268435456", "io.max": majmin + " wbps=2097152"} {
		if err := os.WriteFile(cg+"/"+file, []byte(v), 0); err != nil {
			t.Fatalf("%s/%s: %v", cg, file, err)
		}
	}
	// Before the unmount: lift the write limit, so the pages left dirty
	// are written back at once.
	t.Cleanup(func() { os.WriteFile(cg+"/io.max", []byte(majmin+" wbps=max"), 0) })

	writer := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs=1M count=400 status=none`,
		"sh", cg, filepath.Join(mnt, "commitlog"))
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Process.Kill(); writer.Wait() })

	c := newCgroupDirty(testConfig(t, "cgroup_dirty", "/proc", "/sys", nil), testSettings(t))
	c.watched = &watchedSet{}
	c.watched.publish([]watchedCgroup{{service: serviceBroker, v2Path: p}})
	sam := newCgroupSampler(testConfig(t, "sampler", "/proc", "/sys", nil), testSettings(t))
	sam.watched = c.watched
	vmSrc := &procSource{path: "/proc/vmstat"}
	defer vmSrc.close()

	var (
		maxRatio, hostAtMax float64
		pausedSeen          bool
		buf                 []byte
		v                   VMStat
	)
	collectortest.WaitFor(t, 3*time.Minute, "the cgroup's ratio at 1 and its writer paused", func() error {
		if buf, err = vmSrc.ReadNow(buf); err != nil {
			t.Fatal(err)
		}
		ParseVMStat(buf, &v)
		sam.tick(&v)
		host, _ := v.ThrottleRatio()
		r := scrape(t, c)
		ratio, ok := r.Get("stall_cgroup_dirty_throttle_ratio", "cgroup", p)
		if !ok {
			t.Fatalf("no throttle ratio for %s (err %v):\n%s", p, r.Err, r.Dump())
		}
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", writer.Process.Pid))
		paused := strings.Contains(string(wchan), "balance_dirty_pages")
		if ratio > maxRatio {
			maxRatio, hostAtMax = ratio, host
			t.Logf("cgroup ratio %.3f (dirty+writeback %.1f MiB, threshold %.1f MiB), host ratio %.3f, writer in %s",
				ratio, (r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", p)+r.Must(t, "stall_cgroup_writeback_bytes", "cgroup", p))/(1<<20),
				r.Must(t, "stall_cgroup_dirty_threshold_bytes", "cgroup", p)/(1<<20), host, wchan)
		}
		if paused && ratio >= 0.9 && !pausedSeen {
			pausedSeen = true
			t.Logf("writer paused in %s at cgroup ratio %.3f, host ratio %.3f", wchan, ratio, host)
		}
		if maxRatio < 1 || !pausedSeen {
			return fmt.Errorf("cgroup ratio %.3f (highest %.3f), writer in %q", ratio, maxRatio, wchan)
		}
		return nil
	})
	if hostAtMax >= 0.5 {
		t.Errorf("the host's ratio was %.3f when the cgroup's peaked: not the container case", hostAtMax)
	}
	if _, _, secs, _ := sampledCgroup(t, sam, p); secs == 0 {
		t.Error("the sampler counted no throttled second for the cgroup")
	}
}
