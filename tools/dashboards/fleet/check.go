package fleet

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// CheckPlanted checks the capacity dashboard's answers (results of
// Evaluate over the whole generated range) against the planted hosts of
// cfg: each comes out on top of its section's tables, the forecasts point
// the right way. It returns the problems found.
func CheckPlanted(results []Result, cfg Config) (problems []string) {
	defer func() {
		if r := recover(); r != nil {
			if s, ok := r.(fatal); ok {
				problems = append(problems, string(s))
				return
			}
			panic(r)
		}
	}()
	errorf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	fail := func(format string, a ...any) { panic(fatal(fmt.Sprintf(format, a...))) }
	p := Plant(cfg)
	days := float64(cfg.Days)
	panel := func(title, ref string) []Sample {
		for _, r := range results {
			if r.Panel == title && r.RefID == ref {
				return r.Series
			}
		}
		fail("no query %s of panel %q", ref, title)
		return nil
	}
	// top returns the rows of a ranked table's ranking query, worst first.
	top := func(title string, worst func(a, b float64) bool) []Sample {
		rows := panel(title, "A")
		if len(rows) == 0 || len(rows) > 10 {
			fail("%q: %d rows, want 1 to 10 (topk of the Top N variable)", title, len(rows))
		}
		sort.SliceStable(rows, func(i, j int) bool { return worst(rows[i].Value, rows[j].Value) })
		return rows
	}
	higher := func(a, b float64) bool { return a > b }
	lower := func(a, b float64) bool { return a < b }
	expectFirst := func(title string, rows []Sample, want map[string]string) {
		for k, v := range want {
			if rows[0].Labels[k] != v {
				errorf("%q: first row %v (%g), want %s=%s; rows: %v", title, rows[0].Labels, rows[0].Value, k, v, rows)
				return
			}
		}
	}
	// cell returns a further column's value for the row with these labels.
	cell := func(title, ref string, labels map[string]string) (float64, bool) {
		for _, s := range panel(title, ref) {
			match := true
			for k, v := range labels {
				match = match && s.Labels[k] == v
			}
			if match {
				return s.Value, true
			}
		}
		return 0, false
	}

	// Page cache: the host throttled on 3 days (3 hours each) is first; its
	// peak was on the last of them; the rising host's forecast is days away.
	const throttle = "Hosts closest to the dirty throttle point"
	rows := top(throttle, higher)
	expectFirst(throttle, rows, map[string]string{"instance": p.ThrottledHost})
	th := map[string]string{"instance": p.ThrottledHost}
	if when, ok := cell(throttle, "B", th); !ok || math.Abs(when/1000-float64(p.ThrottlePeaks[2].Unix())) > 2*3600 {
		errorf("%q: peak at %v, want within 2 hours of %v", throttle, time.UnixMilli(int64(when)).UTC(), p.ThrottlePeaks[2])
	}
	if h, ok := cell(throttle, "D", th); !ok || h != 9 {
		errorf("%q: %g hours throttled, want 9 (3 hours on 3 days)", throttle, h)
	}
	if d, ok := cell(throttle, "E", map[string]string{"instance": p.ThrottleTrend}); !ok || d <= 0 || d > days {
		errorf("%q: rising host %s reaches the throttle point in %g days (found %v), want within %g days", throttle, p.ThrottleTrend, d, ok, days)
	}
	var crossings float64
	for _, s := range panel("Hosts that crossed a page-cache threshold, per day", "B") {
		for _, v := range s.Values {
			crossings += v
		}
	}
	if crossings != 3 {
		errorf("hosts at the throttle point per day add up to %g, want 3 (one host on 3 days)", crossings)
	}

	// Disks: the device whose await doubled grows fastest.
	const growth = "Devices whose await grows fastest"
	rows = top(growth, higher)
	expectFirst(growth, rows, map[string]string{"instance": p.DiskHost, "device": p.DiskDevice})
	if rows[0].Value < 1.6 || rows[0].Value > 2.4 {
		errorf("%q: growth %g, want about 2", growth, rows[0].Value)
	}
	if len(rows) > 1 && rows[1].Value > 1.5 {
		errorf("%q: a healthy device grows %g times", growth, rows[1].Value)
	}

	// Memory: the reclaiming host leads all three tables.
	for _, title := range []string{"Hosts with the most allocation stalls", "Hosts with the most memory pressure"} {
		expectFirst(title, top(title, higher), map[string]string{"instance": p.ReclaimHost})
	}
	const zones = "Hosts with the least free memory above the low watermark"
	rows = top(zones, lower)
	expectFirst(zones, rows, map[string]string{"instance": p.ReclaimHost})
	if rows[0].Value >= 1 {
		errorf("%q: lowest %g, want below the low watermark (1)", zones, rows[0].Value)
	}

	// Redis: the instance filling up comes first and its forecast is finite.
	const redis = "Redis instances closest to maxmemory"
	rows = top(redis, higher)
	rd := map[string]string{"instance": p.RedisHost, "addr": p.RedisAddr}
	expectFirst(redis, rows, rd)
	d, ok := cell(redis, "D", rd)
	if !ok || d <= 0 || d > days {
		errorf("%q: %s reaches maxmemory in %g days (found %v), want within %g", redis, p.RedisHost, d, ok, days)
	}
	for _, s := range panel(redis, "D") {
		if s.Labels["instance"] != p.RedisHost && s.Value < d {
			errorf("%q: healthy %s reaches maxmemory sooner (%g days) than the planted one (%g)", redis, s.Labels["instance"], s.Value, d)
		}
	}

	// RocketMQ: the broker with long lock holds, trending towards 1 s.
	const broker = "Brokers with the longest CommitLog lock holds"
	br := map[string]string{"broker": p.Broker}
	expectFirst(broker, top(broker, higher), br)
	if d, ok := cell(broker, "F", br); !ok || d < 0 || d > days {
		errorf("%q: %s reaches 1 s in %g days (found %v), want within %g", broker, p.Broker, d, ok, days)
	}
	if h, ok := cell(broker, "E", br); !ok || h < float64(days) {
		errorf("%q: %g hours with long holds, want at least one a day", broker, h)
	}

	// DNS: the storming host and its process.
	expectFirst("Hosts sending the most PTR lookups", top("Hosts sending the most PTR lookups", higher), map[string]string{"instance": p.DNSHost})
	expectFirst("Processes sending the most PTR lookups", top("Processes sending the most PTR lookups", higher),
		map[string]string{"instance": p.DNSHost, "comm": p.DNSComm})

	// Tunables: exactly the odd hosts, on the two settings they changed.
	var odd []string
	for _, s := range panel("Hosts whose tunables differ from most of the fleet", "A") {
		odd = append(odd, s.Labels["instance"]+" "+s.Labels["name"]+"="+s.Labels["value"])
	}
	sort.Strings(odd)
	var want []string
	for _, h := range p.OddSysctlHosts {
		want = append(want, h+" vm.dirty_background_ratio=5", h+" vm.dirty_ratio=40")
	}
	sort.Strings(want)
	if !slices.Equal(odd, want) {
		errorf("hosts whose tunables differ: %v, want %v", odd, want)
	}

	return problems
}

// fatal is a problem after which the other checks cannot run.
type fatal string
