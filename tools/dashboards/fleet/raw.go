package fleet

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RawConfig says what raw series to lay out from a capture of the
// exporter's /metrics.
type RawConfig struct {
	Hosts int
	Days  int
	// End is the time of the last scrape (truncated to the hour); the first
	// is Days before it.
	End time.Time
	// Scrape is the scrape interval: at most 30 s, so that the alerts'
	// rates over [1m] see two samples.
	Scrape time.Duration
	// Keep says which series names to write (a histogram's are
	// name_bucket, name_sum and name_count); nil writes all.
	Keep func(name string) bool
}

// Span is the time from From up to, not including, To.
type Span struct{ From, To time.Time }

func (s Span) has(t time.Time) bool { return !t.Before(s.From) && t.Before(s.To) }

// RawPlanted are the events planted in the raw series: hours that the
// capacity roll-ups must show. They fall on the day before the data's last
// midnight, so that a per-day panel's step at that midnight sees them
// whatever the hour the data ends.
type RawPlanted struct {
	// Writers throttled (the dirty throttle ratio at ThrottlePeak, also every
	// second the sampler sees), with direct reclaim: allocation stalls,
	// memory pressure, every zone under its low watermark.
	ThrottledHost string
	Throttled     Span
	ThrottlePeak  float64
	StallsPerSec  float64 // allocation stalls per second
	MemoryFull    float64 // share of the time with every task stalled on memory (PSI full)
	ZoneHeadroom  float64 // free memory of every zone over its low watermark

	// A disk whose every I/O waits SlowAwait, busy all the time, stalling
	// I/O (PSI full) and holding its host's broker's CommitLog lock.
	SlowHost, SlowDevice string
	Slow                 Span
	SlowAwait            float64 // seconds
	IOFull               float64 // share of the time with every task stalled on I/O
	LockHeld             float64 // seconds, every sample of the lock
	HeadWait             float64 // seconds, the send queue's head

	// A Redis near maxmemory with its clients' replies queued, polled with
	// CLUSTER NODES.
	FullHost       string
	Full           Span
	FullRatio      float64 // used / maxmemory
	ClientsMemory  float64 // bytes of normal clients
	PendingClients float64
	ClusterNodes   float64 // calls per second

	OddSysctlHost string // vm.dirty_ratio 40 and vm.dirty_background_ratio 5, the rest of the fleet 20 and 10

	// Trends the dashboard's forecasts fit a line through, rising steadily
	// over the whole data so that the daily peaks rise whatever hour the
	// data ends: on RisingHost the dirty throttle ratio and the broker's
	// lock holds, on RisingRedisHost the Redis' used and clients' memory.
	RisingHost, RisingRedisHost string
}

// Raw is a capture of the exporter's /metrics laid out over days on a few
// hosts, as a scrape every cfg.Scrape would have read it: gauges keep their
// captured value unless a course below moves them, counters rise from
// theirs, and the sampler's histograms observe one value every second (as
// the 1 s sampler does), so a scrape adds cfg.Scrape's worth of
// observations. A course is a function of the time of day, of the data's
// progress and of the planted events, never of the clock; counters and
// histograms take its value at a scrape for every second since the one
// before (a course that only changes at scrapes, with spans that start and
// end on them, is what a per-second one would be).
type Raw struct {
	cfg     RawConfig
	capture map[string]*dto.MetricFamily
	Planted RawPlanted
}

// NewRaw parses capture (the text format the exporter serves) and plants
// the events of RawPlanted. The capture must have a block device and a
// Redis target with a maxmemory.
func NewRaw(capture io.Reader, cfg RawConfig) (*Raw, error) {
	if cfg.Hosts < 3 || cfg.Days < 2 || cfg.Scrape <= 0 || cfg.Scrape > 30*time.Second {
		return nil, fmt.Errorf("need at least 3 hosts, 2 days and a scrape interval up to 30s, got %d, %d and %v", cfg.Hosts, cfg.Days, cfg.Scrape)
	}
	cfg.End = cfg.End.Truncate(time.Hour)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(capture)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	r := &Raw{cfg: cfg, capture: fams}
	device := ""
	if f := fams["stall_disk_await_seconds"]; f != nil && len(f.Metric) > 0 {
		device = label(f.Metric[0], "device")
	}
	if device == "" {
		return nil, fmt.Errorf("capture: no stall_disk_await_seconds (a block device)")
	}
	if r.gauge("stall_redis_memory_max_bytes") <= 0 {
		return nil, fmt.Errorf("capture: no stall_redis_memory_max_bytes > 0 (a Redis with a maxmemory)")
	}
	// The day before the last midnight, at hours no two events share, not
	// on an hour's edge.
	day := cfg.End.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	span := func(hour, minute int, d time.Duration) Span {
		from := day.Add(time.Duration(hour)*time.Hour + time.Duration(minute)*time.Minute)
		return Span{from, from.Add(d)}
	}
	r.Planted = RawPlanted{
		ThrottledHost: host(1), Throttled: span(10, 10, 20*time.Minute), ThrottlePeak: 1.4,
		StallsPerSec: 5, MemoryFull: 0.2, ZoneHeadroom: 0.8,
		SlowHost: host(2), SlowDevice: device, Slow: span(4, 25, 30*time.Minute), SlowAwait: 0.2, IOFull: 0.5,
		LockHeld: 0.8, HeadWait: 0.15,
		FullHost: host(0), Full: span(18, 5, 40*time.Minute), FullRatio: 0.97,
		ClientsMemory: 300 << 20, PendingClients: 40, ClusterNodes: 20,
		OddSysctlHost: host(2),
		RisingHost:    host(0), RisingRedisHost: host(1),
	}
	return r, nil
}

// Start is the time of the first scrape.
func (r *Raw) Start() time.Time { return r.cfg.End.Add(-time.Duration(r.cfg.Days) * 24 * time.Hour) }

// Scrapes returns the time of every scrape.
func (r *Raw) Scrapes() []time.Time {
	var out []time.Time
	for t := r.Start(); !t.After(r.cfg.End); t = t.Add(r.cfg.Scrape) {
		out = append(out, t)
	}
	return out
}

// ThrottleRatio is the dirty throttle ratio of host i at second t (the
// gauge a scrape reads, and what the sampler observes): a daily cycle
// around a quarter of the way to the throttle point, peaking at 14:00 UTC.
func (r *Raw) ThrottleRatio(i int, t time.Time) float64 {
	if host(i) == r.Planted.ThrottledHost && r.Planted.Throttled.has(t) {
		return r.Planted.ThrottlePeak
	}
	v := 0.25 + 0.05*float64(i) + 0.1*math.Sin(2*math.Pi*(float64(t.Hour())+float64(t.Minute())/60-8)/24)
	if host(i) == r.Planted.RisingHost {
		v += 0.2 * r.progress(t)
	}
	return v
}

// progress is 0 at the first scrape and 1 at the last.
func (r *Raw) progress(t time.Time) float64 {
	return float64(t.Sub(r.Start())) / float64(r.cfg.End.Sub(r.Start()))
}

// RedisUsed is the used memory of host i's Redis against its maxmemory at t.
func (r *Raw) RedisUsed(i int, t time.Time) float64 {
	if host(i) == r.Planted.FullHost && r.Planted.Full.has(t) {
		return r.Planted.FullRatio
	}
	v := 0.4 + 0.05*float64(i) + 0.05*math.Sin(2*math.Pi*(float64(t.Hour())-8)/24)
	if host(i) == r.Planted.RisingRedisHost {
		v += 0.1 * r.progress(t)
	}
	return v
}

// Write writes the raw series as OpenMetrics for promtool.
func (r *Raw) Write(w io.Writer) error {
	scrapes := r.Scrapes()
	g := newSamples(scrapes[0], r.cfg.Scrape, -1)
	names := make([]string, 0, len(r.capture))
	for n := range r.capture {
		names = append(names, n)
	}
	sort.Strings(names)
	for i := range r.cfg.Hosts {
		for _, name := range names {
			f := r.capture[name]
			for _, m := range f.Metric {
				r.series(&g, i, f, m, scrapes)
			}
		}
	}
	return g.write(w, false)
}

// series adds what host i's scrapes read of one captured series.
func (r *Raw) series(g *samples, i int, f *dto.MetricFamily, m *dto.Metric, scrapes []time.Time) {
	name := f.GetName()
	seconds := r.cfg.Scrape.Seconds()
	keep := func(n string) bool { return r.cfg.Keep == nil || r.cfg.Keep(n) }
	lbls := map[string]string{"job": "stall", "instance": host(i)}
	for _, l := range m.Label {
		lbls[l.GetName()] = l.GetValue()
	}
	if _, ok := lbls["broker"]; ok {
		lbls["broker"] = fmt.Sprintf("broker-%d", i) // each host's own broker
	}
	values := func(f func(k int) float64) []float64 {
		v := make([]float64, len(scrapes))
		for k := range v {
			v[k] = f(k)
		}
		return v
	}
	switch f.GetType() {
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		observe := r.Observation(name, i, lbls)
		// Cumulative counts per bucket and +Inf (the count; the text
		// parser also lists it as a bucket), the sum: from the capture,
		// plus one observation per second since the first scrape.
		var bounds, counts []float64
		for _, b := range h.Bucket {
			if !math.IsInf(b.GetUpperBound(), 1) {
				bounds = append(bounds, b.GetUpperBound())
				counts = append(counts, float64(b.GetCumulativeCount()))
			}
		}
		counts = append(counts, float64(h.GetSampleCount()))
		sum := h.GetSampleSum()
		bucketVals := make([][]float64, len(counts))
		for j := range bucketVals {
			bucketVals[j] = make([]float64, len(scrapes))
		}
		sums := make([]float64, len(scrapes))
		for k, t := range scrapes {
			if k > 0 {
				v := observe(t)
				sum += v * seconds
				for j := range counts {
					if j == len(bounds) || v <= bounds[j] {
						counts[j] += seconds
					}
				}
			}
			for j := range counts {
				bucketVals[j][k] = counts[j]
			}
			sums[k] = sum
		}
		if keep(name + "_bucket") {
			for j := range counts {
				le := "+Inf"
				if j < len(bounds) {
					le = strconv.FormatFloat(bounds[j], 'g', -1, 64)
				}
				lbls["le"] = le
				g.add(name+"_bucket", labelString(lbls), bucketVals[j])
			}
			delete(lbls, "le")
		}
		if keep(name + "_sum") {
			g.add(name+"_sum", labelString(lbls), sums)
		}
		if keep(name + "_count") {
			g.add(name+"_count", labelString(lbls), bucketVals[len(bounds)])
		}
	case dto.MetricType_COUNTER:
		if !keep(name) {
			return
		}
		rate := r.Rate(name, i, lbls)
		total := m.GetCounter().GetValue()
		g.add(name, labelString(lbls), values(func(k int) float64 {
			if k > 0 {
				total += rate(scrapes[k]) * seconds
			}
			return total
		}))
	case dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
		if !keep(name) {
			return
		}
		v := m.GetGauge().GetValue()
		if f.GetType() == dto.MetricType_UNTYPED {
			v = m.GetUntyped().GetValue()
		}
		course := r.gaugeCourse(i, name, lbls, v)
		g.add(name, labelString(lbls), values(func(k int) float64 { return course(scrapes[k]) }))
	}
}

// Gauge is the value of host i's gauge name{lbls} at t (its scrapes read
// it): the captured one unless a course moves it.
func (r *Raw) Gauge(name string, i int, lbls map[string]string) func(time.Time) float64 {
	return r.gaugeCourse(i, name, lbls, r.captured(name, lbls))
}

// Buckets are the upper bounds of the captured histogram name, +Inf left out.
func (r *Raw) Buckets(name string) []float64 {
	var out []float64
	if f := r.capture[name]; f != nil && len(f.Metric) > 0 {
		for _, b := range f.Metric[0].GetHistogram().Bucket {
			if !math.IsInf(b.GetUpperBound(), 1) {
				out = append(out, b.GetUpperBound())
			}
		}
	}
	return out
}

// captured is the value of the captured gauge name whose labels include
// lbls (but job, instance and broker, which Write sets per host).
func (r *Raw) captured(name string, lbls map[string]string) float64 {
	f := r.capture[name]
	if f == nil {
		return 0
	}
	for _, m := range f.Metric {
		match := true
		for k, v := range lbls {
			if k != "job" && k != "instance" && k != "broker" && k != "__name__" && label(m, k) != v {
				match = false
			}
		}
		if match {
			if f.GetType() == dto.MetricType_UNTYPED {
				return m.GetUntyped().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// gaugeCourse is a gauge's value at a scrape: the captured v unless moved.
func (r *Raw) gaugeCourse(i int, name string, lbls map[string]string, v float64) func(time.Time) float64 {
	p := r.Planted
	during := func(h string, s Span, planted float64) func(time.Time) float64 {
		return func(t time.Time) float64 {
			if host(i) == h && s.has(t) {
				return planted
			}
			return v
		}
	}
	switch name {
	case "stall_vm_dirty_throttle_ratio":
		return func(t time.Time) float64 { return r.ThrottleRatio(i, t) }
	case "stall_redis_memory_used_bytes":
		limit := r.gauge("stall_redis_memory_max_bytes")
		return func(t time.Time) float64 { return r.RedisUsed(i, t) * limit }
	case "stall_vm_zone_free_bytes":
		return during(p.ThrottledHost, p.Throttled, p.ZoneHeadroom*r.lowWatermark(lbls))
	case "stall_redis_clients_memory_bytes":
		if lbls["type"] == "normal" && host(i) == p.RisingRedisHost {
			limit := r.gauge("stall_redis_memory_max_bytes")
			return func(t time.Time) float64 { return v + (0.005+0.015*r.progress(t))*limit }
		}
		if lbls["type"] == "normal" {
			return during(p.FullHost, p.Full, p.ClientsMemory)
		}
	case "stall_redis_client_pending_output_clients":
		return during(p.FullHost, p.Full, p.PendingClients)
	case "stall_rocketmq_send_queue_head_wait_seconds":
		return during(p.SlowHost, p.Slow, p.HeadWait)
	case "stall_vm_sysctl":
		if host(i) == p.OddSysctlHost {
			switch lbls["name"] {
			case "vm.dirty_ratio":
				return func(time.Time) float64 { return 40 }
			case "vm.dirty_background_ratio":
				return func(time.Time) float64 { return 5 }
			}
		}
	}
	return func(time.Time) float64 { return v }
}

// lowWatermark is the captured low watermark of the zone of lbls.
func (r *Raw) lowWatermark(lbls map[string]string) float64 {
	if f := r.capture["stall_vm_zone_watermark_bytes"]; f != nil {
		for _, m := range f.Metric {
			if label(m, "level") == "low" && label(m, "node") == lbls["node"] && label(m, "zone") == lbls["zone"] {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// Rate is how much host i's counter name{lbls} rises per second in the
// scrape interval that ends at t.
func (r *Raw) Rate(name string, i int, lbls map[string]string) func(time.Time) float64 {
	p := r.Planted
	during := func(h string, s Span, planted, otherwise float64) func(time.Time) float64 {
		return func(t time.Time) float64 {
			if host(i) == h && s.has(t) {
				return planted
			}
			return otherwise
		}
	}
	switch name {
	case "stall_vm_dirty_throttled_seconds_total": // the sampler's seconds at or above 1
		return func(t time.Time) float64 {
			if r.ThrottleRatio(i, t) >= 1 {
				return 1
			}
			return 0
		}
	case "stall_vm_allocation_stalls_total":
		return during(p.ThrottledHost, p.Throttled, p.StallsPerSec, 0)
	case "stall_pressure_stalled_seconds_total":
		switch {
		case lbls["scope"] != "full":
		case lbls["resource"] == "memory":
			return during(p.ThrottledHost, p.Throttled, p.MemoryFull, 0)
		case lbls["resource"] == "io":
			return during(p.SlowHost, p.Slow, p.IOFull, 0.001)
		}
	case "stall_redis_commands_total":
		if lbls["cmd"] == "cluster|nodes" {
			return during(p.FullHost, p.Full, p.ClusterNodes, 0.01)
		}
		return func(time.Time) float64 { return 1 }
	}
	return func(time.Time) float64 { return 0 }
}

// Observation is what host i's histogram name{lbls} observes every second
// of the scrape interval that ends at t (the sampler's histograms and the
// broker's lock samples, once a second).
func (r *Raw) Observation(name string, i int, lbls map[string]string) func(time.Time) float64 {
	p := r.Planted
	slow := host(i) == p.SlowHost && lbls["device"] == p.SlowDevice
	switch name {
	case "stall_vm_dirty_throttle_ratio_sampled":
		return func(t time.Time) float64 { return r.ThrottleRatio(i, t) }
	case "stall_disk_await_seconds":
		return func(t time.Time) float64 {
			if slow && p.Slow.has(t) {
				return p.SlowAwait
			}
			return 0.002
		}
	case "stall_disk_utilization_ratio":
		return func(t time.Time) float64 {
			if slow && p.Slow.has(t) {
				return 1
			}
			return 0.2
		}
	case "stall_rocketmq_commitlog_lock_held_sampled_seconds":
		return func(t time.Time) float64 {
			switch {
			case host(i) == p.SlowHost && p.Slow.has(t):
				return p.LockHeld
			case host(i) == p.RisingHost:
				return 0.001 + 0.2*r.progress(t)
			}
			return 0.001
		}
	}
	return func(time.Time) float64 { return 0.001 }
}

// gauge returns the captured value of a gauge with one series, or 0.
func (r *Raw) gauge(name string) float64 {
	if f := r.capture[name]; f != nil && len(f.Metric) == 1 {
		return f.Metric[0].GetGauge().GetValue()
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for j, k := range keys {
		if j > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, l[k])
	}
	return b.String()
}
