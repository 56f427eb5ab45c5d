package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

func init() {
	Register("sysctl", true, newSysctlCollector)
}

var vmSysctl = NewMetric("vm_sysctl",
	"Value of a page-cache and reclaim tunable from /proc/sys/vm/<name>, as written there (ratios in percent, bytes, centiseconds or kbytes as the name says; 0 for dirty_bytes means dirty_ratio applies).",
	prometheus.GaugeValue, "name")

type sysctlCollector struct {
	fs procfs.FS
}

func newSysctlCollector(cfg Config) (Collector, error) {
	pfs, err := procfs.NewFS(cfg.Paths.Procfs)
	if err != nil {
		return nil, fmt.Errorf("--path.procfs: %w", err)
	}
	return &sysctlCollector{fs: pfs}, nil
}

// Update exports the fixed set of vm.* tunables that decide dirty-page
// throttling and reclaim, read with procfs FS.VM(). A tunable this kernel
// lacks (watermark_scale_factor before 4.6) is absent.
func (c *sysctlCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	vm, err := c.fs.VM()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %v", ErrNoData, err)
		}
		return err
	}
	for _, t := range []struct {
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
