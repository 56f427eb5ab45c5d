package host

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestPressureFixture: some and full of every resource in seconds; irq has
// only a full line.
func TestPressureFixture(t *testing.T) {
	c := build(t, newPressureCollector, "pressure", "fixtures/linux-6.8/proc", "")
	if err := collectortest.Compare(t, c, `
stall_pressure_stalled_seconds_total{resource="cpu",scope="full"} 0
stall_pressure_stalled_seconds_total{resource="cpu",scope="some"} 912.341234
stall_pressure_stalled_seconds_total{resource="io",scope="full"} 39123.412341
stall_pressure_stalled_seconds_total{resource="io",scope="some"} 41234.123412
stall_pressure_stalled_seconds_total{resource="irq",scope="full"} 41.234123
stall_pressure_stalled_seconds_total{resource="memory",scope="full"} 712.341234
stall_pressure_stalled_seconds_total{resource="memory",scope="some"} 812.341234
`, "stall_pressure_stalled_seconds_total"); err != nil {
		t.Fatal(err)
	}
}

// TestPressureMalformedAndAbsent: a malformed file drops its resource,
// counts one problem and fails the scrape; the other resources are sent. No
// /proc/pressure at all is "no data".
func TestPressureMalformedAndAbsent(t *testing.T) {
	proc := writeFiles(t, t.TempDir(), map[string]string{
		"pressure/io":     "some avg10=x avg60=0 avg300=0 total=1\n",
		"pressure/memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
		"pressure/cpu":    "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfuture avg10=1\n", // unknown line kinds are skipped
	})
	c := build(t, newPressureCollector, "pressure", proc, "")
	// The good resources are sent; the malformed io file sends nothing.
	err := collectortest.Compare(t, c, `
stall_pressure_stalled_seconds_total{resource="cpu",scope="some"} 5e-06
stall_pressure_stalled_seconds_total{resource="memory",scope="full"} 1
stall_pressure_stalled_seconds_total{resource="memory",scope="some"} 2
`, "stall_pressure_stalled_seconds_total")
	if err == nil || !strings.Contains(err.Error(), "/proc/pressure/io") {
		t.Errorf("err = %v, want the malformed io file", err)
	}
	if c.problems.Count() != 1 {
		t.Errorf("problems = %d, want 1", c.problems.Count())
	}

	c = build(t, newPressureCollector, "pressure", t.TempDir(), "")
	if err := scrape(t, c).Err; !errors.Is(err, collector.ErrNoData) {
		t.Errorf("no /proc/pressure: %v, want ErrNoData", err)
	}
}

// TestPressureRealProc: this machine's PSI files. A kernel without them
// fails under make test and skips under a plain go test: every kernel make
// test is meant for (Debian-like, 4.20+) has PSI on, a kernel booted with it
// off (RHEL's psi=0 default) only needs psi=1, and the collector's answer on
// a kernel without PSI (no data) is covered above on fixtures, so a skip
// here would only hide that the real files were never read.
func TestPressureRealProc(t *testing.T) {
	_, err := os.ReadFile("/proc/pressure/memory")
	collectortest.Require(t, "pressure stall information (Linux 4.20+ with CONFIG_PSI; boot with psi=1 where it is off by default)", err)
	r := scrape(t, build(t, newPressureCollector, "pressure", "/proc", "/sys"))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, ok := r.Get("stall_pressure_stalled_seconds_total", "resource", "memory", "scope", "some"); !ok {
		t.Errorf("no memory/some from this machine:\n%s", r.Dump())
	}
}
