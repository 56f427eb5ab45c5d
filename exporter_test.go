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
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
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

// testSetup is what a test serves; its zero value is no collectors, no
// /probe modules, no budgets, a --collector.timeout of 5 s and no log.
type testSetup struct {
	built                         map[string]collector.Built // testBuilt, hostBuilt
	modules                       map[string]collector.ProbeModule
	timeout                       time.Duration
	maxRequests, maxProbeRequests int
	logger                        *slog.Logger
}

// testServer is /metrics and /probe as main wires them: a budget each,
// both refusal counters on /metrics.
type testServer struct {
	metrics *metricsHandler
	probe   *probeHandler
}

func newTestServer(s testSetup) testServer {
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.timeout == 0 {
		s.timeout = 5 * time.Second
	}
	metricsLimit := newLimiter("metrics", "--web.max-requests", s.maxRequests, s.logger)
	probeLimit := newLimiter("probe", "--web.max-probe-requests", s.maxProbeRequests, s.logger)
	return testServer{
		metrics: newMetricsHandler(newEntries(s.built, s.logger), s.timeout, metricsLimit, s.logger, metricsLimit, probeLimit),
		probe:   newProbeHandler(s.modules, collector.Paths{}, s.timeout, probeLimit, s.logger),
	}
}

// testBuilt names test collectors as collector.Build would build them: a
// fakeCollector by its name, any other c<i>.
func testBuilt(cs ...collector.Collector) map[string]collector.Built {
	built := map[string]collector.Built{}
	for i, c := range cs {
		name := fmt.Sprint("c", i)
		if f, ok := c.(*fakeCollector); ok {
			name = f.name
		}
		built[name] = collector.Built{Collector: c, Problems: collector.NewProblems(name, slog.New(slog.DiscardHandler))}
	}
	return built
}

// serve answers one request with h.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// get answers GET url, with header name, value pairs, and fails the test
// unless it is a 200.
func get(t *testing.T, h http.Handler, url string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := serve(h, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, rec.Code, rec.Body)
	}
	return rec
}

// logLines keeps the lines of a logger at level and above, for tests that
// count log lines by level.
type logLines struct{ collectortest.LogBuffer }

func newLogLines(level slog.Level) (*logLines, *slog.Logger) {
	l := &logLines{}
	return l, slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: level}))
}

// count returns how many lines have the level and contain every part.
func (l *logLines) count(level string, parts ...string) int {
	n := 0
	for line := range strings.SplitSeq(l.String(), "\n") {
		ok := strings.Contains(line, "level="+level)
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			n++
		}
	}
	return n
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
		built := testBuilt(slow, &fakeCollector{name: "fast"}, &fakeCollector{name: "broken", err: errors.New("boom")},
			&fakeCollector{name: "absent", err: fmt.Errorf("%w: no file", collector.ErrNoData)}, &fakeCollector{name: "buggy", panics: true})
		const timeout = 200 * time.Millisecond
		h := newTestServer(testSetup{built: built, timeout: timeout}).metrics

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
	for _, path := range []string{"/metrics", "/probe?module=stub&target=good:1"} {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCtxCollector()
				srv := newTestServer(testSetup{built: testBuilt(c), modules: map[string]collector.ProbeModule{"stub": stubModule{c: c}},
					timeout: 8 * time.Second})
				var h http.Handler = srv.metrics
				if strings.HasPrefix(path, "/probe") {
					h = srv.probe
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
				drainProbes()
			})
		})
	}
}

// TestRefusalsCountedAndLogged: requests over --web.max-requests are
// answered 503, counted in stall_exporter_requests_refused_total and logged
// at most once a minute with the number refused since the last line
// (they were once neither logged nor counted).
func TestRefusalsCountedAndLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines, logger := newLogLines(slog.LevelDebug)
		block := make(chan struct{})
		slow := &fakeCollector{name: "slow", block: block}
		h := newTestServer(testSetup{built: testBuilt(slow), timeout: 5 * time.Minute, maxRequests: 1, maxProbeRequests: 1, logger: logger}).metrics

		first := make(chan string)
		go func() { first <- serve(h, httptest.NewRequest("GET", "/metrics", nil)).Body.String() }()
		synctest.Wait() // the first request holds the only slot
		refuse := func(n int) {
			for range n {
				if rec := serve(h, httptest.NewRequest("GET", "/metrics", nil)); rec.Code != http.StatusServiceUnavailable {
					t.Fatalf("request over the limit: %d", rec.Code)
				}
			}
		}
		refuse(50)
		if n := lines.count("WARN", "refusing requests", "handler=metrics"); n != 1 {
			t.Errorf("%d log lines for 50 refusals within a minute, want 1", n)
		}
		collectortest.Advance(refusalLogInterval)
		refuse(1)
		if n := lines.count("WARN", "refusing requests", "count_since_last_line=50"); n != 1 {
			t.Errorf("the second line does not sum up the 49 unlogged refusals and this one:\n%s", lines.String())
		}
		close(block)
		<-first
		body := serve(h, httptest.NewRequest("GET", "/metrics", nil)).Body.String()
		for _, want := range []string{
			`stall_exporter_requests_refused_total{handler="metrics"} 51`,
			`stall_exporter_requests_refused_total{handler="probe"} 0`,
		} {
			if !strings.Contains(body, want+"\n") {
				t.Errorf("missing %s in\n%s", want, body)
			}
		}
	})
}
