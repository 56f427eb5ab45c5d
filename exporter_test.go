package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

var testGauge = prometheus.NewDesc("stall_test_value", "test", []string{"from"}, nil)

// fakeCollector sends one sample, then behaves as told.
type fakeCollector struct {
	name    string
	block   chan struct{} // Update ignores ctx and waits for this to close
	err     error
	panics  bool
	started atomic.Int32
}

func (f *fakeCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	f.started.Add(1)
	ch <- prometheus.MustNewConstMetric(testGauge, prometheus.GaugeValue, 1, f.name)
	if f.panics {
		var m map[string]int
		m["boom"]++ // a nil-map write: the kind of bug a collector could have
	}
	if f.block != nil {
		<-f.block
		ch <- prometheus.MustNewConstMetric(testGauge, prometheus.GaugeValue, 2, f.name+"-late")
	}
	return f.err
}

func newTestExporter(cs ...*fakeCollector) *Exporter {
	built := map[string]collector.Built{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range cs {
		built[c.name] = collector.Built{Collector: c, Problems: collector.NewProblems(c.name, logger)}
	}
	return NewExporter(built, 200*time.Millisecond, logger)
}

// testMetricsHandler is the /metrics handler with a budget of maxRequests.
func testMetricsHandler(e *Exporter, timeout time.Duration, maxRequests int, logger *slog.Logger) http.Handler {
	return newMetricsHandler(e, timeout, newLimiter("metrics", "--web.max-requests", maxRequests, logger), logger)
}

func collect(t *testing.T, e *Exporter) (map[string]float64, time.Duration) {
	t.Helper()
	srv := httptest.NewServer(testMetricsHandler(e, e.timeout, 0, e.logger))
	defer srv.Close()
	start := time.Now()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	elapsed := time.Since(start)
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "stall_") {
			var v float64
			i := strings.LastIndexByte(l, ' ')
			fmt.Sscan(l[i+1:], &v)
			out[l[:i]] = v
		}
	}
	return out, elapsed
}

// TestSlowCollectorDoesNotBlockOthers: a collector that ignores its context
// is cut off at its timeout, reported as failed, its late samples dropped,
// and the others are served in full.
func TestSlowCollectorDoesNotBlockOthers(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	slow := &fakeCollector{name: "slow", block: block}
	fast := &fakeCollector{name: "fast"}
	broken := &fakeCollector{name: "broken", err: errors.New("boom")}
	absent := &fakeCollector{name: "absent", err: fmt.Errorf("%w: no file", collector.ErrNoData)}
	buggy := &fakeCollector{name: "buggy", panics: true}
	e := newTestExporter(slow, fast, broken, absent, buggy)

	got, elapsed := collect(t, e)
	if elapsed > 2*time.Second {
		t.Errorf("scrape took %v with a 200ms collector timeout", elapsed)
	}
	want := map[string]float64{
		`stall_scrape_collector_success{collector="slow"}`:   0,
		`stall_scrape_collector_success{collector="fast"}`:   1,
		`stall_scrape_collector_success{collector="broken"}`: 0,
		`stall_scrape_collector_success{collector="absent"}`: 1,
		`stall_scrape_collector_success{collector="buggy"}`:  0,
		`stall_test_value{from="fast"}`:                      1,
		`stall_test_value{from="slow"}`:                      1, // sent before it blocked
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if _, ok := got[`stall_test_value{from="slow-late"}`]; ok {
		t.Error("a sample sent after the timeout reached the scrape")
	}

	// While the abandoned run is stuck, the next scrape fails fast instead of
	// starting a second goroutine.
	got, _ = collect(t, e)
	if n := slow.started.Load(); n != 1 {
		t.Errorf("stuck collector was started %d times, want 1", n)
	}
	if got[`stall_scrape_collector_success{collector="slow"}`] != 0 || got[`stall_scrape_collector_success{collector="fast"}`] != 1 {
		t.Errorf("second scrape: %v", got)
	}
}

func TestScrapeTimeoutHeader(t *testing.T) {
	for _, tc := range []struct {
		header string
		flag   time.Duration
		want   time.Duration
	}{
		{"", 8 * time.Second, 8 * time.Second},
		{"10", 8 * time.Second, 8 * time.Second},
		{"5", 8 * time.Second, 4500 * time.Millisecond},
		{"0.2", 8 * time.Second, 100 * time.Millisecond},
		{"garbage", 8 * time.Second, 8 * time.Second},
		{"-3", 8 * time.Second, 8 * time.Second},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if tc.header != "" {
			r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", tc.header)
		}
		if got := scrapeTimeout(r, tc.flag); got != tc.want {
			t.Errorf("header %q flag %v: got %v, want %v", tc.header, tc.flag, got, tc.want)
		}
	}
}

func TestMaxRequests(t *testing.T) {
	block := make(chan struct{})
	slow := &fakeCollector{name: "slow", block: block}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := NewExporter(map[string]collector.Built{"slow": {Collector: slow, Problems: collector.NewProblems("slow", logger)}}, 5*time.Second, logger)
	srv := httptest.NewServer(testMetricsHandler(e, 5*time.Second, 1, logger))
	defer srv.Close()
	first := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	for slow.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second concurrent scrape: %d, want 503", resp.StatusCode)
	}
	close(block)
	if code := <-first; code != http.StatusOK {
		t.Errorf("first scrape: %d", code)
	}
}

var stubOnce sync.Once

// TestProbeRequests checks /probe's input handling with a stub module that
// allows exactly one target.
func TestProbeRequests(t *testing.T) {
	stubOnce.Do(func() { // modules register once per process; -count=2 runs this twice
		collector.RegisterProbe("stub", func(cfg collector.Config, target string) (collector.Collector, error) {
			if target != "good:1" {
				return nil, fmt.Errorf("%w: %q is not in --stub.allowed", collector.ErrTargetNotAllowed, target)
			}
			return &fakeCollector{name: "probed"}, nil
		})
	})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := newProbeHandler(collector.Paths{}, time.Second, newLimiter("probe", "--web.max-probe-requests", 0, logger), logger)
	for _, tc := range []struct {
		query string
		code  int
		body  string
	}{
		{"module=stub&target=good:1", 200, `stall_test_value{from="probed"} 1`},
		{"module=stub&target=evil:1", 403, "target not allowed by configuration"},
		{"module=stub", 400, "exactly one"},
		{"module=stub&target=", 400, "exactly one"},
		{"module=stub&target=good:1&target=evil:1", 400, "exactly one"},
		{"module=stub&target=" + strings.Repeat("a", 2000), 400, "longer than"},
		{"module=nope&target=good:1", 400, "unknown or missing module"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/probe?"+tc.query, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%.60s: %d %q, want %d containing %q", tc.query, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
		if strings.Contains(rec.Body.String(), "evil") {
			t.Errorf("%.60s: the refused target is echoed back", tc.query)
		}
	}
}
