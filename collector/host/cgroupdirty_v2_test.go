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
	_ = exec.Command("modprobe", "ext4").Run() // a module in Debian's kernel; built in elsewhere
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
		pollsAfter          int     // polls since the writer was first seen paused
		peak, peakThresh    float64 // the highest dirty + writeback bytes, and the threshold then
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
		bytes := r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", p) + r.Must(t, "stall_cgroup_writeback_bytes", "cgroup", p)
		thresh := r.Must(t, "stall_cgroup_dirty_threshold_bytes", "cgroup", p)
		if bytes > peak {
			peak, peakThresh = bytes, thresh
		}
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", writer.Process.Pid))
		paused := strings.Contains(string(wchan), "balance_dirty_pages")
		if ratio > maxRatio {
			maxRatio, hostAtMax = ratio, host
			t.Logf("cgroup ratio %.3f (dirty+writeback %.1f MiB, threshold %.1f MiB), host ratio %.3f, writer in %s",
				ratio, bytes/(1<<20), thresh/(1<<20), host, wchan)
		}
		if paused && ratio >= 0.9 && !pausedSeen {
			pausedSeen = true
			t.Logf("writer paused in %s at cgroup ratio %.3f, host ratio %.3f", wchan, ratio, host)
		}
		if pausedSeen {
			pollsAfter++
		}
		// A few more polls once paused: the kernel holds the cgroup's
		// dirty pages at its own limit, which must be ours.
		if maxRatio < 1 || pollsAfter < 10 {
			return fmt.Errorf("cgroup ratio %.3f (highest %.3f), writer in %q", ratio, maxRatio, wchan)
		}
		return nil
	})
	if b, err := os.ReadFile(cg + "/memory.stat"); err == nil {
		t.Logf("%s/memory.stat while paused (fixtures/memstat/v2-6.1-vm.stat):\n%s", cg, b)
	}
	t.Logf("peak: %.1f MiB dirty and under writeback, the computed threshold then %.1f MiB", peak/(1<<20), peakThresh/(1<<20))
	if peak < 0.9*peakThresh || peak > 1.1*peakThresh {
		t.Errorf("the kernel held the cgroup at %.1f MiB, the computed threshold is %.1f MiB: not the kernel's limit", peak/(1<<20), peakThresh/(1<<20))
	}
	if hostAtMax >= 0.5 {
		t.Errorf("the host's ratio was %.3f when the cgroup's peaked: not the container case", hostAtMax)
	}
	if _, _, secs, _ := sampledCgroup(t, sam, p); secs == 0 {
		t.Error("the sampler counted no throttled second for the cgroup")
	}
}

// TestCgroupDirtyV2Namespace runs the collector in a cgroup namespace of
// its own, as in a container on cgroup v2: the test binary is started
// again (TestCgroupDirtyNamespaceHelper) in a cgroup of the test's, under
// unshare --cgroup --mount, with its namespace's cgroup2 mounted at a
// directory of its own and the host's hierarchy still at /sys/fs/cgroup,
// which its mountinfo shows as "/../..". A sleeping process in another
// cgroup of the test's is watched by the path the namespace sees
// ("/../watched"); the collector must find it at its real place.
func TestCgroupDirtyV2Namespace(t *testing.T) {
	collectortest.RequireRoot(t, "cgroups and a cgroup namespace")
	l, err := findMemoryCgroups("/proc/self/mountinfo")
	if err == nil && !l.v2 {
		err = errors.New("the memory controller is on cgroup v1 here (scripts/live-vm.sh boots a cgroup-v2-only kernel)")
	}
	collectortest.Require(t, "cgroup v2 with the memory controller", err)
	collectortest.RequireTool(t, "unshare")
	collectortest.RequireDisposable(t, "enables the memory controller in the root cgroup")
	if err := os.WriteFile(l.root+"/cgroup.subtree_control", []byte("+memory"), 0); err != nil {
		t.Fatal(err)
	}
	top := fmt.Sprintf("/stall-test-%d-ns", os.Getpid())
	for _, p := range []string{top, top + "/exporter", top + "/watched"} {
		if err := os.Mkdir(l.root+p, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(l.root + p) })
	}
	if err := os.WriteFile(l.root+top+"/cgroup.subtree_control", []byte("+memory"), 0); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec sleep 600`, "sh", l.root+top+"/watched")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	collectortest.WaitFor(t, 10*time.Second, "the sleeper in its cgroup", func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleeper.Process.Pid))
		if err != nil || !strings.Contains(string(b), top+"/watched") {
			return fmt.Errorf("%q %v", b, err)
		}
		return nil
	})
	own := t.TempDir()
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec unshare --cgroup --mount sh -c 'mount -t cgroup2 none "$2" && exec "$3" -test.v -test.run "^TestCgroupDirtyNamespaceHelper$"' sh "$1" "$2" "$3"`,
		"sh", l.root+top+"/exporter", own, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("STALL_NS_HELPER=%d:%s", sleeper.Process.Pid, top+"/watched"))
	out, err := cmd.CombinedOutput()
	t.Logf("in the namespace:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCgroupDirtyNamespaceHelper") {
		t.Errorf("the collector in the namespace failed: %v", err)
	}
}

// TestCgroupDirtyNamespaceHelper is TestCgroupDirtyV2Namespace's collector
// inside the namespace (STALL_NS_HELPER=<pid>:<its real cgroup>); without
// the variable it checks nothing.
func TestCgroupDirtyNamespaceHelper(t *testing.T) {
	pid, want, ok := strings.Cut(os.Getenv("STALL_NS_HELPER"), ":")
	if !ok {
		return
	}
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the sleeper's /proc/%s/cgroup from here: %q", pid, b)
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for l := range strings.Lines(string(mounts)) {
		if strings.Contains(l, "cgroup2") {
			t.Logf("mountinfo: %s", strings.TrimSpace(l))
		}
	}
	v2, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(b)), "0::"), "\n")
	c := newCgroupDirty(testConfig(t, "cgroup_dirty", "/proc", "/sys", nil), testSettings(t))
	c.watched = &watchedSet{}
	c.watched.publish([]watchedCgroup{{service: serviceRedis, v2Path: v2}})
	r := scrape(t, c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	t.Logf("layout %+v", *c.layout)
	r.Must(t, "stall_cgroup_watched", "cgroup", want, "service", serviceRedis)
}
