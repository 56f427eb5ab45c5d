package host

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	register("sysctl", "Page-cache and reclaim tunables (vm.dirty_*, swappiness, min_free_kbytes …), from /proc/sys/vm", newSysctlCollector)
}

var (
	vmSysctl = collector.NewMetric("vm_sysctl",
		"Value of a page-cache or reclaim tunable as written in /proc/sys/vm/<name>, re-read every --sysctl.refresh-interval.",
		prometheus.GaugeValue, "name")
)

type sysctlCollector struct {
	fs       procfs.FS
	problems *collector.Problems
	refresh  time.Duration

	mu     sync.Mutex
	vm     *procfs.VM
	readAt time.Time
}

func newSysctlCollector(cfg collector.Config, s settings) *sysctlCollector {
	return &sysctlCollector{fs: cfg.ProcFS, problems: cfg.Problems, refresh: s.sysctlRefresh}
}

// Update exports the fixed set of vm.* tunables that decide dirty-page
// throttling and reclaim, read with procfs FS.VM() at most once per refresh
// interval. A tunable this kernel lacks (watermark_scale_factor before 4.6)
// is absent.
func (c *sysctlCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vm == nil || c.refresh <= 0 || time.Since(c.readAt) >= c.refresh {
		vm, err := c.fs.VM()
		if err != nil {
			// Missing /proc/sys/vm is a wrong --path.procfs; a value that is
			// not a number makes procfs reject the whole directory.
			if procfsContentError(err) {
				c.problems.Add("sysctl_value", 1, err)
			}
			return err
		}
		c.vm, c.readAt = vm, time.Now()
	}
	vm := c.vm
	for _, t := range [...]struct {
		name string
		v    *int64
	}{
		{"vm.dirty_ratio", vm.DirtyRatio},
		{"vm.dirty_background_ratio", vm.DirtyBackgroundRatio},
		{"vm.dirty_bytes", vm.DirtyBytes},
		{"vm.dirty_background_bytes", vm.DirtyBackgroundBytes},
		{"vm.dirty_expire_centisecs", vm.DirtyExpireCentisecs},
		{"vm.dirty_writeback_centisecs", vm.DirtyWritebackCentisecs},
		{"vm.swappiness", vm.Swappiness},
		{"vm.min_free_kbytes", vm.MinFreeKbytes},
		{"vm.zone_reclaim_mode", vm.ZoneReclaimMode},
		{"vm.watermark_scale_factor", vm.WatermarkScaleFactor},
	} {
		if t.v != nil {
			vmSysctl.Send(ch, float64(*t.v), t.name)
		}
	}
	return nil
}
