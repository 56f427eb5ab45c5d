package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// scrapeHost runs the host collectors on procfs/sysfs through the real
// metrics handler and returns the samples.
func scrapeHost(t *testing.T, procfs, sysfs string) collectortest.Result {
	t.Helper()
	return collectortest.Parse(t, get(t, hostHandler(t, procfs, sysfs), "/metrics").Body.String())
}

// TestWrongProcfs: a --path.procfs without the files every Linux has is a
// failure, not "no data"; PSI and zoneinfo, which containers and old
// kernels lack, stay "no data".
func TestWrongProcfs(t *testing.T) {
	empty := t.TempDir()
	s := scrapeHost(t, empty, empty)
	for c, want := range map[string]float64{
		"vmstat": 0, "meminfo": 0, "diskstats": 0, "sysctl": 0,
		"pressure": 1, "zoneinfo": 1,
	} {
		if got := s.Must(t, "stall_scrape_collector_success", "collector", c); got != want {
			t.Errorf("%s success = %v on an empty procfs, want %v", c, got, want)
		}
	}
}

// TestWrongProcfsSampler: the sampler on an empty procfs says it is blind
// (issue 11: it reported success 1 while vmstat, meminfo and diskstats
// reported 0).
func TestWrongProcfsSampler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		empty := t.TempDir()
		srv := newTestServer(testSetup{built: hostBuilt(t, empty, empty, "sampler")})
		ctx, cancel := context.WithCancel(context.Background())
		startRunners(ctx, srv.entries)
		collectortest.Advance(2500 * time.Millisecond) // two ticks at the default --sampler.interval=1s
		synctest.Wait()
		s := collectortest.Parse(t, get(t, srv.metrics, "/metrics").Body.String())
		if n := s.Must(t, "stall_sampler_ticks_total"); n < 2 {
			t.Errorf("%v sampler ticks in 2.5 s", n)
		}
		if got := s.Must(t, "stall_scrape_collector_success", "collector", "sampler"); got != 0 {
			t.Errorf("sampler success = %v on an empty procfs, want 0", got)
		}
		cancel()
		synctest.Wait()
	})
}

// TestGarbageProcfs: malformed files are counted as parse errors, the
// collectors that can keep the good lines do, and nothing panics.
func TestGarbageProcfs(t *testing.T) {
	proc := t.TempDir()
	write := func(name, content string) {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("vmstat", "nr_dirty 5\n\x00\x01\x02 junk\nnr_writeback -1\n"+strings.Repeat("x", 1<<20)+"\nnr_dirty_threshold 100\nnr_dirty_background_threshold 50\n")
	write("meminfo", "MemTotal: -5 kB\n")
	write("diskstats", "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n garbage\n")
	write("zoneinfo", "Node 0, zone Normal\n  pages free zz\n        min 7\n")
	write("pressure/io", "some avg10=x avg60=0 avg300=0 total=1\n")
	write("pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n")
	write("sys/vm/swappiness", "zz\n")
	s := scrapeHost(t, proc, proc)

	// vmstat: "nr_writeback -1" and the 1 MiB line without a value; the junk
	// line has a name vmstat does not use, so it is skipped unvalidated.
	for c, wantErrs := range map[string]float64{"vmstat": 2, "meminfo": 1, "diskstats": 1, "zoneinfo": 1, "pressure": 1, "sysctl": 1} {
		if got := s.Must(t, "stall_collector_parse_errors_total", "collector", c); got != wantErrs {
			t.Errorf("%s parse errors = %v, want %v", c, got, wantErrs)
		}
	}
	// vmstat keeps its good lines: nr_dirty 5 pages, no writeback (its line was bad).
	if _, ok := s.Get("stall_vm_dirty_bytes"); !ok {
		t.Error("vmstat dropped its good lines")
	}
	if _, ok := s.Get("stall_vm_writeback_bytes"); ok {
		t.Error("a malformed nr_writeback line produced a value")
	}
	// diskstats keeps the device before the bad line; pressure keeps memory.
	if s.Must(t, "stall_disk_reads_completed_total", "device", "sda") != 1 {
		t.Error("diskstats dropped the good line before the bad one")
	}
	if s.Must(t, "stall_pressure_stalled_seconds_total", "resource", "memory", "scope", "full") != 1 {
		t.Error("pressure dropped memory because io was malformed")
	}
}
