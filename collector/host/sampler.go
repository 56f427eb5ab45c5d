package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The sampler catches what a 15–60 s scrape misses: a writer blocked in
// dirty-page throttling for two seconds, one second of 800 ms await. Every
// --sampler.interval it reads /proc/vmstat and /proc/diskstats and turns
// each interval into one histogram observation, so a short excursion stays
// visible in the bucket counts after the next scrape. The watched
// services' cgroups get their own throttle ratio sampled the same way
// (cgroupdirty_sampler.go). See docs/sampler.md.

// samplerMaxGapIntervals: when more than this many intervals pass between
// two ticks (suspended host, stopped process, a clock that jumped), the
// tick only re-baselines: an average over minutes is not a one-interval
// sample.
const samplerMaxGapIntervals = 10

// Buckets, chosen for the incidents in docs/sampler.md.
var (
	// Healthy NVMe completes in 0.05–0.5 ms, SSD in 0.1–2 ms, a spinning
	// disk in 4–15 ms; the ASYNC_FLUSH incident shows hundreds of ms.
	samplerAwaitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	// Fraction of the interval with I/O in flight; 0.99–1 is saturation
	// (for a single-queue device).
	samplerUtilBuckets = []float64{0.05, 0.25, 0.5, 0.75, 0.9, 0.99, 1}
	// 1 is where balance_dirty_pages() starts throttling writers; the
	// background writeback point is below it (0.67 with the default
	// dirty_ratio 20 / dirty_background_ratio 10) and the hard limit above
	// it (1.33 with the same defaults).
	samplerThrottleBuckets = []float64{0.25, 0.5, 0.75, 0.9, 0.95, 1, 1.1, 1.25, 1.5, 2}
)

// The sampler's metrics; each sampler builds its own from them.
var (
	samplerAwait = collector.DeclareHistogram("disk_await_seconds",
		"Average time per completed I/O in each sampler interval (/proc/diskstats ms reading and writing over reads and writes completed).",
		samplerAwaitBuckets, "device")
	samplerUtil = collector.DeclareHistogram("disk_utilization_ratio",
		"Fraction of each sampler interval the device had I/O in flight (/proc/diskstats field 10), capped at 1.",
		samplerUtilBuckets, "device")
	samplerThrottle = collector.DeclareHistogram("vm_dirty_throttle_ratio_sampled",
		"Dirty throttle ratio at each sampler tick (/proc/vmstat, as stall_vm_dirty_throttle_ratio); at 1 writers are throttled.",
		samplerThrottleBuckets)
	samplerThrottled = collector.DeclareCounter("vm_dirty_throttled_seconds_total",
		"Sampled time with the dirty throttle ratio (/proc/vmstat) at or above 1: ticks at or above 1 × --sampler.interval.")
	samplerTicks = collector.DeclareCounter("sampler_ticks_total",
		"Sampler ticks run since start (each reads /proc/vmstat and /proc/diskstats once).")
	samplerOverruns = collector.DeclareCounter("sampler_overruns_total",
		"Sampler ticks whose work took longer than --sampler.interval, so the next tick was skipped.")
)

func init() {
	register("sampler",
		"Disk await and utilization and the dirty throttle ratio as histograms, sampled every --sampler.interval from /proc/diskstats and /proc/vmstat",
		newSampler)
}

// sampler is the "sampler" collector. tick runs in Run's goroutine only;
// Update reads the client_golang metrics, which are safe for concurrent
// use, and the last tick's read errors.
type sampler struct {
	interval time.Duration
	problems *collector.Problems
	logger   *slog.Logger
	// The scrape-time vmstat and diskstats collectors share the sources
	// and the filter (source.go).
	vmSrc, diskSrc     *procSource
	filter             *deviceFilter
	vmState, diskState *collector.StateLog

	vmBuf, diskBuf []byte
	vm             VMStat
	devs           []*samplerDevice
	cgroups        *cgroupSampler // the watched cgroups' own throttle ratio
	gen            uint64
	noThresholds   bool

	hasThrottle atomic.Bool // the kernel reported the dirty thresholds at least once
	// The last tick's read errors, for Update: a sampler that cannot read
	// its files must not report success.
	mu             sync.Mutex
	vmErr, diskErr error

	await            *prometheus.HistogramVec
	util             *prometheus.HistogramVec
	throttle         prometheus.Histogram
	throttledSeconds prometheus.Counter
	ticks            prometheus.Counter
	overruns         prometheus.Counter
}

// samplerDevice is the state of one block device between ticks.
type samplerDevice struct {
	name         string
	major, minor uint64
	ignored      bool   // filtered out by --diskstats.*; kept so the filter runs once
	seen         uint64 // sampler.gen of the last read that listed it
	valid        bool   // prev holds a baseline
	prev         diskstatsLine
	prevAt       time.Time
	await, util  prometheus.Observer
}

func newSampler(cfg collector.Config, s settings) *sampler {
	return &sampler{
		interval:         s.samplerInterval,
		problems:         cfg.Problems,
		logger:           cfg.Logger,
		vmSrc:            sourceAt(cfg.Paths.Proc("vmstat")),
		diskSrc:          sourceAt(cfg.Paths.Proc("diskstats")),
		filter:           deviceFilterFor(cfg.Paths, s.devices),
		cgroups:          newCgroupSampler(cfg, s),
		vmState:          collector.NewStateLog(cfg.Logger.With("path", cfg.Paths.Proc("vmstat"))),
		diskState:        collector.NewStateLog(cfg.Logger.With("path", cfg.Paths.Proc("diskstats"))),
		vmBuf:            make([]byte, 0, 16<<10),
		diskBuf:          make([]byte, 0, 16<<10),
		await:            samplerAwait.HistogramVec(),
		util:             samplerUtil.HistogramVec(),
		throttle:         samplerThrottle.Histogram(),
		throttledSeconds: samplerThrottled.Counter(),
		ticks:            samplerTicks.Counter(),
		overruns:         samplerOverruns.Counter(),
	}
}

// Run ticks every interval until ctx is done. Meanwhile the scrapes of
// /proc/vmstat and /proc/diskstats take the sampler's reads.
func (s *sampler) Run(ctx context.Context) {
	defer s.vmSrc.sampledEvery(s.interval)()
	defer s.diskSrc.sampledEvery(s.interval)()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.safeTick() // baseline at once, so the first interval is not lost
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.safeTick()
		}
	}
}

// safeTick runs one tick; a panic is counted and logged once as a problem.
func (s *sampler) safeTick() {
	defer s.problems.Recover("sampler_panic", "sampler tick")
	s.tick()
}

// tick takes one sample. It does not allocate unless a device appears, a
// file is malformed or a read fails.
func (s *sampler) tick() {
	start := time.Now()
	var vmErr, diskErr error
	s.vmBuf, vmErr = s.vmSrc.ReadNow(s.vmBuf)
	s.sampleVM(s.vmBuf, vmErr)
	if vmErr == nil {
		s.cgroups.tick(&s.vm)
	}
	s.diskBuf, diskErr = s.diskSrc.ReadNow(s.diskBuf)
	s.sampleDisks(s.diskBuf, diskErr, time.Now())
	s.mu.Lock()
	s.vmErr, s.diskErr = vmErr, diskErr
	s.mu.Unlock()
	s.finishTick(start)
}

// finishTick counts a tick that started at start, and an overrun when it
// took longer than the interval.
func (s *sampler) finishTick(start time.Time) {
	s.ticks.Inc()
	if time.Since(start) > s.interval {
		s.overruns.Inc()
	}
}

// readReason is the StateLog reason of a failed read: a missing file, a
// refused one, or any other error.
func readReason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case errors.Is(err, fs.ErrPermission):
		return "permission"
	}
	return "read"
}

// sampleVM samples one read of /proc/vmstat (err: the read failed).
func (s *sampler) sampleVM(data []byte, err error) {
	if err != nil {
		s.vmState.Failed("sampler cannot read /proc/vmstat; the dirty throttle ratio is not sampled until it can", readReason(err), err)
		return
	}
	s.vmState.OK("sampler reads /proc/vmstat again")
	bad, ferr := ParseVMStat(data, &s.vm)
	s.problems.Add("sampler_vmstat_line", bad, ferr)
	r, ok := s.vm.ThrottleRatio()
	if !ok {
		if !s.noThresholds {
			s.logger.Info("/proc/vmstat lacks nr_dirty, nr_writeback or the dirty thresholds (or they are 0); the dirty throttle ratio is not sampled")
			s.noThresholds = true
		}
		return
	}
	s.noThresholds = false
	s.hasThrottle.Store(true)
	s.throttle.Observe(r)
	if r >= 1 {
		s.throttledSeconds.Add(s.interval.Seconds())
	}
}

// sampleDisks samples one read of /proc/diskstats made at now (err: the
// read failed).
func (s *sampler) sampleDisks(data []byte, err error, now time.Time) {
	if err != nil {
		s.diskState.Failed("sampler cannot read /proc/diskstats; disk await and utilization are not sampled until it can", readReason(err), err)
		for _, d := range s.devs {
			d.valid = false // the next good read is a new baseline
		}
		return
	}
	s.diskState.OK("sampler reads /proc/diskstats again")
	s.gen++
	sc := newDiskstatsScanner(data)
	hint := 0
	for sc.Next() {
		l := &sc.Line
		i := s.lookup(l.Name, hint)
		if i < 0 {
			i = s.addDevice(l)
		}
		hint = i + 1
		d := s.devs[i]
		if d.seen == s.gen {
			s.problems.Add("sampler_diskstats_duplicate", 1, fmt.Errorf("diskstats lists device %s twice", d.name))
			continue
		}
		d.seen = s.gen
		if d.ignored {
			continue
		}
		s.observe(d, l, now)
	}
	s.problems.Add("sampler_diskstats_line", sc.bad.n, sc.bad.first)
	// Devices that disappeared: drop their state and series. A device
	// that comes back starts over with a new baseline.
	for i := 0; i < len(s.devs); {
		if d := s.devs[i]; d.seen != s.gen {
			if !d.ignored {
				s.await.DeleteLabelValues(d.name)
				s.util.DeleteLabelValues(d.name)
			}
			s.devs = slices.Delete(s.devs, i, i+1)
			continue
		}
		i++
	}
}

// lookup finds a device by name, trying index hint first: the kernel lists
// devices in the same order every time, so this is one comparison per line
// in the steady state.
func (s *sampler) lookup(name []byte, hint int) int {
	if hint < len(s.devs) && s.devs[hint].name == string(name) {
		return hint
	}
	for i, d := range s.devs {
		if d.name == string(name) {
			return i
		}
	}
	return -1
}

func (s *sampler) addDevice(l *diskstatsLine) int {
	d := &samplerDevice{name: string(l.Name), major: l.Major, minor: l.Minor, ignored: s.filter.ignored(l.Name)}
	if !d.ignored {
		d.await = s.await.WithLabelValues(d.name)
		d.util = s.util.WithLabelValues(d.name)
	}
	s.devs = append(s.devs, d)
	return len(s.devs) - 1
}

// observe turns the interval since d's baseline into one await and one
// utilization observation, and makes l the new baseline. An interval is
// only re-baselined, never observed, when the device was replaced (other
// major:minor, a count that went down), or when the elapsed time is not
// positive or longer than ten intervals.
func (s *sampler) observe(d *samplerDevice, l *diskstatsLine, now time.Time) {
	defer func() {
		d.prev = *l
		d.prev.Name = nil // aliases the read buffer
		d.prevAt = now
		d.valid = true
	}()
	if !d.valid {
		return
	}
	if d.major != l.Major || d.minor != l.Minor {
		d.major, d.minor = l.Major, l.Minor
		return
	}
	dt := now.Sub(d.prevAt)
	if dt <= 0 || dt > samplerMaxGapIntervals*s.interval {
		return
	}
	reads, ok1 := countDelta(d.prev.Stat[dsReads], l.Stat[dsReads])
	writes, ok2 := countDelta(d.prev.Stat[dsWrites], l.Stat[dsWrites])
	if !ok1 || !ok2 {
		return // counters went down: the device was removed and re-added
	}
	readMs, ok3 := msDelta(d.prev.Stat[dsReadMs], l.Stat[dsReadMs])
	writeMs, ok4 := msDelta(d.prev.Stat[dsWriteMs], l.Stat[dsWriteMs])
	ioMs, ok5 := msDelta(d.prev.Stat[dsIOMs], l.Stat[dsIOMs])
	if !ok3 || !ok4 || !ok5 {
		return
	}
	if ios := reads + writes; ios > 0 {
		d.await.Observe(float64(readMs+writeMs) / 1000 / float64(ios))
	}
	u := float64(ioMs) / 1000 / dt.Seconds()
	if u > 1 {
		u = 1 // io_ticks is updated in jiffies, so an interval can show slightly more than Δt
	}
	d.util.Observe(u)
}

// countDelta is the increase of a count field (unsigned long). A decrease
// is a reset (device replaced), except when a 32-bit kernel's counter wraps:
// the old value in the top half of the 32-bit range, the new one small.
func countDelta(prev, cur uint64) (uint64, bool) {
	if cur >= prev {
		return cur - prev, true
	}
	if prev <= math.MaxUint32 && prev >= 1<<31 && cur < 1<<31 {
		return cur + 1<<32 - prev, true
	}
	return 0, false
}

// msDelta is the increase of a millisecond field, which the kernel prints as
// a 32-bit unsigned int on every architecture: a decrease is a wrap at 2^32
// when the wrapped increase is plausible (under 2^31 ms). Any other decrease
// is not an increase the sampler can trust, and ok is false.
func msDelta(prev, cur uint64) (uint64, bool) {
	if cur >= prev {
		return cur - prev, true
	}
	if prev <= math.MaxUint32 {
		if d := cur + 1<<32 - prev; d < 1<<31 {
			return d, true
		}
	}
	return 0, false
}

// Update sends the sampler's histograms and counters. It fails while the
// last tick could not read /proc/vmstat or /proc/diskstats: the histograms
// then stop getting observations, and stall_scrape_collector_success 0 says
// the sampler is blind instead of looking healthy.
func (s *sampler) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	s.await.Collect(ch)
	s.util.Collect(ch)
	if s.hasThrottle.Load() {
		s.throttle.Collect(ch)
		s.throttledSeconds.Collect(ch)
	}
	s.cgroups.collect(ch)
	s.ticks.Collect(ch)
	s.overruns.Collect(ch)
	s.mu.Lock()
	vmErr, diskErr := s.vmErr, s.diskErr
	s.mu.Unlock()
	var errs []error
	if vmErr != nil {
		errs = append(errs, fmt.Errorf("the last tick could not read /proc/vmstat (no dirty throttle ratio): %w", vmErr))
	}
	if diskErr != nil {
		errs = append(errs, fmt.Errorf("the last tick could not read /proc/diskstats (no await, no utilization): %w", diskErr))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return ctx.Err()
}

var _ collector.Runner = (*sampler)(nil)
