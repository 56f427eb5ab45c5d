package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestCgroupDirtyRealCgroup runs the collector on this machine's memory
// cgroups: it makes two empty child cgroups of its own at the top of the
// memory hierarchy (v1 here: memory is bound to cgroup v1), writes 64 MiB
// to a file on disk from a process in the first (no fsync: the pages stay
// dirty until the kernel writes them back), and sees them in the scrape,
// between what memory.stat said just before and just after it; the idle
// second cgroup shows none. Both cgroups are removed at the end (the
// kernel moves the pages' charge to the parent). It changes nothing of
// the host's: no sysctl, no limit, only its own processes are moved.
func TestCgroupDirtyRealCgroup(t *testing.T) {
	collectortest.RequireRoot(t, "creating memory cgroups")
	l, err := findMemoryCgroups("/proc/self/mountinfo")
	collectortest.Require(t, "a memory cgroup hierarchy (v1 memory controller or cgroup2 with memory)", err)
	name := fmt.Sprintf("stall-test-%d", os.Getpid())
	writer, idle := "/"+name+"-writer", "/"+name+"-idle"
	for _, p := range []string{writer, idle} {
		dir := l.root + p
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// The writer has exited; an empty cgroup can be removed
			// whatever pages are still charged to it.
			if err := os.Remove(dir); err != nil {
				t.Errorf("removing %s: %v", dir, err)
			}
		})
	}
	file := filepath.Join(t.TempDir(), "dirty")
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs=1M count=64 status=none`,
		"sh", l.root+writer, file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v: %s", err, out)
	}

	proc := "/proc"
	c := newCgroupDirty(testConfig(t, "cgroup_dirty", proc, "/sys", nil), testSettings(t))
	// Watched as supervision would publish them (the test is not a broker).
	c.watched = &watchedSet{}
	c.watched.publish([]watchedCgroup{
		{service: serviceBroker, v2Path: writer, v1Mem: writer},
		{service: serviceRedis, v2Path: idle, v1Mem: idle},
	})
	kernel := func(p string) uint64 {
		var m MemStat
		var r memStatReader
		if _, _, err := r.read(l.root+p, &m); err != nil {
			t.Fatal(err)
		}
		d, w, ok := m.Dirty()
		if !ok {
			t.Fatalf("%s/memory.stat has no dirty fields", l.root+p)
		}
		return d + w
	}
	before := kernel(writer)
	start := time.Now()
	r := scrape(t, c)
	after := kernel(writer)
	if r.Err != nil {
		t.Fatalf("scrape: %v", r.Err)
	}
	if before < 16<<20 {
		t.Fatalf("only %d bytes of the 64 MiB written were still dirty or under writeback a moment later: the kernel wrote them back (vm.dirty_* lowered by another test?)", before)
	}
	got := r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", writer) + r.Must(t, "stall_cgroup_writeback_bytes", "cgroup", writer)
	if got < float64(min(before, after)) || got > float64(max(before, after)) {
		t.Errorf("scrape: %v dirty+writeback bytes, memory.stat said %d before and %d after", got, before, after)
	}
	if v := r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", idle); v != 0 {
		t.Errorf("the idle cgroup has %v dirty bytes", v)
	}
	r.Must(t, "stall_cgroup_watched", "cgroup", writer, "service", serviceBroker)
	if !l.v2 {
		for _, m := range r.Metrics {
			if m.Name == "stall_cgroup_dirty_threshold_bytes" || m.Name == "stall_cgroup_dirty_throttle_ratio" {
				t.Errorf("cgroup v1 exported %s%v: v1 has no per-cgroup throttling", m.Name, m.Labels)
			}
		}
	}
	// Not watched, the walk finds it too: best first, it opens the
	// dirtiest cgroups first.
	top := newCgroupDirty(testConfig(t, "cgroup_dirty", proc, "/sys", nil), testSettings(t, "--cgroup-dirty.top=1000"))
	top.watched = &watchedSet{}
	if v := scrape(t, top).Must(t, "stall_cgroup_dirty_bytes", "cgroup", writer); v == 0 {
		t.Errorf("the walk found the writer's cgroup without its dirty pages")
	}
	t.Logf("%s hierarchy at %s: %v dirty+writeback bytes in the scrape (memory.stat: %d before, %d after; scrape took %v; %v reads)",
		map[bool]string{true: "cgroup v2", false: "cgroup v1 memory"}[l.v2], l.root, got, before, after,
		time.Since(start).Round(time.Microsecond), r.Must(t, "stall_cgroup_dirty_reads"))
}

// TestCgroupDirtyWatchesSupervision: a real redis-server in a memory
// cgroup of the test's own is found by the supervision collector's scan of
// /proc, which publishes its cgroup; the cgroup_dirty collector then
// exports that cgroup as watched, with its dirty bytes.
func TestCgroupDirtyWatchesSupervision(t *testing.T) {
	collectortest.RequireRoot(t, "creating a memory cgroup")
	redis := collectortest.RequireTool(t, "redis-server")
	l, err := findMemoryCgroups("/proc/self/mountinfo")
	collectortest.Require(t, "a memory cgroup hierarchy (v1 memory controller or cgroup2 with memory)", err)
	p := fmt.Sprintf("/stall-test-%d-redis", os.Getpid())
	dir := l.root + p
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	tmp := t.TempDir()
	// No TCP port: a unix socket, without which redis-server exits at once.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" --port 0 --unixsocket "$3/redis.sock" --save "" --appendonly no --dir "$3"`,
		"sh", dir, redis, tmp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	collectortest.WaitFor(t, 10*time.Second, "redis-server to run in its cgroup", func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if err != nil || string(b) != "redis-server\n" {
			return fmt.Errorf("comm %q, %v", b, err)
		}
		return nil
	})
	collectortest.WaitFor(t, 10*time.Second, "redis-server's socket", func() error {
		_, err := os.Stat(tmp + "/redis.sock")
		return err
	})
	sup := newSupervision(testConfig(t, "supervision", "/proc", "/sys", nil), testSettings(t))
	if r := scrape(t, sup); r.Must(t, "stall_watched_processes", "service", serviceRedis, "supervision", stateDetached)+
		r.Must(t, "stall_watched_processes", "service", serviceRedis, "supervision", stateTerminal)+
		r.Must(t, "stall_watched_processes", "service", serviceRedis, "supervision", stateNohup) == 0 {
		t.Fatalf("supervision does not see the redis-server:\n%s", r.Dump())
	}
	c := newCgroupDirty(testConfig(t, "cgroup_dirty", "/proc", "/sys", nil), testSettings(t))
	r := scrape(t, c)
	r.Must(t, "stall_cgroup_watched", "cgroup", p, "service", serviceRedis)
	r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", p)
}
