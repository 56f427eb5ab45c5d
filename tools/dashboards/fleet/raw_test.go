package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"sigs.k8s.io/yaml"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
	"github.com/stall-exporter/stall_exporter/tools/dashboards"
	"github.com/stall-exporter/stall_exporter/tools/internal/selectors"
)

// notCaptured are the raw families the capacity roll-ups read that the
// capture in TestRollupsFromRawSeries cannot have, and why; the roll-ups
// reading them are left to TestPlantedHosts (generated roll-ups) and the
// end-to-end test (their expressions evaluate).
var notCaptured = map[string]string{
	"stall_rocketmq_put_latency_seconds_bucket": "a broker (and the test broker) reports its first putMessageDistributeTime window 60 s after start",
	"stall_dns_queries_total":                   "the dns collector captures packets: root, CAP_NET_RAW and eBPF",
	"stall_dns_process_queries_total":           "the dns collector captures packets: root, CAP_NET_RAW and eBPF",
}

// TestRollupsFromRawSeries shows that alerts/capacity.yml computes the
// capacity dashboard's roll-ups from what the exporter really serves. It
// captures the real exporter's /metrics once (this machine's /proc, a real
// redis-server, the RocketMQ test broker), lays the series the roll-ups
// read out over two days of 30 s scrapes on three hosts with planted
// events (NewRaw, RawPlanted: a throttled hour, a slow-disk hour, a Redis
// near maxmemory), turns them into blocks with promtool, and has the real
// Prometheus evaluate, pass by pass, the alerts' recording rules that the
// roll-ups read, the hourly group and the daily group (record). Every
// roll-up the dashboard reads must then have a sample at every hour on
// every host (but those of notCaptured), with the values the raw series
// imply (checkRollups), and every dashboard query must answer over the two
// days. TestPlantedHosts does the same on a month of generated roll-ups.
func TestRollupsFromRawSeries(t *testing.T) {
	promtool := collectortest.RequireTool(t, "promtool")
	prom := collectortest.RequireTool(t, "prometheus")
	redisBin := collectortest.RequireTool(t, "redis-server")

	rules := readRules(t)
	capture := captureExporter(t, redisBin)
	raw, err := NewRaw(strings.NewReader(capture), RawConfig{Hosts: 3, Days: 2, End: testEnd(t), Scrape: 30 * time.Second,
		Keep: func(name string) bool { return rules.rawNames[name] }})
	if err != nil {
		t.Fatal(err)
	}
	var missing, lacks []string
	for n := range rules.rawNames {
		if !strings.Contains(capture, "\n"+n+"{") && !strings.Contains(capture, "\n"+n+" ") {
			missing = append(missing, n)
		}
	}
	for n := range notCaptured {
		lacks = append(lacks, n)
	}
	slices.Sort(missing)
	slices.Sort(lacks)
	if !slices.Equal(missing, lacks) {
		t.Fatalf("the capture lacks %v of what the roll-ups read; only %v may be missing (notCaptured)", missing, lacks)
	}

	began := time.Now()
	data := filepath.Join(t.TempDir(), "data")
	blocksFrom(t, promtool, data, raw.Write)
	start, end := raw.Start(), raw.cfg.End
	// Each pass reads the output of the one before, from the first whole
	// hour of data on.
	for _, g := range rules.groups {
		record(t, promtool, prom, data, g, start.Add(time.Hour), end)
	}
	_, base := serve(t, prom, data)
	t.Logf("raw series and roll-ups in Prometheus in %v", time.Since(began).Round(time.Millisecond))

	checkRollups(t, rollupChecker{base: base, raw: raw, rules: rules})

	// Every query of the dashboard answers over the two days; its per-day
	// graphs step at midnight, and the last one sees the planted day.
	results, err := Evaluate(context.Background(), base, "../../../dashboards/stall-capacity.json", end, end.Sub(start))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if len(r.Series) == 0 && !readsNotCaptured(t, r.Expr, rules) {
			t.Errorf("%q %s returned no data: %s", r.Panel, r.RefID, r.Expr)
		}
	}
}

// ruleSet is what the test evaluates: the rule groups, each a pass, and
// the names they read.
type ruleSet struct {
	groups   []ruleGroup
	rollups  []string            // what the capacity dashboard reads of capacity.yml's output
	rawNames map[string]bool     // the exporter's series all of them read
	reads    map[string][]string // the names each recorded name is computed from
}

// ruleGroup is a group of recording rules evaluated every interval at
// offset past it, as Prometheus offsets each group within its interval.
type ruleGroup struct {
	name             string
	interval, offset time.Duration
	rules            []rule
}

type rule struct {
	Record string `json:"record"`
	Expr   string `json:"expr"`
}

// readRules reads alerts/capacity.yml's hourly and daily groups (the daily
// one reads the hourly one's output, so they are two passes) and, as a
// first pass, the alerts' recording rules that the hourly group reads,
// every minute. The hourly group records 17 minutes past the hour and the
// daily one DailyLag later, as the generated roll-ups are.
func readRules(t *testing.T) ruleSet {
	t.Helper()
	type file struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval"`
			Rules    []rule `json:"rules"`
		} `json:"groups"`
	}
	read := func(name string) file {
		var f file
		b, err := os.ReadFile(name)
		if err == nil {
			err = yaml.Unmarshal(b, &f)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return f
	}
	capacity := read("../../../alerts/capacity.yml")
	if len(capacity.Groups) != 2 || capacity.Groups[0].Interval != "1h" || capacity.Groups[1].Interval != "1h" {
		t.Fatalf("alerts/capacity.yml: want an hourly and a daily group, interval 1h")
	}
	recordedBy := map[string]rule{} // the alerts' recording rules, by output
	files, _ := filepath.Glob("../../../alerts/*.yml")
	for _, name := range files {
		if filepath.Base(name) == "capacity.yml" {
			continue
		}
		for _, g := range read(name).Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					recordedBy[r.Record] = r
				}
			}
		}
	}
	rs := ruleSet{rawNames: map[string]bool{}, reads: map[string][]string{}}
	alerts := ruleGroup{name: "the alerts' recording rules", interval: time.Minute, offset: 15 * time.Second}
	reads := func(r rule) []string {
		names, err := selectors.MetricNames(r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		rs.reads[r.Record] = names
		return names
	}
	for _, g := range capacity.Groups {
		for _, r := range g.Rules {
			for _, n := range reads(r) {
				a, ok := recordedBy[n]
				switch {
				case ok && rs.reads[n] == nil:
					alerts.rules = append(alerts.rules, a)
					for _, m := range reads(a) {
						rs.rawNames[m] = true
					}
				case !ok && strings.HasPrefix(n, "stall_"):
					rs.rawNames[n] = true
				}
			}
		}
	}
	rs.groups = []ruleGroup{alerts,
		{capacity.Groups[0].Name, time.Hour, 17 * time.Minute, capacity.Groups[0].Rules},
		{capacity.Groups[1].Name, time.Hour, 17*time.Minute + DailyLag, capacity.Groups[1].Rules}}

	m, err := dashboards.Load("../../../dashboards/stall-capacity.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Panels {
		for _, tg := range p.Targets {
			expr, err := dashboards.Expand(tg.Expr, map[string]string{"__range": "1d", "__range_s": "86400", "__interval": "1h",
				"cluster": ".*", "job": ".+", "instance": ".+", "top": "10", "group": "job"})
			if err != nil {
				t.Fatal(err)
			}
			names, err := selectors.MetricNames(expr)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if _, ok := rs.reads[n]; ok && !slices.Contains(rs.rollups, n) {
					rs.rollups = append(rs.rollups, n)
				}
			}
		}
	}
	slices.Sort(rs.rollups)
	return rs
}

// readsNotCaptured reports whether expr reads a roll-up of notCaptured
// families only (a query that needs it may answer nothing).
func readsNotCaptured(t *testing.T, expr string, rs ruleSet) bool {
	names, err := selectors.MetricNames(expr)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(names, rs.fromNotCaptured)
}

// fromNotCaptured reports whether the roll-up name reads only notCaptured
// families, directly or through recording rules.
func (rs ruleSet) fromNotCaptured(name string) bool {
	if notCaptured[name] != "" {
		return true
	}
	reads, ok := rs.reads[name]
	if !ok || len(reads) == 0 {
		return false
	}
	for _, n := range reads {
		if !rs.fromNotCaptured(n) {
			return false
		}
	}
	return true
}

// captureExporter runs the exporter built from this repository against this
// machine's /proc and /sys, a real redis-server (with a maxmemory, and a few
// CLUSTER NODES calls, which it refuses but counts) and the RocketMQ test
// broker, and returns its /metrics once the sampler's and the broker
// sampler's histograms and the CLIENT LIST aggregates are in it.
func captureExporter(t *testing.T, redisBin string) string {
	t.Helper()
	dir := t.TempDir()
	redisAddr := e2etest.StartRedis(t, redisBin, dir, "--maxmemory", "2gb")
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	for range 3 {
		_ = c.Do(context.Background(), "CLUSTER", "NODES").Err()
	}
	broker, _, _ := e2etest.StartTestBroker(t, dir)
	exp := e2etest.StartExporter(t, e2etest.Build(t, "."), "--redis.addr=redis://"+redisAddr,
		"--redis.client-list.mode=always", "--rocketmq.broker="+broker)
	var capture string
	collectortest.WaitFor(t, 20*time.Second, "the exporter's histograms, CLIENT LIST aggregates and CLUSTER NODES count", func() error {
		capture = e2etest.Scrape(t, exp.URL)
		for _, want := range []string{"\nstall_vm_dirty_throttle_ratio_sampled_count ", "\nstall_redis_client_pending_output_clients{",
			`cmd="cluster|nodes"`, "\nstall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{"} {
			if !strings.Contains(capture, want) {
				return fmt.Errorf("no %s", strings.TrimSpace(want))
			}
		}
		return nil
	})
	// The sampler has ticked (the throttle ratio's histogram): every block
	// device it watches has its await histogram.
	var err error
	if !strings.Contains(capture, "\nstall_disk_await_seconds_bucket{") {
		err = fmt.Errorf("no stall_disk_await_seconds in the exporter's /metrics")
	}
	collectortest.Require(t, "a whole block device in /proc/diskstats (not loop, ram or a partition)", err)
	return capture
}

// record has a Prometheus serving data evaluate every rule of g at each of
// g's evaluations in [from, to] (a range query with the interval as step:
// what `promtool tsdb create-blocks-from rules` asks, which writes a block
// per rule and 2 hours, too slow here) and adds the results to data as one
// block.
func record(t *testing.T, promtool, prom, data string, g ruleGroup, from, to time.Time) {
	t.Helper()
	p, base := serve(t, prom, data)
	first := from.Truncate(g.interval).Add(g.offset)
	if first.Before(from) {
		first = first.Add(g.interval)
	}
	type result struct {
		name   string
		series []Sample
	}
	var results []result
	for _, r := range g.rules {
		got, err := query(context.Background(), base+"/api/v1/query_range", url.Values{"query": {r.Expr},
			"start": {fmt.Sprint(first.Unix())}, "end": {fmt.Sprint(to.Unix())}, "step": {fmt.Sprint(int(g.interval.Seconds()))}})
		if err != nil {
			t.Fatalf("%s: %s: %v", g.name, r.Record, err)
		}
		results = append(results, result{r.Record, got})
	}
	p.Stop()
	blocksFrom(t, promtool, data, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		for _, r := range results {
			fmt.Fprintf(bw, "# TYPE %s gauge\n", r.name)
			for _, s := range r.series {
				lbls := map[string]string{}
				for k, v := range s.Labels {
					lbls[k] = v
				}
				delete(lbls, "__name__")
				prefix := r.name + "{" + labelString(lbls) + "} "
				for k, v := range s.Values {
					fmt.Fprintf(bw, "%s%s %d\n", prefix, strconv.FormatFloat(v, 'g', -1, 64), s.Times[k].Unix())
				}
			}
		}
		bw.WriteString("# EOF\n")
		return bw.Flush()
	})
}
