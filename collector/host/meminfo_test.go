package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func meminfoProc(t *testing.T, content string) collector.Paths {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return collector.Paths{Procfs: dir}
}

func newTestMeminfo(t *testing.T, paths collector.Paths) *meminfoCollector {
	t.Helper()
	return build(t, newMeminfoCollector, "meminfo", paths.Procfs, "")
}

// TestMeminfo: the five exported lines in bytes, and MemAvailable absent,
// not 0, on a kernel without the line (before 3.14).
func TestMeminfo(t *testing.T) {
	c := newTestMeminfo(t, collector.Paths{Procfs: "fixtures/linux-6.8/proc"})
	mfs := samplerGather(t, c)
	for name, want := range map[string]float64{
		"stall_memory_total_bytes":     32794148 * 1024,
		"stall_memory_available_bytes": 15123412 * 1024,
		"stall_memory_cached_bytes":    14236672 * 1024,
		"stall_memory_dirty_bytes":     2484004 * 1024,
		"stall_memory_writeback_bytes": 320932 * 1024,
	} {
		if got := kmsgGauge(mfs, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	c = newTestMeminfo(t, meminfoProc(t, "MemTotal:  100 kB\nCached:  2 kB\nDirty: 0 kB\nWriteback: 0 kB\n"))
	mfs = samplerGather(t, c)
	if _, ok := mfs["stall_memory_available_bytes"]; ok {
		t.Error("MemAvailable exported by a kernel without the line")
	}
	if got := kmsgGauge(mfs, "stall_memory_total_bytes"); got != 102400 {
		t.Errorf("MemTotal = %v, want 102400", got)
	}
}

// TestMeminfoMalformed: procfs rejects the whole file at a malformed line,
// so the collector fails and counts one problem per scrape; a missing file
// (a wrong --path.procfs) fails without being counted as bad input.
func TestMeminfoMalformed(t *testing.T) {
	c := newTestMeminfo(t, meminfoProc(t, "MemTotal:       16314284 kB\nDirty:  -5 kB\n"))
	if err := c.Update(context.Background(), make(chan prometheus.Metric, 16)); err == nil {
		t.Error("a malformed /proc/meminfo was accepted")
	}
	if got := c.problems.Count(); got != 1 {
		t.Errorf("problems = %d, want 1", got)
	}
	c = newTestMeminfo(t, collector.Paths{Procfs: t.TempDir()})
	if err := c.Update(context.Background(), make(chan prometheus.Metric, 16)); err == nil {
		t.Error("a missing /proc/meminfo was accepted")
	}
	if got := c.problems.Count(); got != 0 {
		t.Errorf("a missing file counted as %d problems", got)
	}
}

// TestMeminfoRealProc: this machine's /proc/meminfo has every exported line.
func TestMeminfoRealProc(t *testing.T) {
	mfs := samplerGather(t, newTestMeminfo(t, collector.Paths{Procfs: "/proc"}))
	for _, name := range []string{"stall_memory_total_bytes", "stall_memory_available_bytes", "stall_memory_cached_bytes"} {
		if got := kmsgGauge(mfs, name); got <= 0 {
			t.Errorf("%s = %v on this machine", name, got)
		}
	}
}
