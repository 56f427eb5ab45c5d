package fleet

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
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
	cfg := Config{Hosts: hosts, Days: days, End: testEnd(t), Offset: 17 * time.Minute}
	base := startOnFleet(t, promtool, prom, cfg)
	last := cfg.Last()
	window := time.Duration(days) * 24 * time.Hour

	results, err := Evaluate(context.Background(), base, "../../../dashboards/stall-capacity.json", last, window)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range CheckPlanted(results, cfg) {
		t.Error(problem)
	}
	checkDailyRules(t, base, last)
}

// testEnd is the last hour of a test's data: a fixed one, so that no run
// depends on the hour, day or year it starts in (Prometheus keeps the blocks
// with a retention of 100y and is asked at explicit times). The variable
// STALL_TEST_END (RFC 3339) moves it, for scripts/any-hour.sh, which runs
// the tests with their end in every hour of a day and across a month's and
// a year's end.
func testEnd(t *testing.T) time.Time {
	// 15:00 UTC: the end the fleet test had when run at 17:00, the hour the
	// daily rules disagreed with the generator (see DailyLag).
	end := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)
	if s := os.Getenv("STALL_TEST_END"); s != "" {
		var err error
		if end, err = time.Parse(time.RFC3339, s); err != nil {
			t.Fatalf("STALL_TEST_END: %v", err)
		}
		t.Logf("data ends at %s (STALL_TEST_END)", end.UTC())
	}
	return end.UTC().Truncate(time.Hour)
}

// checkDailyRules evaluates each daily rule's expression of
// alerts/capacity.yml at the daily group's last evaluation and compares it
// with the daily series the generator wrote: the generator records what the
// rules would.
func checkDailyRules(t *testing.T, base string, at time.Time) {
	b, err := os.ReadFile("../../../alerts/capacity.yml")
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
	data := filepath.Join(t.TempDir(), "data")
	blocksFrom(t, promtool, data, func(w io.Writer) error { return Write(w, cfg) })
	_, base := serve(t, prom, data)
	return base
}

// blocksFrom writes OpenMetrics with write and turns it into TSDB blocks in
// data with promtool.
func blocksFrom(t *testing.T, promtool, data string, write func(io.Writer) error) {
	t.Helper()
	om := filepath.Join(t.TempDir(), "series.om")
	f, err := os.Create(om)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", "--max-block-duration=768h", om, data).CombinedOutput(); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	os.Remove(om)
}

// serve runs a Prometheus that scrapes nothing on the blocks in data, with
// a retention that keeps them however old they are, and returns it and its
// URL once it is ready.
func serve(t *testing.T, prom, data string) (*e2etest.Process, string) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(conf, []byte("global: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := e2etest.FreeAddr(t)
	p := e2etest.Run(t, "prometheus", exec.Command(prom, "--config.file="+conf, "--storage.tsdb.path="+data,
		"--storage.tsdb.retention.time=100y", "--web.listen-address="+addr, "--log.level=warn"))
	base := "http://" + addr
	e2etest.Ready(t, 60*time.Second, p, base+"/-/ready")
	return p, base
}
