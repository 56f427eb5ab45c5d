package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/stall-exporter/stall_exporter/collector/dns/dnstest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
	"github.com/stall-exporter/stall_exporter/internal/metricsdoc"
	"github.com/stall-exporter/stall_exporter/tools/dashboards"
	"github.com/stall-exporter/stall_exporter/tools/internal/selectors"
)

// e2eInterval is Prometheus' scrape and rule evaluation interval in the
// end-to-end run, and the Grafana variables are what Grafana would send for
// it: $__rate_interval = 4 × the scrape interval, $__interval one step.
const e2eInterval = 2 * time.Second

// mayBeAbsent are the metrics of collectors this run exercises that may
// still have no series in it, and why. A dashboard query reading one of
// them may return nothing; any other query must return data.
var mayBeAbsent = map[string]string{
	"stall_rocketmq_put_latency_seconds_bucket":                   "a broker (and the test broker) reports its first putMessageDistributeTime window 60 s after start",
	"stall_rocketmq_commit_pending_bytes":                         "transient store pool only; disabled on the test broker, as by default",
	"stall_rocketmq_transient_store_buffers_available":            "transient store pool only; disabled on the test broker, as by default",
	"stall_redis_client_output_buffer_limit_disconnections_total": "Redis 7.4+; Debian 12 ships 7.0",
	"stall_kernel_hung_task_detected_total":                       "kernel 6.11+",
	"stall_redis_down_reason":                                     "only while a Redis target is down; this run's Redis answers",
	"stall_rocketmq_down_reason":                                  "only while a broker is down; this run's test broker answers",
	"stall_network_allowance_exceeded_packets_total":              "ENA (AWS) NICs only; the test machine's have no allowance counters",
	// Read by CgroupDirtyPagesNearThrottle and the page-cache dashboard's per-cgroup row.
	"stall_cgroup_dirty_threshold_bytes":              "cgroup v2 only (per-cgroup dirty throttling); this machine binds memory to cgroup v1",
	"stall_cgroup_dirty_background_threshold_bytes":   "cgroup v2 only, as stall_cgroup_dirty_threshold_bytes",
	"stall_cgroup_dirty_throttle_ratio":               "cgroup v2 only, as stall_cgroup_dirty_threshold_bytes",
	"stall_cgroup_dirty_throttle_ratio_sampled_sum":   "cgroup v2 only, and for watched cgroups only",
	"stall_cgroup_dirty_throttle_ratio_sampled_count": "cgroup v2 only, and for watched cgroups only",
	"stall_cgroup_dirty_throttled_seconds_total":      "cgroup v2 only, and for watched cgroups only",
}

// TestPrometheusEndToEnd runs the real exporter against a real redis-server
// and the RocketMQ test broker (and this machine's /proc), with the dns
// collector capturing real lookups against a test resolver on loopback
// (dnsTraffic), scraped by a real
// Prometheus with deploy/prometheus/prometheus.yml (addresses substituted)
// and the rules of alerts/*.yml. It then evaluates, through Prometheus'
// HTTP API, every dashboard variable and query (Grafana's variables
// substituted as "All" and as a multi-value selection) and every rule
// expression. None may fail; every metric they read must be documented in
// docs/metrics.md (or be recorded by a rule) and served in this run when
// its collector runs; every dashboard query must return data unless it
// reads a metric of mayBeAbsent (or a rule's output computed from one), or
// is a capacity query that needs hours of data or an event
// (rollupExemption, whose answers TestRollupsFromRawSeries requires).
func TestPrometheusEndToEnd(t *testing.T) {
	promBin := collectortest.RequireTool(t, "prometheus")
	redisBin := collectortest.RequireTool(t, "redis-server")
	collectortest.RequireRoot(t, "the end-to-end test runs the dns collector: CAP_NET_RAW, CAP_BPF, port 53")
	tmp := t.TempDir()

	redisAddr := startRedisServer(t, redisBin, tmp)
	// A CommitLog lock stall of 1.2 s every 2 s.
	brokerAddr, namesrvAddr, logDir := e2etest.StartTestBroker(t, tmp, "-stall-every", "2s", "-stall-for", "1200ms")
	exporterURL := e2etest.StartExporter(t, e2etest.Build(t, "."),
		"--redis.addr=redis://"+redisAddr,
		"--redis.client-list.mode=always",
		"--redis.bigkeys.enable",
		"--redis.bigkeys.keys-per-second=1000",
		"--rocketmq.namesrv="+namesrvAddr,
		"--rocketmq.log-dir="+logDir,
		"--rocketmq.probe.allowed-targets=127.0.0.1",
		"--collector.dns").URL
	exporter := strings.TrimPrefix(exporterURL, "http://")
	dnsTraffic(t, exporterURL)

	files, rules := alertRules(t)
	rulesDir := filepath.Join(tmp, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files { // the README's install step
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The capacity roll-ups run once an hour; here at the scrape interval, so they are evaluated.
		b = bytes.ReplaceAll(b, []byte("interval: 1h"), []byte("interval: "+e2eInterval.String()))
		if err := os.WriteFile(filepath.Join(rulesDir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const node = "e2e-node"
	cfg, jobs := deployPromConfig(t, promSetup{
		exporter: exporter,
		targets:  map[string][]string{"redis": {redisAddr}, "rocketmq": {brokerAddr}},
		rulesDir: rulesDir,
		interval: e2eInterval.String(),
		node:     node,
		noAlerts: true,
	})
	prom := promServer{e2etest.StartPrometheus(t, promBin, tmp, cfg)}
	start := time.Now()

	// Enough scrapes for a rate over $__rate_interval, and every rule evaluated.
	collectortest.WaitFor(t, 40*time.Second, "6 scrapes of every target", func() error {
		v, err := prom.vector(`count_over_time(up[1m]) < 6`)
		if err != nil {
			return err
		}
		if len(v) > 0 {
			return fmt.Errorf("%d targets with fewer scrapes", len(v))
		}
		n, err := prom.vector(`up`)
		if err != nil || len(n) < len(jobs) {
			return fmt.Errorf("%d targets up (want at least one per job %v): %w", len(n), jobs, err)
		}
		return nil
	})
	collectortest.WaitFor(t, 20*time.Second, "every rule evaluated", prom.rulesEvaluated(len(rulesWithExpr(rules))))

	// Every job of the deploy configuration scrapes, and the Kubernetes job
	// names its instance after the node.
	for _, job := range jobs {
		v, err := prom.vector(fmt.Sprintf(`up{job=%q}`, job))
		if err != nil || len(v) == 0 {
			t.Fatalf("job %s: no target (%v)", job, err)
		}
		for _, s := range v {
			if s.Value != "1" {
				t.Errorf("job %s target %v is down", job, s.Metric)
			}
		}
	}
	if v, err := prom.vector(fmt.Sprintf(`up{job="stall-kubernetes",instance=%q,node=%q}`, node, node)); err != nil || len(v) != 1 {
		t.Errorf("stall-kubernetes: want instance and node set to the pod's node %s: %v %v", node, v, err)
	}

	doc, err := metricsdoc.Read("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	others, err := metricsdoc.Others("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	recordedBy := map[string]string{} // a recording rule's expression, by its output
	for _, r := range rules {
		if r.Record != "" {
			recordedBy[r.Record] = r.Expr
		}
	}
	served := prom.metricNames(t)
	exercised := prom.exercisedCollectors(t)
	collectorsOf := docCollectors(t, "docs/metrics.md")
	// mayBeEmpty reports whether metric n may have no series in this run:
	// one of mayBeAbsent, one whose collector does not run here (e.g. an
	// opt-in one), or a rule's output that reads one of those. Every other
	// rule's output, the capacity roll-ups too, has series after a few
	// minutes: their rules run at e2eInterval here, and
	// tools/dashboards/fleet's TestRollupsFromRawSeries shows them computed
	// from the exporter's series over two days at their own interval.
	var mayBeEmpty func(n string) bool
	mayBeEmpty = func(n string) bool {
		if expr, ok := recordedBy[n]; ok {
			names, err := selectors.MetricNames(expr)
			return err == nil && slices.ContainsFunc(names, mayBeEmpty)
		}
		fam, own := metricsdoc.Lookup(doc, n)
		return own && !served[n] && (mayBeAbsent[n] != "" ||
			!slices.ContainsFunc(collectorsOf[fam.Name], func(c string) bool { return exercised[c] }))
	}
	// check fails a query whose metrics are not documented, or documented
	// but not served although their collector ran in this run.
	check := func(what, expr string) (absentOK bool) {
		t.Helper()
		names, err := selectors.MetricNames(expr)
		if err != nil {
			t.Errorf("%s: %q: %v", what, expr, err)
			return false
		}
		for _, n := range names {
			fam, own := metricsdoc.Lookup(doc, n)
			switch {
			case recordedBy[n] != "":
				absentOK = absentOK || mayBeEmpty(n)
			case !own && others[n].Name == "":
				t.Errorf("%s: %s is not documented in docs/metrics.md (renamed or removed?): %s", what, n, expr)
			case !own:
				// Prometheus' own or another exporter's: documented, not ours to serve.
			case served[n]:
			case mayBeAbsent[n] != "":
				absentOK = true
			case !slices.ContainsFunc(collectorsOf[fam.Name], func(c string) bool { return exercised[c] }):
				absentOK = true // its collector does not run here (e.g. an opt-in one)
			default:
				t.Errorf("%s: %s is documented but not served although collector(s) %v ran", what, n, collectorsOf[fam.Name])
			}
		}
		return absentOK
	}

	window := time.Since(start).Truncate(time.Second)
	builtins := map[string]string{
		"__rate_interval": (4 * e2eInterval).String(),
		"__interval":      e2eInterval.String(),
		"__range":         window.String(),
		"__range_s":       fmt.Sprint(int(window.Seconds())),
	}
	boards, err := filepath.Glob("dashboards/*.json")
	if err != nil || len(boards) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	queries := 0
	var empty []emptyAnswer
	rollups := capacityRollups(t)
	for _, file := range boards {
		m, err := dashboards.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		all, selected := prom.resolveVariables(t, file, m, builtins, check)
		for _, p := range m.Panels {
			for _, tg := range p.Targets {
				what := fmt.Sprintf("%s %q", file, p.Title)
				asAll, err := dashboards.Expand(tg.Expr, all)
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				absentOK := check(what, asAll)
				why := rollupExemption(asAll, rollups)
				asSelected, err := dashboards.Expand(tg.Expr, selected)
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				prom.answer(t, what, asAll, !absentOK, why, &empty)
				prom.answer(t, what, asSelected, !absentOK, why, &empty)
				queries += 2
			}
		}
	}
	for _, r := range rulesWithExpr(rules) {
		what := "rule " + r.Alert + r.Record
		check(what, r.Expr)
		prom.answer(t, what, r.Expr, false, "", nil)
	}
	prom.recheck(t, empty)
	t.Logf("%d dashboard queries and %d rule expressions evaluated on %d s of data", queries, len(rulesWithExpr(rules)), int(window.Seconds()))
}

func rulesWithExpr(rules []alertRule) []alertRule {
	var out []alertRule
	for _, r := range rules {
		if r.Expr != "" {
			out = append(out, r)
		}
	}
	return out
}

// startRedisServer runs redis-server with a maxmemory (the overview
// compares client memory with it), some keys (one of 1 MiB for the big-key
// scan) and a few CLUSTER NODES calls, which a non-cluster server refuses
// but still counts.
func startRedisServer(t *testing.T, bin, dir string) string {
	t.Helper()
	addr := e2etest.StartRedis(t, bin, dir, "--maxmemory", "64mb")
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "big", strings.Repeat("x", 1<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.Set(ctx, fmt.Sprintf("small:%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		_ = c.Do(ctx, "CLUSTER", "NODES").Err()
	}
	return addr
}

// dnsTraffic waits until the exporter's dns collector captures with eBPF
// attribution, then makes real lookups against a dnstest resolver on a
// loopback address of its own (port 53), with Go's resolver and a raw
// socket, so that every DNS series the dashboards read exists: PTR
// answered (NOERROR), unknown (NXDOMAIN) and never answered (a timeout
// after --dns.timeout, 5 s), A and AAAA, a TXT truncated over UDP and
// asked again over TCP, and a query sent twice (a retransmission). The
// lookups come from this test process, so the per-process series name it.
func dnsTraffic(t *testing.T, exporterURL string) {
	t.Helper()
	collectortest.WaitFor(t, 15*time.Second, "the dns collector capturing, with ebpf attribution", func() error {
		m := e2etest.Scrape(t, exporterURL)
		for _, want := range []string{"stall_dns_capture_up 1", `stall_dns_attribution_mode{mode="ebpf"} 1`} {
			if !strings.Contains(m, "\n"+want+"\n") {
				return fmt.Errorf("no %q in the exporter's metrics", want)
			}
		}
		return nil
	})
	pid := os.Getpid()
	addr := net.JoinHostPort(fmt.Sprintf("127.53.%d.%d", pid>>8&255, pid%250+1), "53")
	srv, err := dnstest.Listen(addr)
	if err != nil {
		t.Fatalf("test resolver on %s: %v", addr, err)
	}
	t.Cleanup(srv.Close)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		if names, err := r.LookupAddr(ctx, fmt.Sprintf("192.0.2.%d", i)); err != nil || len(names) == 0 {
			t.Fatalf("PTR of 192.0.2.%d from the test resolver: %v %v", i, names, err)
		}
	}
	if _, err := r.LookupAddr(ctx, "203.0.113.1"); err == nil {
		t.Fatal("PTR of 203.0.113.1 resolved; the test resolver answers NXDOMAIN")
	}
	if _, err := r.LookupIPAddr(ctx, "ok.test."); err != nil {
		t.Fatalf("ok.test: %v", err)
	}
	if txt, err := r.LookupTXT(ctx, "big.test."); err != nil || len(txt) == 0 {
		t.Fatalf("big.test TXT (truncated over UDP, then TCP): %v %v", txt, err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := r.LookupAddr(short, "198.51.100.1"); err == nil {
		t.Fatal("PTR of 198.51.100.1 resolved; the test resolver never answers it")
	}
	// A retransmission: the same query (addresses, ports, ID) twice.
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4242, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("2.100.51.198.in-addr.arpa."), Type: dnsmessage.TypePTR, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// promServer is the Prometheus of the test, with the queries it asks.
type promServer struct{ *e2etest.Prometheus }

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  string
}

// query runs an instant query now and returns the result type and the
// number of series (1 for a scalar).
func (p *promServer) query(expr string) (string, []promSample, error) {
	d, err := p.Query(expr)
	if err != nil {
		return "", nil, err
	}
	var out []promSample
	switch d.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return "", nil, err
		}
		for _, s := range v {
			out = append(out, promSample{Metric: s.Metric, Value: fmt.Sprint(s.Value[1])})
		}
	case "scalar", "string":
		out = append(out, promSample{})
	case "matrix":
		var m []struct {
			Metric map[string]string `json:"metric"`
		}
		if err := json.Unmarshal(d.Result, &m); err != nil {
			return "", nil, err
		}
		for _, s := range m {
			out = append(out, promSample{Metric: s.Metric})
		}
	}
	return d.ResultType, out, nil
}

func (p *promServer) vector(expr string) ([]promSample, error) {
	_, v, err := p.query(expr)
	return v, err
}

// emptyAnswer is a query that returned nothing, and why it may (or "").
type emptyAnswer struct{ what, expr, why string }

// answer evaluates expr: an error fails the test; with needData an empty
// result is noted for recheck, with why it may be empty (rollupExemption).
func (p *promServer) answer(t *testing.T, what, expr string, needData bool, why string, empty *[]emptyAnswer) {
	t.Helper()
	_, v, err := p.query(expr)
	switch {
	case err != nil:
		t.Errorf("%s: %q: %v", what, expr, err)
	case len(v) == 0 && needData:
		*empty = append(*empty, emptyAnswer{what, expr, why})
	}
}

// recheck evaluates the queries that returned nothing once more, two scrape
// intervals later (a series a slow scrape missed is briefly stale), and
// fails those still empty but the capacity queries rollupExemption lets
// answer nothing here, which it counts by reason.
func (p *promServer) recheck(t *testing.T, empty []emptyAnswer) {
	t.Helper()
	if len(empty) == 0 {
		return
	}
	time.Sleep(2 * e2eInterval)
	exempt := map[string]int{}
	for _, q := range empty {
		if _, v, err := p.query(q.expr); err != nil || len(v) == 0 {
			if q.why == "" || err != nil {
				t.Errorf("%s: %q returned no data (%v)", q.what, q.expr, err)
				continue
			}
			exempt[q.why]++
		}
	}
	for why, n := range exempt {
		t.Logf("%d capacity queries answered nothing: %s (TestRollupsFromRawSeries requires their answers)", n, why)
	}
}

// rulesEvaluated waits until Prometheus has loaded want rules and
// evaluated each of them without error.
func (p *promServer) rulesEvaluated(want int) func() error {
	return func() error {
		var d struct {
			Groups []struct {
				File  string `json:"file"`
				Rules []struct {
					Name           string    `json:"name"`
					Health         string    `json:"health"`
					LastError      string    `json:"lastError"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.API("/api/v1/rules", nil, &d); err != nil {
			return err
		}
		n := 0
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				n++
				if r.LastError != "" || r.Health == "err" {
					return fmt.Errorf("rule %s (%s): %s", r.Name, g.File, r.LastError)
				}
				if r.LastEvaluation.IsZero() || r.Health != "ok" {
					return fmt.Errorf("rule %s (%s) not evaluated yet", r.Name, g.File)
				}
			}
		}
		if n != want {
			return fmt.Errorf("Prometheus loaded %d rules, alerts/*.yml define %d", n, want)
		}
		return nil
	}
}

// metricNames returns the metric names Prometheus holds.
func (p *promServer) metricNames(t *testing.T) map[string]bool {
	t.Helper()
	var names []string
	if err := p.API("/api/v1/label/__name__/values", nil, &names); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// exercisedCollectors returns the collectors that succeeded in this run.
func (p *promServer) exercisedCollectors(t *testing.T) map[string]bool {
	t.Helper()
	v, err := p.vector(`max by (collector) (max_over_time(stall_scrape_collector_success[5m])) == 1`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{"*": true} // the exporter's own metrics
	for _, s := range v {
		out[s.Metric["collector"]] = true
	}
	for _, c := range []string{"vmstat", "diskstats", "sampler", "kmsg", "redis", "rocketmq", "dns"} {
		if !out[c] {
			t.Errorf("collector %s never succeeded in the run", c)
		}
	}
	return out
}

// resolveVariables evaluates a dashboard's query variables in order, as
// Grafana does (each later one sees the earlier ones' values), and returns
// the values to substitute in its queries: every variable at "All" (.+),
// and every variable at all its values as a multi-value selection.
func (p *promServer) resolveVariables(t *testing.T, file string, m *dashboards.Model, builtins map[string]string, check func(what, expr string) bool) (all, selected map[string]string) {
	t.Helper()
	all, selected = map[string]string{}, map[string]string{}
	for k, v := range builtins {
		all[k], selected[k] = v, v
	}
	for _, v := range m.Templating.List {
		if v.Type == "custom" { // top N, group by: their default
			all[v.Name], selected[v.Name] = v.CurrentValue(), v.CurrentValue()
		}
		if v.Type != "query" {
			continue
		}
		what := fmt.Sprintf("%s variable %s", file, v.Name)
		selector, label, ok := v.LabelValues()
		if !ok {
			t.Errorf("%s: query %q is not label_values(selector, label)", what, v.QueryString())
			continue
		}
		expr, err := dashboards.Expand(selector, selected)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		check(what, expr)
		var values []string
		if err := p.API("/api/v1/label/"+label+"/values", url.Values{"match[]": {expr}}, &values); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		all[v.Name] = v.AllValue
		if v.Name == "cluster" {
			// The fleet's cluster, hidden: this Prometheus holds one cluster and adds no
			// cluster label, so the variable has no value and its All (.*) must match.
			if len(values) != 0 {
				t.Errorf("%s: label_values(%s, %s) = %v; this test's series carry no cluster label", what, expr, label, values)
			}
			selected[v.Name] = v.AllValue
			continue
		}
		if len(values) == 0 {
			t.Errorf("%s: label_values(%s, %s) has no value", what, expr, label)
		}
		sort.Strings(values)
		selected[v.Name] = dashboards.RegexValue(values)
	}
	return all, selected
}

// docCollectors maps each metric of docs/metrics.md to the collectors its
// section names in its heading ("## Redis (`redis`)"); the exporter's own
// metrics (a heading without collectors) map to none and always count as
// exercised by the caller's default.
func docCollectors(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	heading := regexp.MustCompile("^## ")
	name := regexp.MustCompile("`([a-z0-9_]+)`")
	row := regexp.MustCompile("^\\| `(stall_[a-z0-9_]+)` \\|")
	out := map[string][]string{}
	var current []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if heading.MatchString(l) {
			current = nil
			for _, m := range name.FindAllStringSubmatch(l, -1) {
				current = append(current, m[1])
			}
			if len(current) == 0 {
				current = []string{"*"} // exporter-wide: always runs
			}
		}
		if m := row.FindStringSubmatch(l); m != nil {
			out[m[1]] = current
		}
	}
	return out
}
