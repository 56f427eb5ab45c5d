package host

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	register("meminfo", "Total, available, cached, dirty and writeback memory, from /proc/meminfo", newMeminfoCollector)
}

var (
	memTotal     = collector.NewMetric("memory_total_bytes", "Usable RAM (MemTotal in /proc/meminfo), in bytes.", prometheus.GaugeValue)
	memAvailable = collector.NewMetric("memory_available_bytes", "Kernel's estimate of memory available to start new work without swapping (MemAvailable in /proc/meminfo, 3.14+), in bytes.", prometheus.GaugeValue)
	memCached    = collector.NewMetric("memory_cached_bytes", "Page cache excluding swap cache (Cached in /proc/meminfo), in bytes.", prometheus.GaugeValue)
	memDirty     = collector.NewMetric("memory_dirty_bytes", "Memory waiting to be written back to disk (Dirty in /proc/meminfo), in bytes; the same counter as stall_vm_dirty_bytes, rounded to KiB.", prometheus.GaugeValue)
	memWriteback = collector.NewMetric("memory_writeback_bytes", "Memory being written back to disk (Writeback in /proc/meminfo), in bytes.", prometheus.GaugeValue)
)

// meminfoCollector reads /proc/meminfo with procfs. The file is read once
// per scrape, not by the 1 s sampler, so it is off the hot path where the
// exporter keeps parsers of its own.
type meminfoCollector struct {
	fs       procfs.FS
	problems *collector.Problems
}

func newMeminfoCollector(cfg collector.Config, _ settings) *meminfoCollector {
	return &meminfoCollector{fs: cfg.ProcFS, problems: cfg.Problems}
}

// Update reads /proc/meminfo. Fields the kernel lacks (MemAvailable before
// 3.14) are absent, not 0. A missing file means a wrong --path.procfs, not
// "no data". procfs rejects the whole file at its first malformed line, so a
// malformed file fails this collector and counts once in
// stall_collector_parse_errors_total; a read error fails it without being
// counted as bad input.
func (c *meminfoCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	mi, err := c.fs.Meminfo()
	if err != nil {
		if errors.Is(err, procfs.ErrFileParse) {
			c.problems.Add("meminfo_line", 1, err)
		}
		return err
	}
	for _, f := range [...]struct {
		m collector.Metric
		v *uint64
	}{
		{memTotal, mi.MemTotalBytes},
		{memAvailable, mi.MemAvailableBytes},
		{memCached, mi.CachedBytes},
		{memDirty, mi.DirtyBytes},
		{memWriteback, mi.WritebackBytes},
	} {
		if f.v != nil {
			f.m.Send(ch, float64(*f.v))
		}
	}
	return nil
}
