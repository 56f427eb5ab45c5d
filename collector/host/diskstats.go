package host

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	register("diskstats", "Per-device I/O counts, bytes, times and queue, from /proc/diskstats", newDiskstatsCollector)
}

// diskSectorBytes is the unit of the sector fields of /proc/diskstats: always
// 512 bytes, whatever the device's logical block size
// (Documentation/admin-guide/iostats.rst).
const diskSectorBytes = 512

var (
	diskReads = collector.NewMetric("disk_reads_completed_total",
		"Reads completed (field 1 of /proc/diskstats).", prometheus.CounterValue, "device")
	diskReadTime = collector.NewMetric("disk_read_time_seconds_total",
		"Time spent by all reads (field 4 of /proc/diskstats, ms), in seconds.", prometheus.CounterValue, "device")
	diskReadBytes = collector.NewMetric("disk_read_bytes_total",
		"Bytes read (field 3 of /proc/diskstats, 512-byte sectors).", prometheus.CounterValue, "device")
	diskWrites = collector.NewMetric("disk_writes_completed_total",
		"Writes completed (field 5 of /proc/diskstats).", prometheus.CounterValue, "device")
	diskWriteTime = collector.NewMetric("disk_write_time_seconds_total",
		"Time spent by all writes (field 8 of /proc/diskstats, ms), in seconds.", prometheus.CounterValue, "device")
	diskWrittenBytes = collector.NewMetric("disk_written_bytes_total",
		"Bytes written (field 7 of /proc/diskstats, 512-byte sectors).", prometheus.CounterValue, "device")
	diskInProgress = collector.NewMetric("disk_io_in_progress",
		"I/Os in flight right now (field 9 of /proc/diskstats).", prometheus.GaugeValue, "device")
	diskIOTime = collector.NewMetric("disk_io_time_seconds_total",
		"Time the device had I/O in flight (field 10 of /proc/diskstats, ms), in seconds; its rate is utilisation.", prometheus.CounterValue, "device")
	diskIOWeighted = collector.NewMetric("disk_io_time_weighted_seconds_total",
		"I/O time weighted by the number of I/Os in flight (field 11 of /proc/diskstats, ms), in seconds; its rate is the average queue depth.", prometheus.CounterValue, "device")
	diskDiscards = collector.NewMetric("disk_discards_completed_total",
		"Discards completed (field 12 of /proc/diskstats, 4.18+).", prometheus.CounterValue, "device")
	diskDiscardTime = collector.NewMetric("disk_discard_time_seconds_total",
		"Time spent by all discards (field 15 of /proc/diskstats, 4.18+, ms), in seconds.", prometheus.CounterValue, "device")
	diskFlushes = collector.NewMetric("disk_flushes_completed_total",
		"Cache flush requests completed (field 16 of /proc/diskstats, 5.5+).", prometheus.CounterValue, "device")
	diskFlushTime = collector.NewMetric("disk_flush_time_seconds_total",
		"Time spent by all flush requests (field 17 of /proc/diskstats, 5.5+, ms), in seconds.", prometheus.CounterValue, "device")
)

// diskstatsCollector shares /proc/diskstats and the device filter with
// the sampler (source.go).
type diskstatsCollector struct {
	src      *procSource
	filter   *deviceFilter
	problems *collector.Problems

	mu  sync.Mutex // concurrent scrapes share the buffer
	buf []byte
}

func newDiskstatsCollector(cfg collector.Config, s settings) *diskstatsCollector {
	return &diskstatsCollector{
		src:      sourceAt(cfg.Paths.Proc("diskstats")),
		filter:   deviceFilterFor(cfg.Paths, s.devices),
		problems: cfg.Problems,
	}
}

// Update reads /proc/diskstats (the sampler's last read while it runs)
// with the parser the sampler uses (diskstats_parse.go). The number of
// statistics per line tells the kernel generation: 11 (up to 4.17), 15
// (discards, 4.18+), 17 (flushes, 5.5+); counters a line lacks are absent.
// A malformed line is counted and skipped; the other lines are exported.
func (c *diskstatsCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := c.src.Read(c.buf)
	c.buf = data[:0]
	if err != nil {
		return err // every procfs has diskstats: a wrong --path.procfs
	}
	sc := newDiskstatsScanner(data)
	for sc.Next() {
		d := &sc.Line
		if c.filter.ignored(d.Name) {
			continue
		}
		dev := string(d.Name)
		diskReads.Send(ch, float64(d.Reads), dev)
		diskReadTime.Send(ch, float64(d.ReadMs)/1000, dev)
		diskReadBytes.Send(ch, float64(d.ReadSectors)*diskSectorBytes, dev)
		diskWrites.Send(ch, float64(d.Writes), dev)
		diskWriteTime.Send(ch, float64(d.WriteMs)/1000, dev)
		diskWrittenBytes.Send(ch, float64(d.WriteSectors)*diskSectorBytes, dev)
		diskInProgress.Send(ch, float64(d.InFlight), dev)
		diskIOTime.Send(ch, float64(d.IOMs)/1000, dev)
		diskIOWeighted.Send(ch, float64(d.WeightedMs)/1000, dev)
		if d.Stats >= 15 {
			diskDiscards.Send(ch, float64(d.Discards), dev)
			diskDiscardTime.Send(ch, float64(d.DiscardMs)/1000, dev)
		}
		if d.Stats >= 17 {
			diskFlushes.Send(ch, float64(d.Flushes), dev)
			diskFlushTime.Send(ch, float64(d.FlushMs)/1000, dev)
		}
	}
	if sc.Bad > 0 {
		c.problems.Add("diskstats_line", sc.Bad, sc.FirstErr)
	}
	return nil
}
