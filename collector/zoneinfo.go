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
	Register("zoneinfo", true, newZoneinfoCollector)
}

var (
	zoneFree = NewMetric("vm_zone_free_bytes",
		"Free memory in a zone (nr_free_pages in /proc/zoneinfo × page size), in bytes. kswapd wakes below the low watermark; allocations stall in direct reclaim below min.",
		prometheus.GaugeValue, "node", "zone")
	zoneWatermark = NewMetric("vm_zone_watermark_bytes",
		"Zone watermark (min, low or high in /proc/zoneinfo × page size), in bytes; set by vm.min_free_kbytes and vm.watermark_scale_factor.",
		prometheus.GaugeValue, "node", "zone", "level")
)

type zoneinfoCollector struct {
	fs       procfs.FS
	pageSize float64
}

func newZoneinfoCollector(cfg Config) (Collector, error) {
	pfs, err := procfs.NewFS(cfg.Paths.Procfs)
	if err != nil {
		return nil, fmt.Errorf("--path.procfs: %w", err)
	}
	return &zoneinfoCollector{fs: pfs, pageSize: float64(PageSize())}, nil
}

// Update reads /proc/zoneinfo with procfs. Zones without pages (an empty
// Movable or DMA32 zone reports all zeros) are skipped: they carry no
// headroom and only add series.
func (c *zoneinfoCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	zones, err := c.fs.Zoneinfo()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %v", ErrNoData, err)
		}
		return err
	}
	for _, z := range zones {
		if z.Zone == "" || z.NrFreePages == nil || z.Managed != nil && *z.Managed == 0 {
			continue
		}
		zoneFree.Send(ch, float64(*z.NrFreePages)*c.pageSize, z.Node, z.Zone)
		for _, w := range []struct {
			level string
			v     *int64
		}{{"min", z.Min}, {"low", z.Low}, {"high", z.High}} {
			if w.v != nil {
				zoneWatermark.Send(ch, float64(*w.v)*c.pageSize, z.Node, z.Zone, w.level)
			}
		}
	}
	return nil
}
