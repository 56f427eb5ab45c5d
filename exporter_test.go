package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// ctxCollector waits until its context ends and reports how it ended
// and the deadline it had.
type ctxCollector struct {
	started chan time.Time // the deadline, when Update starts
	ended   chan error     // ctx.Err(), when Update returns
}

func newCtxCollector() *ctxCollector {
	return &ctxCollector{started: make(chan time.Time, 1), ended: make(chan error, 1)}
}

func (c *ctxCollector) Update(ctx context.Context, _ chan<- prometheus.Metric) error {
	deadline, _ := ctx.Deadline()
	c.started <- deadline
	<-ctx.Done()
	c.ended <- ctx.Err()
	return ctx.Err()
}

func newTestExporter(logger *slog.Logger, cs ...collector.Collector) *Exporter {
	built := map[string]collector.Built{}
	for i, c := range cs {
		name := fmt.Sprint("c", i)
		if f, ok := c.(*fakeCollector); ok {
			name = f.name
		}
		built[name] = collector.Built{Collector: c, Problems: collector.NewProblems(name, logger)}
	}
	return NewExporter(built, logger)
}

// testMetricsHandler is the /metrics handler with a budget of maxRequests.
func testMetricsHandler(e *Exporter, timeout time.Duration, maxRequests int, logger *slog.Logger) http.Handler {
	return newMetricsHandler(e, timeout, newLimiter("metrics", "--web.max-requests", maxRequests, logger), logger)
}

// serve answers one request with h.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestSlowCollectorDoesNotBlockOthers: a collector that ignores its
// context is cut off at the scrape's deadline, reported as failed, its
// late samples dropped; a failing, a panicking and a no-data collector are
// each reported as such, and the others are served in full. While the
// abandoned run is stuck, the next scrape fails that collector fast
// instead of starting a second goroutine.
func TestSlowCollectorDoesNotBlockOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		defer close(block)
		slow := &fakeCollector{name: "slow", block: block}
		logger := slog.New(slog.DiscardHandler)
		e := newTestExporter(logger, slow, &fakeCollector{name: "fast"}, &fakeCollector{name: "broken", err: errors.New("boom")},
			&fakeCollector{name: "absent", err: fmt.Errorf("%w: no file", collector.ErrNoData)}, &fakeCollector{name: "buggy", panics: true})
		const timeout = 200 * time.Millisecond
		h := testMetricsHandler(e, timeout, 0, logger)

		start := time.Now()
		got := samples(t, serve(h, httptest.NewRequest("GET", "/metrics", nil)).Body.String())
		if took := time.Since(start); took != timeout {
			t.Errorf("the scrape took %v, want the collectors' timeout %v", took, timeout)
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

		got = samples(t, serve(h, httptest.NewRequest("GET", "/metrics", nil)).Body.String())
		if n := slow.started.Load(); n != 1 {
			t.Errorf("stuck collector was started %d times, want 1", n)
		}
		if got[`stall_scrape_collector_success{collector="slow"}`] != 0 || got[`stall_scrape_collector_success{collector="fast"}`] != 1 {
			t.Errorf("second scrape: %v", got)
		}
	})
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

// TestRequestContextReachesCollectors: the collectors of /metrics and of
// a /probe target run under the request's context, with the deadline of
// Prometheus' scrape timeout header; a client that hangs up cancels their
// work and the request ends.
func TestRequestContextReachesCollectors(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for _, path := range []string{"/metrics", "/probe?module=stub&target=good:1"} {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCtxCollector()
				var h http.Handler = testMetricsHandler(newTestExporter(logger, c), 8*time.Second, 0, logger)
				if strings.HasPrefix(path, "/probe") {
					h = newProbeHandler(map[string]collector.ProbeModule{"stub": stubModule{c: c}}, collector.Paths{},
						8*time.Second, newLimiter("probe", "--web.max-probe-requests", 0, logger), logger)
				}
				ctx, hangUp := context.WithCancel(context.Background())
				r := httptest.NewRequest("GET", path, nil).WithContext(ctx)
				r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "5")
				done := make(chan struct{})
				start := time.Now()
				go func() { serve(h, r); close(done) }()
				if deadline := <-c.started; !deadline.Equal(start.Add(4500 * time.Millisecond)) {
					t.Errorf("collector deadline %v after the request, want 4.5s (the header's 5s minus 0.5s)", deadline.Sub(start))
				}
				hangUp()
				<-done
				if err := <-c.ended; !errors.Is(err, context.Canceled) {
					t.Errorf("collector's context ended with %v, want canceled", err)
				}
				if took := time.Since(start); took != 0 {
					t.Errorf("the request ended %v after the client hung up, want at once", took)
				}
				if ph, ok := h.(*probeHandler); ok {
					drainProbes(ph)
				}
			})
		})
	}
}
