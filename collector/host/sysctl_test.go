package host

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// sysctlValues scrapes c: tunable name → value.
func sysctlValues(t *testing.T, c *sysctlCollector) map[string]float64 {
	t.Helper()
	r := scrape(t, c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	out := map[string]float64{}
	for _, m := range r.Metrics {
		out[m.Labels["name"]] = m.Value
	}
	return out
}

// TestSysctlRefresh: values are reused within the refresh interval and
// re-read after it, so a changed tunable shows up within one interval.
func TestSysctlRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		proc := writeFiles(t, t.TempDir(), map[string]string{"sys/vm/dirty_ratio": "20\n", "sys/vm/swappiness": "60\n"})
		c := build(t, newSysctlCollector, "sysctl", proc, "")
		got := sysctlValues(t, c)
		if len(got) != 2 || got["vm.dirty_ratio"] != 20 || got["vm.swappiness"] != 60 {
			t.Fatalf("first read: %v", got)
		}
		writeFiles(t, proc, map[string]string{"sys/vm/dirty_ratio": "5\n"})
		collectortest.Advance(59 * time.Second)
		if got := sysctlValues(t, c); got["vm.dirty_ratio"] != 20 {
			t.Errorf("within the interval: dirty_ratio %v, want the cached 20", got["vm.dirty_ratio"])
		}
		collectortest.Advance(time.Second)
		if got := sysctlValues(t, c); got["vm.dirty_ratio"] != 5 {
			t.Errorf("after the interval: dirty_ratio %v, want 5", got["vm.dirty_ratio"])
		}
	})
}

// TestSysctlBadValue: a value that is not a number is counted as bad input
// and fails the scrape; a missing /proc/sys/vm fails it without counting.
func TestSysctlBadValue(t *testing.T) {
	c := build(t, newSysctlCollector, "sysctl", writeFiles(t, t.TempDir(), map[string]string{"sys/vm/swappiness": "zz\n"}), "")
	if r := scrape(t, c); r.Err == nil || c.problems.Count() != 1 {
		t.Errorf("a malformed tunable: err %v, %d problems; want a failure and 1", r.Err, c.problems.Count())
	}
	c = build(t, newSysctlCollector, "sysctl", t.TempDir(), "")
	if r := scrape(t, c); r.Err == nil || c.problems.Count() != 0 {
		t.Errorf("no /proc/sys/vm: err %v, %d problems; want a failure and 0", r.Err, c.problems.Count())
	}
}
