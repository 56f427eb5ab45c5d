package host

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestSysctlRefresh: values are reused within the refresh interval and
// re-read after it, so a changed tunable shows up within one interval.
func TestSysctlRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		proc := writeFiles(t, t.TempDir(), map[string]string{"sys/vm/dirty_ratio": "20\n", "sys/vm/swappiness": "60\n"})
		c := build(t, newSysctlCollector, "sysctl", proc, "")
		collectortest.Compare(t, c, `
stall_vm_sysctl{name="vm.dirty_ratio"} 20
stall_vm_sysctl{name="vm.swappiness"} 60
`, "stall_vm_sysctl")
		writeFiles(t, proc, map[string]string{"sys/vm/dirty_ratio": "5\n"})
		collectortest.Advance(59 * time.Second)
		collectortest.Compare(t, c, `
stall_vm_sysctl{name="vm.dirty_ratio"} 20
stall_vm_sysctl{name="vm.swappiness"} 60
`, "stall_vm_sysctl") // within the interval: the cached value
		collectortest.Advance(time.Second)
		collectortest.Compare(t, c, `
stall_vm_sysctl{name="vm.dirty_ratio"} 5
stall_vm_sysctl{name="vm.swappiness"} 60
`, "stall_vm_sysctl") // after it: read again
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
