package host

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

// The sampler's part of the per-cgroup throttle point: every tick, for
// the watched cgroups only (a handful), the cgroup's own throttle ratio
// (cgroupdirty_limits.go) into a histogram and the throttled time into a
// counter, as for the host. cgroup v2 only: v1 has no per-cgroup
// throttling.

var (
	samplerCgroupThrottle = collector.DeclareHistogram("cgroup_dirty_throttle_ratio_sampled",
		"The watched cgroup's own dirty throttle ratio at each sampler tick (memory.stat and its memory.max/high, as stall_cgroup_dirty_throttle_ratio); at 1 its writers are throttled. cgroup v2 only.",
		samplerThrottleBuckets, "cgroup")
	samplerCgroupThrottled = collector.DeclareCounter("cgroup_dirty_throttled_seconds_total",
		"Sampled time with the watched cgroup's own dirty throttle ratio at or above 1: ticks at or above 1 × --sampler.interval. cgroup v2 only.",
		"cgroup")
)

// cgroupSampler samples the watched cgroups. tick runs in the sampler's
// goroutine only; the vectors are safe for concurrent use.
type cgroupSampler struct {
	logger    *slog.Logger
	pageSize  uint64
	interval  time.Duration // the sampler's
	refresh   time.Duration // how often the ceilings are re-read (--supervision.scan-interval)
	mountinfo string
	watched   *watchedSet
	sysctls   *sysctlReader

	layout    *cgroupLayout
	noLayout  bool // logged once
	gen       uint64
	refreshAt time.Time
	entries   []*cgroupSampled
	stat      MemStat

	throttle  *prometheus.HistogramVec
	throttled *prometheus.CounterVec
}

// cgroupSampled is one watched cgroup between ticks.
type cgroupSampled struct {
	label  string
	path   string
	stat   *procSource // its memory.stat, kept open
	levels []cgroupCeiling
	buf    []byte
	obs    prometheus.Observer
	secs   prometheus.Counter
}

func newCgroupSampler(cfg collector.Config, s settings) *cgroupSampler {
	return &cgroupSampler{
		logger:    cfg.Logger,
		pageSize:  s.pageSize,
		interval:  s.samplerInterval,
		refresh:   s.supervisionInterval,
		mountinfo: cfg.Paths.Proc("self", "mountinfo"),
		watched:   watchedAt(cfg.Paths.Procfs),
		sysctls:   sysctlsAt(cfg.Paths.Proc("sys", "vm"), s.sysctlRefresh),
		throttle:  samplerCgroupThrottle.HistogramVec(),
		throttled: samplerCgroupThrottled.CounterVec(),
	}
}

// tick samples the watched cgroups against the host's state in v (this
// tick's /proc/vmstat). It does not allocate unless the watched set
// changed, the ceilings are re-read or a cgroup is removed.
func (c *cgroupSampler) tick(v *VMStat) {
	list, gen := c.watched.get()
	if len(list) == 0 && len(c.entries) == 0 {
		return
	}
	if c.layout == nil {
		l, err := findMemoryCgroups(c.mountinfo)
		if err != nil {
			if !c.noLayout {
				c.logger.Info("no memory cgroup hierarchy: the watched cgroups' throttle ratio is not sampled", "err", err)
				c.noLayout = true
			}
			return
		}
		c.layout = &l
	}
	if !c.layout.v2 {
		return // v1: no per-cgroup throttling
	}
	if gen != c.gen || time.Since(c.refreshAt) >= c.refresh {
		c.rebuild(list)
		c.gen, c.refreshAt = gen, time.Now()
	}
	sys, ok := c.sysctls.get()
	if !ok {
		return
	}
	host, ok := newHostDirtyState(v, sys, c.pageSize)
	if !ok {
		return
	}
	for i := 0; i < len(c.entries); {
		e := c.entries[i]
		if !c.sample(e, host) {
			c.drop(i)
			continue
		}
		i++
	}
}

// sample takes one cgroup's ratio; false when the cgroup is gone.
func (c *cgroupSampler) sample(e *cgroupSampled, host hostDirtyState) bool {
	var err error
	e.buf, err = e.stat.ReadNow(e.buf)
	if err != nil {
		if !cgroupGone(err) {
			c.logger.Debug("cannot read a watched cgroup's memory.stat", "path", e.stat.path, "err", err)
			return true
		}
		return false
	}
	ParseMemStat(e.buf, &c.stat) // the scrape counts malformed lines
	lim, ok := host.limits(&c.stat, e.levels, c.pageSize)
	if !ok {
		return true
	}
	e.obs.Observe(lim.ratio)
	if lim.ratio >= 1 {
		e.secs.Add(c.interval.Seconds())
	}
	return true
}

// rebuild makes the entries of the watched v2 cgroups under cgroup
// writeback, reading their ceilings; kept entries keep their open files.
func (c *cgroupSampler) rebuild(list []watchedCgroup) {
	old := map[string]*cgroupSampled{}
	for _, e := range c.entries {
		old[e.path] = e
	}
	var entries []*cgroupSampled
	seen := map[string]bool{}
	for _, w := range list {
		p := w.path(true)
		if p == "" || p == "/" || seen[p] {
			continue
		}
		seen[p] = true
		dir := c.layout.root + p
		if !cgroupWritebackOn(dir) {
			continue
		}
		levels, err := readCeilings(c.layout.root, p)
		if err != nil {
			continue
		}
		e := old[p]
		if e == nil {
			label := proclabel.Cgroup(p)
			e = &cgroupSampled{label: label, path: p, stat: &procSource{path: dir + "/memory.stat"},
				obs: c.throttle.WithLabelValues(label), secs: c.throttled.WithLabelValues(label)}
		} else {
			delete(old, p)
			for _, lv := range e.levels {
				lv.current.close()
			}
		}
		e.levels = levels
		entries = append(entries, e)
	}
	for _, e := range old {
		c.forget(e)
	}
	c.entries = entries
}

// drop forgets entry i (its cgroup was removed): its series go, as a
// removed disk's do.
func (c *cgroupSampler) drop(i int) {
	c.forget(c.entries[i])
	c.entries = append(c.entries[:i], c.entries[i+1:]...)
}

func (c *cgroupSampler) forget(e *cgroupSampled) {
	e.stat.close()
	for _, lv := range e.levels {
		lv.current.close()
	}
	// Two paths can share a label; keep the series while another entry has it.
	for _, o := range c.entries {
		if o != e && o.label == e.label {
			return
		}
	}
	c.throttle.DeleteLabelValues(e.label)
	c.throttled.DeleteLabelValues(e.label)
	c.logger.Debug("watched cgroup removed; its sampled series are dropped", "path", e.path)
}

// collect sends the vectors.
func (c *cgroupSampler) collect(ch chan<- prometheus.Metric) {
	c.throttle.Collect(ch)
	c.throttled.Collect(ch)
}
