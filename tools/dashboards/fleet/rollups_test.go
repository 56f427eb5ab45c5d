package fleet

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"sort"
	"testing"
	"time"
)

// rollupChecker compares the roll-ups Prometheus holds with what the raw
// series imply, computed from the courses of Raw (Gauge, Rate,
// Observation) at the times of the scrapes and evaluations.
type rollupChecker struct {
	base  string
	raw   *Raw
	rules ruleSet
}

// series returns every series of name with all its samples.
func (c rollupChecker) series(t *testing.T, name string) []Sample {
	t.Helper()
	window := c.raw.cfg.End.Sub(c.raw.Start())
	got, err := query(context.Background(), c.base+"/api/v1/query", url.Values{
		"query": {fmt.Sprintf("%s[%ds]", name, int(window.Seconds()))}, "time": {fmt.Sprint(c.raw.cfg.End.Unix())}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return got
}

// window returns the first and the last scrape in the range of an
// evaluation at `at` over d: (at-d, at] as Prometheus 3 reads it, or with
// closed [at-d, at] as Prometheus 2 does.
func (c rollupChecker) window(at time.Time, d time.Duration, closed bool) (first, last time.Time, ok bool) {
	from := at.Add(-d)
	for _, s := range c.raw.Scrapes() {
		if (s.After(from) || closed && s.Equal(from)) && !s.After(at) {
			if !ok {
				first, ok = s, true
			}
			last = s
		}
	}
	return first, last, ok
}

// gaugeMax is the largest value of a gauge's scrapes in the hour up to at,
// and whether both range semantics agree on it.
func (c rollupChecker) gaugeMax(at time.Time, f func(time.Time) float64) (float64, bool) {
	var out [2]float64
	for k, closed := range []bool{false, true} {
		out[k] = math.Inf(-1)
		first, last, _ := c.window(at, time.Hour, closed)
		for s := first; !s.After(last); s = s.Add(c.raw.cfg.Scrape) {
			out[k] = max(out[k], f(s))
		}
	}
	return out[0], out[0] == out[1]
}

// counterDelta is how much a counter rose between the first and the last
// scrape of the hour up to at (Raw.Rate, for every second of each scrape
// interval), under either range semantics: increase() extrapolates this to
// the hour, by at most a scrape interval's share.
func (c rollupChecker) counterDelta(at time.Time, rate func(time.Time) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, closed := range []bool{false, true} {
		first, last, _ := c.window(at, time.Hour, closed)
		var d float64
		for s := first.Add(c.raw.cfg.Scrape); !s.After(last); s = s.Add(c.raw.cfg.Scrape) {
			d += rate(s) * c.raw.cfg.Scrape.Seconds()
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	extrapolated := float64(time.Hour) / float64(time.Hour-2*c.raw.cfg.Scrape)
	return lo, hi * extrapolated
}

// quantile is histogram_quantile(q) of what a histogram observed between
// the first and the last scrape of the hour up to at (rate() scales every
// bucket alike, so the counts' ratios are the observations'), under both
// range semantics: the estimate interpolated within the bucket that holds
// the rank, or the largest finite bound for the +Inf bucket.
func (c rollupChecker) quantile(at time.Time, q float64, bounds []float64, observe func(time.Time) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, closed := range []bool{false, true} {
		first, last, _ := c.window(at, time.Hour, closed)
		counts := make([]float64, len(bounds))
		var n float64
		for s := first.Add(c.raw.cfg.Scrape); !s.After(last); s = s.Add(c.raw.cfg.Scrape) {
			v, w := observe(s), c.raw.cfg.Scrape.Seconds() // the interval's observations
			n += w
			for j, b := range bounds {
				if v <= b {
					counts[j] += w
				}
			}
		}
		rank := q * n
		j := sort.Search(len(bounds), func(j int) bool { return counts[j] >= rank })
		v := bounds[len(bounds)-1]
		if j < len(bounds) {
			start, below := 0.0, 0.0
			if j > 0 {
				start, below = bounds[j-1], counts[j-1]
			}
			v = start + (bounds[j]-start)*(rank-below)/(counts[j]-below)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// overlap is how much of span the hour up to at holds.
func overlap(span Span, at time.Time) time.Duration {
	from := max(span.From.Unix(), at.Add(-time.Hour).Unix())
	to := min(span.To.Unix(), at.Unix())
	return time.Duration(max(0, to-from)) * time.Second
}

func hostIndex(t *testing.T, s Sample) int {
	var i int
	if _, err := fmt.Sscanf(s.Labels["instance"], "host-%04d", &i); err != nil {
		t.Fatalf("instance %q: %v", s.Labels["instance"], err)
	}
	return i
}

func near(got, want, tolerance float64) bool {
	return math.Abs(got-want) <= tolerance*math.Max(1e-3, math.Abs(want))
}

// checkRollups checks every roll-up the dashboard reads: a sample at every
// evaluation on every host, and the value the raw series imply; the planted
// events show in the hours that hold them and in the daily maxima after.
func checkRollups(t *testing.T, c rollupChecker) {
	raw, p := c.raw, c.raw.Planted
	limit := raw.Gauge("stall_redis_memory_max_bytes", 0, nil)(raw.Start())
	evaluations := map[string]int{}
	for _, g := range c.rules.groups[1:] {
		for _, r := range g.rules {
			first := raw.Start().Add(time.Hour).Truncate(g.interval).Add(g.offset)
			if first.Before(raw.Start().Add(time.Hour)) {
				first = first.Add(g.interval)
			}
			evaluations[r.Record] = int(raw.cfg.End.Sub(first)/g.interval) + 1
		}
	}

	// hourly says what each hourly roll-up's sample at `at` must be: exact
	// (want, with sure when both range semantics agree on it) or within
	// [lo, hi].
	type bounds struct{ lo, hi float64 }
	exact := func(v float64, sure bool) (bounds, bool) { return bounds{v, v}, sure }
	within := func(lo, hi float64) (bounds, bool) { return bounds{lo, hi}, true }
	type labels = map[string]string
	hourly := map[string]func(i int, s Sample, at time.Time) (bounds, bool){
		"instance:stall_vm_dirty_throttle_ratio:max1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			return exact(c.gaugeMax(at, raw.Gauge("stall_vm_dirty_throttle_ratio", i, nil)))
		},
		"addr:stall_redis_memory_used_over_max:max1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			v, sure := c.gaugeMax(at, raw.Gauge("stall_redis_memory_used_bytes", i, nil))
			return exact(v/limit, sure)
		},
		"addr:stall_redis_clients_memory_over_max:max1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			v, sure := c.gaugeMax(at, raw.Gauge("stall_redis_clients_memory_bytes", i, labels{"type": "normal"}))
			return exact(v/limit, sure)
		},
		"addr_type:stall_redis_clients_memory_bytes:max1h": func(i int, s Sample, at time.Time) (bounds, bool) {
			return exact(c.gaugeMax(at, raw.Gauge("stall_redis_clients_memory_bytes", i, labels{"type": s.Labels["type"]})))
		},
		"addr:stall_redis_client_pending_output_clients:max1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			return exact(c.gaugeMax(at, raw.Gauge("stall_redis_client_pending_output_clients", i, nil)))
		},
		"broker:stall_rocketmq_send_queue_head_wait_seconds:max1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			return exact(c.gaugeMax(at, raw.Gauge("stall_rocketmq_send_queue_head_wait_seconds", i, nil)))
		},
		"instance:stall_vm_sysctl:last1h": func(i int, s Sample, at time.Time) (bounds, bool) {
			return exact(raw.Gauge("stall_vm_sysctl", i, labels{"name": s.Labels["name"]})(at), true)
		},
		"instance:stall_vm_zone_free_over_low_watermark:min1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			least, sure := math.Inf(1), true
			for _, m := range raw.capture["stall_vm_zone_free_bytes"].Metric {
				z := labels{"node": label(m, "node"), "zone": label(m, "zone")}
				free := raw.Gauge("stall_vm_zone_free_bytes", i, z)
				v, ok := c.gaugeMax(at, func(t time.Time) float64 { return -free(t) })
				if low := raw.lowWatermark(z); low > 0 {
					least, sure = min(least, -v/low), sure && ok
				}
			}
			return exact(least, sure)
		},
		"instance:stall_vm_dirty_throttled_seconds:increase1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			return within(c.counterDelta(at, raw.Rate("stall_vm_dirty_throttled_seconds_total", i, nil)))
		},
		"instance:stall_vm_allocation_stalls:increase1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			return within(c.counterDelta(at, raw.Rate("stall_vm_allocation_stalls_total", i, nil)))
		},
		"instance_resource:stall_pressure_full_stalled_seconds:increase1h": func(i int, s Sample, at time.Time) (bounds, bool) {
			return within(c.counterDelta(at, raw.Rate("stall_pressure_stalled_seconds_total", i, labels{"resource": s.Labels["resource"], "scope": "full"})))
		},
		"instance_device:stall_disk_await_seconds:p99_1h": func(i int, s Sample, at time.Time) (bounds, bool) {
			return within(c.quantile(at, 0.99, raw.Buckets("stall_disk_await_seconds"),
				raw.Observation("stall_disk_await_seconds", i, labels{"device": s.Labels["device"]})))
		},
		"instance_device:stall_disk_utilization_ratio:max1h": func(i int, s Sample, at time.Time) (bounds, bool) {
			return within(c.quantile(at, 1, raw.Buckets("stall_disk_utilization_ratio"),
				raw.Observation("stall_disk_utilization_ratio", i, labels{"device": s.Labels["device"]})))
		},
		"broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h": func(i int, _ Sample, at time.Time) (bounds, bool) {
			return within(c.quantile(at, 0.99, raw.Buckets("stall_rocketmq_commitlog_lock_held_sampled_seconds"),
				raw.Observation("stall_rocketmq_commitlog_lock_held_sampled_seconds", i, nil)))
		},
	}

	// The peaks of the alerts' short-window values (recorded every minute):
	// in an hour that holds at least 10 minutes of the span, the planted
	// value; in one that ends 10 minutes or more away from it, the healthy
	// value; for hosts and series other than the planted, always healthy.
	thr, bg := raw.Gauge("stall_vm_dirty_threshold_bytes", 1, nil)(raw.Start()), raw.Gauge("stall_vm_dirty_background_threshold_bytes", 1, nil)(raw.Start())
	band := func(ratio float64) float64 { return (ratio*(thr+bg) - 2*bg) / (thr - bg) }
	type peak struct {
		host    string
		span    Span
		match   labels // of the planted series
		planted bounds
		healthy bounds
	}
	around := func(v float64) bounds { return bounds{v * 0.97, v * 1.03} }
	zero := bounds{0, 0}
	peaks := map[string][]peak{
		"instance:stall_vm_dirty_writeback_band:mean1m_max1h":    {{p.ThrottledHost, p.Throttled, nil, around(band(p.ThrottlePeak)), bounds{math.Inf(-1), band(0.6)}}},
		"instance:stall_vm_dirty_throttled_seconds:rate1m_max1h": {{p.ThrottledHost, p.Throttled, nil, around(1), zero}},
		"instance:stall_vm_allocation_stalls:rate2m_max1h":       {{p.ThrottledHost, p.Throttled, nil, around(p.StallsPerSec), zero}},
		"instance_resource:stall_pressure_full_stalled_seconds:rate2m_max1h": {
			{p.ThrottledHost, p.Throttled, labels{"resource": "memory"}, around(p.MemoryFull), zero},
			{p.SlowHost, p.Slow, labels{"resource": "io"}, around(p.IOFull), around(0.001)},
		},
		"instance_device:stall_disk_await_seconds:p50_1m_max1h":                {{p.SlowHost, p.Slow, labels{"device": p.SlowDevice}, bounds{0.1, 0.25}, bounds{0.001, 0.0025}}},
		"addr:stall_redis_commands_cluster_nodes:rate5m_max1h":                 {{p.FullHost, p.Full, nil, around(p.ClusterNodes), around(0.01)}},
		"broker:stall_rocketmq_commitlog_lock_held_over_0_5s:increase1m_max1h": {{p.SlowHost, p.Slow, nil, around(60), zero}},
	}

	hourlyGot := map[string]map[string]Sample{} // by roll-up and series
	for _, name := range c.rules.rollups {
		got := c.series(t, name)
		if c.rules.fromNotCaptured(name) {
			if len(got) != 0 {
				t.Errorf("%s: %d series from families the capture lacks", name, len(got))
			}
			continue
		}
		hosts := map[int]bool{}
		hourlyGot[name] = map[string]Sample{}
		for _, s := range got {
			i := hostIndex(t, s)
			hosts[i] = true
			hourlyGot[name][fmt.Sprint(s.Labels)] = s
			if len(s.Values) != evaluations[name] {
				t.Errorf("%s%v: %d samples, want one at each of the %d evaluations", name, s.Labels, len(s.Values), evaluations[name])
			}
			check, ok := hourly[name]
			for k, at := range s.Times {
				v := s.Values[k]
				if ok {
					if b, sure := check(i, s, at); sure && !(v >= b.lo*(1-1e-9)-1e-12 && v <= b.hi*(1+1e-9)+1e-12) {
						t.Errorf("%s%v at %v: %g, want %s", name, s.Labels, at, v, describe(b.lo, b.hi))
					}
				}
				for _, pk := range peaks[name] {
					planted := s.Labels["instance"] == pk.host
					for k, v := range pk.match {
						planted = planted && s.Labels[k] == v
					}
					o := overlap(Span{pk.span.From.Add(-10 * time.Minute), pk.span.To.Add(10 * time.Minute)}, at)
					var want bounds
					switch {
					case planted && overlap(pk.span, at) >= 10*time.Minute:
						want = pk.planted
					case !planted || o == 0:
						want = pk.healthy
					default:
						continue
					}
					if len(pk.match) > 0 && !planted && !matches(s.Labels, pk.match) {
						continue // another series (the other resource): its own entry
					}
					if !(v >= want.lo-1e-12 && v <= want.hi+1e-12) {
						t.Errorf("%s%v at %v: %g, want %s", name, s.Labels, at, v, describe(want.lo, want.hi))
					}
				}
			}
		}
		if len(hosts) != raw.cfg.Hosts {
			t.Errorf("%s: series on %d hosts, want all %d", name, len(hosts), raw.cfg.Hosts)
		}
		if _, ok := hourly[name]; !ok && peaks[name] == nil && !isDaily(c.rules, name) {
			t.Errorf("%s: no check of its values", name)
		}
	}

	// The daily maxima: the largest hourly sample of the 24 hours up to each
	// evaluation (those checked above), and the planted peaks in them.
	for _, d := range []struct{ daily, hourly, host string }{
		{"instance:stall_vm_dirty_throttle_ratio:max1d", "instance:stall_vm_dirty_throttle_ratio:max1h", p.ThrottledHost},
		{"addr:stall_redis_memory_used_over_max:max1d", "addr:stall_redis_memory_used_over_max:max1h", p.FullHost},
		{"addr:stall_redis_clients_memory_over_max:max1d", "addr:stall_redis_clients_memory_over_max:max1h", p.FullHost},
		{"broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h_max1d", "broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h", p.SlowHost},
	} {
		if !isDaily(c.rules, d.daily) {
			t.Errorf("%s is not a daily roll-up of alerts/capacity.yml that the dashboard reads", d.daily)
			continue
		}
		var plantedPeak float64
		for _, s := range hourlyGot[d.hourly] {
			if s.Labels["instance"] == d.host {
				for _, v := range s.Values {
					plantedPeak = max(plantedPeak, v)
				}
			}
		}
		seen := 0
		for _, s := range c.series(t, d.daily) {
			labels := map[string]string{}
			for k, v := range s.Labels {
				labels[k] = v
			}
			labels["__name__"] = d.hourly
			h, ok := hourlyGot[d.hourly][fmt.Sprint(labels)]
			if !ok {
				t.Errorf("%s%v: no hourly series", d.daily, s.Labels)
				continue
			}
			for k, at := range s.Times {
				want := math.Inf(-1)
				for j, ht := range h.Times {
					if ht.After(at.Add(-24*time.Hour)) && !ht.After(at) {
						want = max(want, h.Values[j])
					}
				}
				if s.Values[k] != want {
					t.Errorf("%s%v at %v: %g, want %g (the largest hourly sample of the day)", d.daily, s.Labels, at, s.Values[k], want)
				}
				if s.Labels["instance"] == d.host && s.Values[k] == plantedPeak {
					seen++
				}
			}
		}
		if seen == 0 {
			t.Errorf("%s: the planted peak %g of %s is in no daily maximum", d.daily, plantedPeak, d.host)
		}
	}
	for _, planted := range []struct {
		name, host string
		want       float64
	}{
		{"instance:stall_vm_dirty_throttle_ratio:max1h", p.ThrottledHost, p.ThrottlePeak},
		{"addr:stall_redis_memory_used_over_max:max1h", p.FullHost, p.FullRatio},
	} {
		found := false
		for _, s := range hourlyGot[planted.name] {
			found = found || s.Labels["instance"] == planted.host && contains(s.Values, planted.want)
		}
		if !found {
			t.Errorf("%s: the planted %g of %s is in no hour", planted.name, planted.want, planted.host)
		}
	}
}

func matches(l, m map[string]string) bool {
	for k, v := range m {
		if l[k] != v {
			return false
		}
	}
	return true
}

func contains(values []float64, want float64) bool {
	for _, v := range values {
		if near(v, want, 1e-9) {
			return true
		}
	}
	return false
}

func isDaily(rs ruleSet, name string) bool {
	for _, r := range rs.groups[len(rs.groups)-1].rules {
		if r.Record == name {
			return true
		}
	}
	return false
}

func describe(lo, hi float64) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("in [%g, %g]", lo, hi)
}
