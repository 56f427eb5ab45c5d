package host

import (
	"testing"
)

// TestMeminfo: the five exported lines in bytes, and MemAvailable absent,
// not 0, on a kernel without the line (before 3.14).
func TestMeminfo(t *testing.T) {
	r := scrape(t, build(t, newMeminfoCollector, "meminfo", "fixtures/linux-6.8/proc", ""))
	for name, want := range map[string]float64{
		"stall_memory_total_bytes":     32794148 * 1024,
		"stall_memory_available_bytes": 15123412 * 1024,
		"stall_memory_cached_bytes":    14236672 * 1024,
		"stall_memory_dirty_bytes":     2484004 * 1024,
		"stall_memory_writeback_bytes": 320932 * 1024,
	} {
		if got := r.Must(t, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	proc := writeFiles(t, t.TempDir(), map[string]string{"meminfo": "MemTotal:  100 kB\nCached:  2 kB\nDirty: 0 kB\nWriteback: 0 kB\n"})
	r = scrape(t, build(t, newMeminfoCollector, "meminfo", proc, ""))
	if _, ok := r.Get("stall_memory_available_bytes"); ok {
		t.Error("MemAvailable exported by a kernel without the line")
	}
	if got := r.Must(t, "stall_memory_total_bytes"); got != 102400 {
		t.Errorf("MemTotal = %v, want 102400", got)
	}
}

// TestMeminfoMalformed: procfs rejects the whole file at a malformed line,
// so the collector fails and counts one problem per scrape; a missing file
// (a wrong --path.procfs) fails without being counted as bad input.
func TestMeminfoMalformed(t *testing.T) {
	proc := writeFiles(t, t.TempDir(), map[string]string{"meminfo": "MemTotal:       16314284 kB\nDirty:  -5 kB\n"})
	c := build(t, newMeminfoCollector, "meminfo", proc, "")
	if r := scrape(t, c); r.Err == nil {
		t.Error("a malformed /proc/meminfo was accepted")
	}
	if got := c.problems.Count(); got != 1 {
		t.Errorf("problems = %d, want 1", got)
	}
	c = build(t, newMeminfoCollector, "meminfo", t.TempDir(), "")
	if r := scrape(t, c); r.Err == nil {
		t.Error("a missing /proc/meminfo was accepted")
	}
	if got := c.problems.Count(); got != 0 {
		t.Errorf("a missing file counted as %d problems", got)
	}
}

// TestMeminfoRealProc: this machine's /proc/meminfo has every exported line.
func TestMeminfoRealProc(t *testing.T) {
	r := scrape(t, build(t, newMeminfoCollector, "meminfo", "/proc", "/sys"))
	for _, name := range []string{"stall_memory_total_bytes", "stall_memory_available_bytes", "stall_memory_cached_bytes"} {
		if got := r.Must(t, name); got <= 0 {
			t.Errorf("%s = %v on this machine", name, got)
		}
	}
}
