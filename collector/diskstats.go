package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs/blockdevice"
)

func init() {
	Register("diskstats", true, newDiskstatsCollector)
}

// diskSectorBytes is the unit of the sector fields of /proc/diskstats: always
// 512 bytes, whatever the device's logical block size
// (Documentation/admin-guide/iostats.rst).
const diskSectorBytes = 512

var (
	diskReads = NewMetric("disk_reads_completed_total",
		"Reads completed (field 1 of /proc/diskstats).", prometheus.CounterValue, "device")
	diskReadTime = NewMetric("disk_read_time_seconds_total",
		"Time spent by all reads (field 4 of /proc/diskstats, ms), in seconds.", prometheus.CounterValue, "device")
	diskReadBytes = NewMetric("disk_read_bytes_total",
		"Bytes read (field 3 of /proc/diskstats, 512-byte sectors).", prometheus.CounterValue, "device")
	diskWrites = NewMetric("disk_writes_completed_total",
		"Writes completed (field 5 of /proc/diskstats).", prometheus.CounterValue, "device")
	diskWriteTime = NewMetric("disk_write_time_seconds_total",
		"Time spent by all writes (field 8 of /proc/diskstats, ms), in seconds.", prometheus.CounterValue, "device")
	diskWrittenBytes = NewMetric("disk_written_bytes_total",
		"Bytes written (field 7 of /proc/diskstats, 512-byte sectors).", prometheus.CounterValue, "device")
	diskInProgress = NewMetric("disk_io_in_progress",
		"I/Os in flight right now (field 9 of /proc/diskstats).", prometheus.GaugeValue, "device")
	diskIOTime = NewMetric("disk_io_time_seconds_total",
		"Time the device had I/O in flight (field 10 of /proc/diskstats, ms), in seconds; its rate is utilisation.", prometheus.CounterValue, "device")
	diskIOWeighted = NewMetric("disk_io_time_weighted_seconds_total",
		"I/O time weighted by the number of I/Os in flight (field 11 of /proc/diskstats, ms), in seconds; its rate is the average queue depth.", prometheus.CounterValue, "device")
	diskDiscards = NewMetric("disk_discards_completed_total",
		"Discards completed (field 12 of /proc/diskstats, 4.18+).", prometheus.CounterValue, "device")
	diskDiscardTime = NewMetric("disk_discard_time_seconds_total",
		"Time spent by all discards (field 15 of /proc/diskstats, 4.18+, ms), in seconds.", prometheus.CounterValue, "device")
	diskFlushes = NewMetric("disk_flushes_completed_total",
		"Cache flush requests completed (field 16 of /proc/diskstats, 5.5+).", prometheus.CounterValue, "device")
	diskFlushTime = NewMetric("disk_flush_time_seconds_total",
		"Time spent by all flush requests (field 17 of /proc/diskstats, 5.5+, ms), in seconds.", prometheus.CounterValue, "device")
)

type diskstatsCollector struct {
	fs       blockdevice.FS
	filter   *DeviceFilter
	problems *Problems
}

func newDiskstatsCollector(cfg Config) (Collector, error) {
	// Only /proc/diskstats is read through blockdevice; sysfs is consulted by
	// the device filter, which copes without it. blockdevice insists that
	// both mount points exist, so a container without /sys gets procfs twice.
	sysfs := cfg.Paths.Sysfs
	if _, err := os.Stat(sysfs); err != nil {
		sysfs = cfg.Paths.Procfs
	}
	bfs, err := blockdevice.NewFS(cfg.Paths.Procfs, sysfs)
	if err != nil {
		return nil, fmt.Errorf("--path.procfs/--path.sysfs: %w", err)
	}
	filter, err := NewDeviceFilter(cfg.Paths)
	if err != nil {
		return nil, err
	}
	return &diskstatsCollector{fs: bfs, filter: filter, problems: cfg.Problems}, nil
}

// Update reads /proc/diskstats with procfs blockdevice. The number of fields
// per line tells the kernel generation: 14 (up to 4.17), 18 (discards,
// 4.18+), 20 (flushes, 5.5+); counters a line lacks are absent.
func (c *diskstatsCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	stats, err := c.fs.ProcDiskstats()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err // every procfs has diskstats: a wrong --path.procfs
		}
		// procfs stops at the first malformed line: count it and keep what
		// came before it.
		c.problems.Add("diskstats_line", 1, err)
		if len(stats) == 0 {
			return err
		}
	}
	for _, d := range stats {
		if c.filter.Ignored(d.DeviceName) {
			continue
		}
		dev := d.DeviceName
		diskReads.Send(ch, float64(d.ReadIOs), dev)
		diskReadTime.Send(ch, float64(d.ReadTicks)/1000, dev)
		diskReadBytes.Send(ch, float64(d.ReadSectors)*diskSectorBytes, dev)
		diskWrites.Send(ch, float64(d.WriteIOs), dev)
		diskWriteTime.Send(ch, float64(d.WriteTicks)/1000, dev)
		diskWrittenBytes.Send(ch, float64(d.WriteSectors)*diskSectorBytes, dev)
		diskInProgress.Send(ch, float64(d.IOsInProgress), dev)
		diskIOTime.Send(ch, float64(d.IOsTotalTicks)/1000, dev)
		diskIOWeighted.Send(ch, float64(d.WeightedIOTicks)/1000, dev)
		if d.IoStatsCount >= 18 {
			diskDiscards.Send(ch, float64(d.DiscardIOs), dev)
			diskDiscardTime.Send(ch, float64(d.DiscardTicks)/1000, dev)
		}
		if d.IoStatsCount >= 20 {
			diskFlushes.Send(ch, float64(d.FlushRequestsCompleted), dev)
			diskFlushTime.Send(ch, float64(d.TimeSpentFlushing)/1000, dev)
		}
	}
	return nil
}
