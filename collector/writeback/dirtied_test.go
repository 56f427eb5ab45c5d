package writeback

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

// fakeProc is a /proc of a few processes and a /proc/vmstat, rewritten
// between reads.
type fakeProc struct {
	t   *testing.T
	dir string
}

func (f fakeProc) path(elem ...string) string {
	return filepath.Join(append([]string{f.dir}, elem...)...)
}

func (f fakeProc) write(rel, content string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.path(rel)), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.path(rel), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// dirty sets nr_dirty + nr_writeback against a background threshold of 1000 pages.
func (f fakeProc) dirty(pages int) {
	f.write("vmstat", fmt.Sprintf("nr_dirty %d\nnr_writeback 0\nnr_dirty_threshold 2000\nnr_dirty_background_threshold 1000\n", pages))
}

func (f fakeProc) process(pid int, comm, cgroup string, writeBytes uint64) {
	id := strconv.Itoa(pid)
	f.write(id+"/comm", comm+"\n")
	f.write(id+"/cgroup", "0::"+cgroup+"\n")
	f.write(id+"/cmdline", comm+"\x00")
	f.write(id+"/io", fmt.Sprintf("rchar: 0\nwchar: %d\nsyscr: 0\nsyscw: 0\nread_bytes: 0\nwrite_bytes: %d\ncancelled_write_bytes: 0\n", writeBytes, writeBytes))
}

// TestDirtiers guards who-dirties: nothing read below the background
// threshold (a process whose io file would be counted is not), the first
// read past it a baseline, then the growth between reads, a process
// started in between whole, the top N by bytes named and the rest
// "other", a fall below the threshold forgetting the baseline, and reads
// below the host's threshold while tasks are paused (a cgroup's own
// throttle point).
func TestDirtiers(t *testing.T) {
	f := fakeProc{t, t.TempDir()}
	fs, err := procfs.NewFS(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	d := &dirtiers{fs: fs, vmstat: f.path("vmstat"), procPath: f.path, top: 2}
	tab := proclabel.NewTable[counts](10, time.Minute)
	paused := false
	read := func(wantActive bool) {
		t.Helper()
		active, _, err := d.read(tab, paused)
		if err != nil || active != wantActive {
			t.Fatalf("read: active %v, %v; want active %v", active, err, wantActive)
		}
	}
	got := func(comm, cgroup string) uint64 {
		c, ok := tab.Lookup(proclabel.Key{Comm: comm, Cgroup: cgroup})
		if !ok {
			return 0
		}
		return c.dirtied
	}

	f.process(100, "broker", "/system.slice/rocketmq.service", 1<<20)
	f.process(200, "dd", "/user.slice/user-0.slice/session-1.scope", 5<<20)
	f.process(300, "cp", "/system.slice/backup.service", 0)
	f.dirty(999) // at the threshold, not past it
	read(false)
	if d.last != nil || tab.Len() != 0 {
		t.Fatalf("below the threshold: %d baselines, %d series", len(d.last), tab.Len())
	}

	f.dirty(1500)
	read(true) // baseline only
	if tab.Len() != 0 || tab.Other().dirtied != 0 {
		t.Fatalf("first read past the threshold counted: %d series, other %d", tab.Len(), tab.Other().dirtied)
	}

	f.process(100, "broker", "/system.slice/rocketmq.service", 1<<20+8192)
	f.process(200, "dd", "/user.slice/user-0.slice/session-1.scope", 9<<20)
	f.process(300, "cp", "/system.slice/backup.service", 4096)
	f.process(400, "tar", "/system.slice/backup.service", 2<<20) // started since
	read(true)
	if g := got("dd", "session-1.scope"); g != 4<<20 {
		t.Errorf("dd: %d, want 4 MiB", g)
	}
	if g := got("tar", "backup.service"); g != 2<<20 {
		t.Errorf("tar (new): %d, want 2 MiB", g)
	}
	// top 2: dd and tar named; broker and cp are "other".
	if g := tab.Other().dirtied; g != 8192+4096 || tab.Len() != 2 {
		t.Errorf("other %d, %d series: want 12288 and 2", g, tab.Len())
	}

	f.dirty(10) // below: forget
	f.process(200, "dd", "/user.slice/user-0.slice/session-1.scope", 20<<20)
	read(false)
	f.dirty(1200)
	read(true) // a new baseline: dd's 11 MiB written below the threshold are not counted
	f.process(200, "dd", "/user.slice/user-0.slice/session-1.scope", 21<<20)
	read(true)
	if g := got("dd", "session-1.scope"); g != 5<<20 {
		t.Errorf("dd after a fall below the threshold: %d, want 5 MiB", g)
	}

	// A container at its own throttle point: the host below its background threshold, but tasks
	// paused since the last read.
	f.dirty(10)
	read(false)
	paused = true
	read(true) // a baseline
	f.process(200, "dd", "/user.slice/user-0.slice/session-1.scope", 22<<20)
	read(true)
	if g := got("dd", "session-1.scope"); g != 6<<20 {
		t.Errorf("dd while paused below the host's threshold: %d, want 6 MiB", g)
	}
}
