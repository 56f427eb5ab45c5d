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

// diskUnit converts a statistic to its metric's unit.
type diskUnit uint8

const (
	diskCount   diskUnit = iota // as it is
	diskMs                      // milliseconds, exported in seconds
	diskSectors                 // 512-byte sectors, exported in bytes
)

// diskMetrics are the metrics of each device's /proc/diskstats line.
var diskMetrics = [...]struct {
	collector.Metric
	field int // ds*
	unit  diskUnit
}{
	{diskMetric("disk_reads_completed_total",
		"Reads completed (field 1 of /proc/diskstats)."), dsReads, diskCount},
	{diskMetric("disk_read_time_seconds_total",
		"Time spent by all reads (field 4 of /proc/diskstats, ms), in seconds."), dsReadMs, diskMs},
	{diskMetric("disk_read_bytes_total",
		"Bytes read (field 3 of /proc/diskstats, 512-byte sectors)."), dsReadSectors, diskSectors},
	{diskMetric("disk_writes_completed_total",
		"Writes completed (field 5 of /proc/diskstats)."), dsWrites, diskCount},
	{diskMetric("disk_write_time_seconds_total",
		"Time spent by all writes (field 8 of /proc/diskstats, ms), in seconds."), dsWriteMs, diskMs},
	{diskMetric("disk_written_bytes_total",
		"Bytes written (field 7 of /proc/diskstats, 512-byte sectors)."), dsWriteSectors, diskSectors},
	{collector.NewMetric("disk_io_in_progress",
		"I/Os in flight right now (field 9 of /proc/diskstats).", prometheus.GaugeValue, "device"), dsInFlight, diskCount},
	{diskMetric("disk_io_time_seconds_total",
		"Time the device had I/O in flight (field 10 of /proc/diskstats, ms), in seconds; its rate is utilisation."), dsIOMs, diskMs},
	{diskMetric("disk_io_time_weighted_seconds_total",
		"I/O time weighted by the number of I/Os in flight (field 11 of /proc/diskstats, ms), in seconds; its rate is the average queue depth."), dsWeightedMs, diskMs},
	{diskMetric("disk_discards_completed_total",
		"Discards completed (field 12 of /proc/diskstats, 4.18+)."), dsDiscards, diskCount},
	{diskMetric("disk_discard_time_seconds_total",
		"Time spent by all discards (field 15 of /proc/diskstats, 4.18+, ms), in seconds."), dsDiscardMs, diskMs},
	{diskMetric("disk_flushes_completed_total",
		"Cache flush requests completed (field 16 of /proc/diskstats, 5.5+)."), dsFlushes, diskCount},
	{diskMetric("disk_flush_time_seconds_total",
		"Time spent by all flush requests (field 17 of /proc/diskstats, 5.5+, ms), in seconds."), dsFlushMs, diskMs},
}

// diskMetric declares a per-device counter.
func diskMetric(name, help string) collector.Metric {
	return collector.NewMetric(name, help, prometheus.CounterValue, "device")
}

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
		for _, m := range diskMetrics {
			if !d.has(m.field) {
				continue
			}
			v := float64(d.Stat[m.field])
			switch m.unit {
			case diskMs:
				v /= 1000
			case diskSectors:
				v *= diskSectorBytes
			}
			m.Send(ch, v, dev)
		}
	}
	c.problems.Add("diskstats_line", sc.bad.n, sc.bad.first)
	return nil
}
