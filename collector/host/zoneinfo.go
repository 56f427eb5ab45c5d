package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	register("zoneinfo", "Free pages and the min/low/high watermarks of each memory zone, from /proc/zoneinfo", newZoneinfoCollector)
}

var (
	zoneFree = collector.NewMetric("vm_zone_free_bytes",
		"Free memory in a zone (\"pages free\" in /proc/zoneinfo × page size), in bytes.",
		prometheus.GaugeValue, "node", "zone")
	zoneWatermark = collector.NewMetric("vm_zone_watermark_bytes",
		"Zone watermark (min, low or high in /proc/zoneinfo × page size), in bytes; set by vm.min_free_kbytes and vm.watermark_scale_factor.",
		prometheus.GaugeValue, "node", "zone", "level")
)

// zoneLevels are the level label of Zone.Min, Low and High.
var zoneLevels = [...]string{"min", "low", "high"}

type zoneinfoCollector struct {
	src      *procSource
	pageSize float64
	problems *collector.Problems

	mu    sync.Mutex // concurrent scrapes share the buffer and zones
	buf   []byte
	zones []Zone
}

func newZoneinfoCollector(cfg collector.Config, s settings) *zoneinfoCollector {
	return &zoneinfoCollector{src: sourceAt(cfg.Paths.Proc("zoneinfo")), pageSize: float64(s.pageSize), problems: cfg.Problems}
}

// Update reads /proc/zoneinfo. Zones without managed pages (an empty Movable
// or Device zone) are skipped: they carry no headroom and only add series.
// A container without /proc/zoneinfo is "no data".
func (c *zoneinfoCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := c.src.Read(c.buf)
	c.buf = data[:0]
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %v", collector.ErrNoData, err) //nolint:errorlint // ErrNoData is what callers match; the cause is detail
		}
		return err
	}
	zones, bad, perr := ParseZoneinfo(data, c.zones)
	c.zones = zones
	c.problems.Add("zoneinfo_line", bad, perr)
	for i := range zones {
		z := &zones[i]
		if !z.HasFree || z.HasManaged && z.Managed == 0 {
			continue
		}
		zoneFree.Send(ch, float64(z.Free)*c.pageSize, z.Node, z.Name)
		for i, mark := range [...]uint64{z.Min, z.Low, z.High} {
			if z.Marks&(1<<i) != 0 {
				zoneWatermark.Send(ch, float64(mark)*c.pageSize, z.Node, z.Name, zoneLevels[i])
			}
		}
	}
	return nil
}
