package fleet

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestPlantedHosts generates a small fleet (50 hosts, 10 days), turns it
// into TSDB blocks with the real promtool, starts the real Prometheus on
// them and evaluates every query of the capacity dashboard over the data's
// range, as the fleet benchmark does at 1,000 hosts over 30 days: each
// planted host must come out on top of its section's tables, the forecasts
// must point the right way, and the generated daily peaks must be what the
// daily rules of alerts/capacity.yml compute from the hourly roll-ups.
func TestPlantedHosts(t *testing.T) {
	promtool := collectortest.RequireTool(t, "promtool")
	prom := collectortest.RequireTool(t, "prometheus")
	const hosts, days = 50, 10
	end := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	cfg := Config{Hosts: hosts, Days: days, End: end, Offset: 17 * time.Minute}
	base := startOnFleet(t, promtool, prom, cfg)
	p := Plant(cfg)
	last := end.Add(cfg.Offset)
	window := time.Duration(days) * 24 * time.Hour

	results, err := Evaluate(context.Background(), base, "../stall-capacity.json", last, window)
	if err != nil {
		t.Fatal(err)
	}
	panel := func(title, ref string) []Sample {
		t.Helper()
		for _, r := range results {
			if r.Panel == title && r.RefID == ref {
				return r.Series
			}
		}
		t.Fatalf("no query %s of panel %q", ref, title)
		return nil
	}
	// top returns the rows of a ranked table's ranking query, worst first.
	top := func(title string, worst func(a, b float64) bool) []Sample {
		t.Helper()
		rows := panel(title, "A")
		if len(rows) == 0 || len(rows) > 10 {
			t.Fatalf("%q: %d rows, want 1 to 10 (topk of the Top N variable)", title, len(rows))
		}
		sort.SliceStable(rows, func(i, j int) bool { return worst(rows[i].Value, rows[j].Value) })
		return rows
	}
	higher := func(a, b float64) bool { return a > b }
	lower := func(a, b float64) bool { return a < b }
	expectFirst := func(title string, rows []Sample, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if rows[0].Labels[k] != v {
				t.Errorf("%q: first row %v (%g), want %s=%s; rows: %v", title, rows[0].Labels, rows[0].Value, k, v, rows)
				return
			}
		}
	}
	// cell returns a further column's value for the row with these labels.
	cell := func(title, ref string, labels map[string]string) (float64, bool) {
		t.Helper()
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
	if when, ok := cell(throttle, "B", th); !ok || math.Abs(when/1000-float64(p.ThrottlePeaks[2].Unix())) > 3600 {
		t.Errorf("%q: peak at %v, want within an hour of %v", throttle, time.UnixMilli(int64(when)).UTC(), p.ThrottlePeaks[2])
	}
	if h, ok := cell(throttle, "D", th); !ok || h != 9 {
		t.Errorf("%q: %g hours throttled, want 9 (3 hours on 3 days)", throttle, h)
	}
	if d, ok := cell(throttle, "E", map[string]string{"instance": p.ThrottleTrend}); !ok || d <= 0 || d > days {
		t.Errorf("%q: rising host %s reaches the throttle point in %g days (found %v), want within %d days", throttle, p.ThrottleTrend, d, ok, days)
	}
	var crossings float64
	for _, s := range panel("Hosts that crossed a page-cache threshold, per day", "B") {
		for _, v := range s.Values {
			crossings += v
		}
	}
	if crossings != 3 {
		t.Errorf("hosts at the throttle point per day add up to %g, want 3 (one host on 3 days)", crossings)
	}

	// Disks: the device whose await doubled grows fastest.
	const growth = "Devices whose await grows fastest"
	rows = top(growth, higher)
	expectFirst(growth, rows, map[string]string{"instance": p.DiskHost, "device": p.DiskDevice})
	if rows[0].Value < 1.6 || rows[0].Value > 2.4 {
		t.Errorf("%q: growth %g, want about 2", growth, rows[0].Value)
	}
	if len(rows) > 1 && rows[1].Value > 1.5 {
		t.Errorf("%q: a healthy device grows %g times", growth, rows[1].Value)
	}

	// Memory: the reclaiming host leads all three tables.
	for _, title := range []string{"Hosts with the most allocation stalls", "Hosts with the most memory pressure"} {
		expectFirst(title, top(title, higher), map[string]string{"instance": p.ReclaimHost})
	}
	const zones = "Hosts with the least free memory above the low watermark"
	rows = top(zones, lower)
	expectFirst(zones, rows, map[string]string{"instance": p.ReclaimHost})
	if rows[0].Value >= 1 {
		t.Errorf("%q: lowest %g, want below the low watermark (1)", zones, rows[0].Value)
	}

	// Redis: the instance filling up comes first and its forecast is finite.
	const redis = "Redis instances closest to maxmemory"
	rows = top(redis, higher)
	rd := map[string]string{"instance": p.RedisHost, "addr": p.RedisAddr}
	expectFirst(redis, rows, rd)
	d, ok := cell(redis, "D", rd)
	if !ok || d <= 0 || d > days {
		t.Errorf("%q: %s reaches maxmemory in %g days (found %v), want within %d", redis, p.RedisHost, d, ok, days)
	}
	for _, s := range panel(redis, "D") {
		if s.Labels["instance"] != p.RedisHost && s.Value < d {
			t.Errorf("%q: healthy %s reaches maxmemory sooner (%g days) than the planted one (%g)", redis, s.Labels["instance"], s.Value, d)
		}
	}

	// RocketMQ: the broker with long lock holds, trending towards 1 s.
	const broker = "Brokers with the longest CommitLog lock holds"
	br := map[string]string{"broker": p.Broker}
	expectFirst(broker, top(broker, higher), br)
	if d, ok := cell(broker, "F", br); !ok || d < 0 || d > days {
		t.Errorf("%q: %s reaches 1 s in %g days (found %v), want within %d", broker, p.Broker, d, ok, days)
	}
	if h, ok := cell(broker, "E", br); !ok || h < float64(days) {
		t.Errorf("%q: %g hours with long holds, want at least one a day", broker, h)
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
		t.Errorf("hosts whose tunables differ: %v, want %v", odd, want)
	}

	checkDailyRules(t, base, last)
}

// checkDailyRules evaluates each daily rule's expression of
// alerts/capacity.yml at the last hour and compares it with the daily series
// the generator wrote: the generator records what the rules would.
func checkDailyRules(t *testing.T, base string, at time.Time) {
	b, err := os.ReadFile("../../alerts/capacity.yml")
	if err != nil {
		t.Fatal(err)
	}
	_, daily, _ := strings.Cut(string(b), "name: stall-capacity-daily")
	n := 0
	for _, line := range strings.Split(daily, "\n") {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "- record: "); ok {
			n++
			expr := dailyExpr(t, daily, name)
			diff := fmt.Sprintf("count(abs(%s - (%s)) > 1e-9) or vector(0)", name, expr)
			got, err := query(context.Background(), base+"/api/v1/query", map[string][]string{
				"query": {diff}, "time": {fmt.Sprint(at.Unix())}})
			if err != nil || len(got) != 1 || got[0].Value != 0 {
				t.Errorf("daily rule %s: the generated series differs from its expression %s in %v series (%v)", name, expr, got, err)
			}
		}
	}
	if n == 0 {
		t.Error("no daily rules found in alerts/capacity.yml")
	}
}

func dailyExpr(t *testing.T, group, name string) string {
	_, rest, _ := strings.Cut(group, "- record: "+name+"\n")
	for _, line := range strings.Split(rest, "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr: "); ok {
			return e
		}
	}
	t.Fatalf("no expr for %s", name)
	return ""
}

// startOnFleet writes the fleet, builds blocks with promtool and serves
// them with a Prometheus that scrapes nothing; it returns its URL.
func startOnFleet(t *testing.T, promtool, prom string, cfg Config) string {
	t.Helper()
	dir := t.TempDir()
	om := filepath.Join(dir, "fleet.om")
	f, err := os.Create(om)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(f, cfg); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", "--max-block-duration=768h", om, data).CombinedOutput(); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	os.Remove(om)
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte("global: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(prom, "--config.file="+conf, "--storage.tsdb.path="+data, "--storage.tsdb.retention.time=100y",
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for Prometheus to be ready on the fleet's blocks: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
