package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	register("vmstat",
		"Dirty and writeback memory, dirty throttling, reclaim, compaction, major faults, refaults and OOM kills, from /proc/vmstat",
		newVMStatCollector)
}

// vmMetrics are the metrics of /proc/vmstat fields. The value is the first
// of fields this kernel reports (one counter in two layouts, VMStat.First),
// × the page size for a page count exported in bytes.
var vmMetrics = [...]struct {
	collector.Metric
	pages  bool
	fields []VMField
}{
	{vmGauge("vm_dirty_bytes",
		"Page-cache pages waiting to be written back (nr_dirty in /proc/vmstat × page size), in bytes."),
		true, []VMField{VMNrDirty}},
	{vmGauge("vm_writeback_bytes",
		"Pages under writeback right now (nr_writeback in /proc/vmstat × page size), in bytes."),
		true, []VMField{VMNrWriteback}},
	{vmGauge("vm_nfs_unstable_bytes",
		"NFS pages sent to the server but not yet committed (nr_unstable in /proc/vmstat × page size, before 5.8), in bytes."),
		true, []VMField{VMNrUnstable}},
	{vmGauge("vm_dirty_threshold_bytes",
		"The kernel's global dirty limit, above which writers are hard-throttled (nr_dirty_threshold in /proc/vmstat × page size), in bytes."),
		true, []VMField{VMNrDirtyThreshold}},
	{vmGauge("vm_dirty_background_threshold_bytes",
		"Dirty level at which background writeback starts (nr_dirty_background_threshold in /proc/vmstat × page size), in bytes."),
		true, []VMField{VMNrDirtyBackgroundThreshold}},
	{vmCounter("vm_dirtied_bytes_total",
		"Bytes of pages dirtied since boot (nr_dirtied in /proc/vmstat × page size)."),
		true, []VMField{VMNrDirtied}},
	{vmCounter("vm_written_bytes_total",
		"Bytes of pages written back since boot (nr_written in /proc/vmstat × page size)."),
		true, []VMField{VMNrWritten}},
	{vmCounter("vm_allocation_stalls_total",
		"Allocations that entered direct reclaim, since boot (/proc/vmstat allocstall before 4.8, sum of allocstall_<zone> after)."),
		false, []VMField{VMAllocstall, VMAllocstallZones}},
	{vmCounter("vm_direct_reclaim_scanned_pages_total",
		"Pages scanned by direct reclaim in allocating tasks (/proc/vmstat pgscan_direct, or the sum of pgscan_direct_<zone> before 4.8)."),
		false, []VMField{VMPgscanDirect, VMPgscanDirectZones}},
	{vmCounter("vm_direct_reclaim_reclaimed_pages_total",
		"Pages reclaimed by direct reclaim (/proc/vmstat pgsteal_direct, or the sum of pgsteal_direct_<zone> before 4.8)."),
		false, []VMField{VMPgstealDirect, VMPgstealDirectZones}},
	{vmCounter("vm_direct_reclaim_throttled_total",
		"Times a direct reclaimer was throttled waiting for kswapd (/proc/vmstat pgscan_direct_throttle)."),
		false, []VMField{VMPgscanDirectThrottle}},
	{vmCounter("vm_kswapd_scanned_pages_total",
		"Pages scanned by kswapd (/proc/vmstat pgscan_kswapd, or the sum of pgscan_kswapd_<zone> before 4.8)."),
		false, []VMField{VMPgscanKswapd, VMPgscanKswapdZones}},
	{vmCounter("vm_kswapd_reclaimed_pages_total",
		"Pages reclaimed by kswapd (/proc/vmstat pgsteal_kswapd, or the sum of pgsteal_kswapd_<zone> before 4.8)."),
		false, []VMField{VMPgstealKswapd, VMPgstealKswapdZones}},
	{vmCounter("vm_compaction_stalls_total",
		"Allocations that stalled in direct compaction (/proc/vmstat compact_stall)."),
		false, []VMField{VMCompactStall}},
	{vmCounter("vm_compaction_failures_total",
		"Direct compactions that failed to produce a free block (/proc/vmstat compact_fail)."),
		false, []VMField{VMCompactFail}},
	{vmCounter("vm_major_faults_total",
		"Page faults that needed I/O (/proc/vmstat pgmajfault)."),
		false, []VMField{VMPgmajfault}},
	{vmCounter("vm_refaults_total",
		"Evicted pages faulted back in soon after, i.e. page-cache thrashing (/proc/vmstat workingset_refault*)."),
		false, []VMField{VMWorkingsetRefault, VMWorkingsetRefaultSplit}},
	{vmCounter("vm_oom_kills_total",
		"Processes killed by the OOM killer (/proc/vmstat oom_kill, 4.13+)."),
		false, []VMField{VMOOMKill}},
}

var vmThrottleRatio = vmGauge("vm_dirty_throttle_ratio",
	"Dirty, NFS unstable and writeback pages over the midpoint of the two dirty thresholds, from /proc/vmstat; at 1 writers are throttled.")

func vmGauge(name, help string) collector.Metric {
	return collector.NewMetric(name, help, prometheus.GaugeValue)
}

func vmCounter(name, help string) collector.Metric {
	return collector.NewMetric(name, help, prometheus.CounterValue)
}

// vmstatCollector shares /proc/vmstat with the sampler (source.go).
type vmstatCollector struct {
	src      *procSource
	pageSize float64
	problems *collector.Problems

	mu  sync.Mutex // concurrent scrapes share the buffer
	buf []byte
}

func newVMStatCollector(cfg collector.Config, s settings) *vmstatCollector {
	return &vmstatCollector{src: sourceAt(cfg.Paths.Proc("vmstat")), pageSize: float64(s.pageSize), problems: cfg.Problems}
}

// Update reads /proc/vmstat (the sampler's last read while it runs) with
// ParseVMStat, the parser the sampler uses.
func (c *vmstatCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := c.src.Read(c.buf)
	c.buf = data[:0]
	if err != nil {
		// Every Linux procfs has /proc/vmstat: missing means a wrong --path.procfs.
		return err
	}
	var v VMStat
	bad, perr := ParseVMStat(data, &v)
	c.problems.Add("vmstat_line", bad, perr)
	if v.present == 0 {
		return fmt.Errorf("%s: no known field", c.src.path)
	}
	for _, m := range vmMetrics {
		x, ok := v.First(m.fields...)
		switch {
		case ok && m.pages:
			m.Send(ch, float64(x)*c.pageSize)
		case ok:
			m.Send(ch, float64(x))
		}
	}
	if r, ok := v.ThrottleRatio(); ok {
		vmThrottleRatio.Send(ch, r)
	}
	return nil
}

// ReadVMStat reads the /proc/vmstat at path into v through the one source
// the vmstat collector and the sampler share (the sampler's last read
// while it runs, else a read now), for the collectors of other packages
// that act on the host's dirty state (the writeback collector reads
// /proc/<pid>/io only while dirty pages are past the background
// threshold). Lines that do not parse are skipped, as ParseVMStat does;
// an error is a file that cannot be read.
func ReadVMStat(path string, v *VMStat) error {
	data, err := sourceAt(path).Read(nil)
	if err != nil {
		return err
	}
	_, _ = ParseVMStat(data, v) // bad lines are the vmstat collector's to count and log
	return nil
}

// PastBackground reports whether dirty and writeback pages together are
// above the background threshold (nr_dirty + nr_writeback >
// nr_dirty_background_threshold): from there on the flusher writes back
// and, past the midpoint to nr_dirty_threshold, balance_dirty_pages()
// pauses writers. ok is false when the kernel lacks a field.
func (v *VMStat) PastBackground() (past, ok bool) {
	dirty, ok1 := v.Get(VMNrDirty)
	wb, ok2 := v.Get(VMNrWriteback)
	bg, ok3 := v.Get(VMNrDirtyBackgroundThreshold)
	return dirty+wb > bg, ok1 && ok2 && ok3
}
