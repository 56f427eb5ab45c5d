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
		m["boom"]++ //nolint:staticcheck // SA5000 on purpose: a nil-map write, the kind of bug a collector could have
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
	entries []*entry // of /metrics
	metrics http.Handler
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
	entries := newEntries(s.built, s.logger)
	deadline := scrapeTimeout{limit: s.timeout, offset: 500 * time.Millisecond}
	return testServer{
		entries: entries,
		metrics: newMetricsHandler(entries, ownMetrics(metricsLimit, probeLimit), metricsLimit, deadline, s.logger),
		probe:   newProbeHandler(s.modules, collector.Paths{}, deadline, probeLimit, s.logger, func(w io.Writer) *slog.Logger { return newLogger(w, "debug", "logfmt") }),
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
	req := httptest.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := serve(h, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, rec.Code, rec.Body)
	}
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
		built := testBuilt(slow, &fakeCollector{name: "fast"}, &fakeCollector{name: "broken", err: errors.New("boom")},
			&fakeCollector{name: "absent", err: fmt.Errorf("%w: no file", collector.ErrNoData)}, &fakeCollector{name: "buggy", panics: true})
		const timeout = 200 * time.Millisecond
		h := newTestServer(testSetup{built: built, timeout: timeout}).metrics

		start := time.Now()
		body := serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil)).Body.String()
		if took := time.Since(start); took != timeout {
			t.Errorf("the scrape took %v, want the collectors' timeout %v", took, timeout)
		}
		// What a collector sent before it failed, panicked or ran out of
		// time is kept; what the slow one sends after its timeout is not.
		collectortest.CompareExposition(t, body, `
stall_scrape_collector_success{collector="absent"} 1
stall_scrape_collector_success{collector="broken"} 0
stall_scrape_collector_success{collector="buggy"} 0
stall_scrape_collector_success{collector="fast"} 1
stall_scrape_collector_success{collector="slow"} 0
stall_test_value{from="absent"} 1
stall_test_value{from="broken"} 1
stall_test_value{from="buggy"} 1
stall_test_value{from="fast"} 1
stall_test_value{from="slow"} 1
`, "stall_scrape_collector_success", "stall_test_value")

		body = serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil)).Body.String()
		if n := slow.started.Load(); n != 1 {
			t.Errorf("stuck collector was started %d times, want 1", n)
		}
		collectortest.CompareExposition(t, body, `
stall_scrape_collector_success{collector="absent"} 1
stall_scrape_collector_success{collector="broken"} 0
stall_scrape_collector_success{collector="buggy"} 0
stall_scrape_collector_success{collector="fast"} 1
stall_scrape_collector_success{collector="slow"} 0
`, "stall_scrape_collector_success")
	})
}

// TestScrapeTimeoutHeader: Prometheus' scrape timeout lowers the
// collectors' limit to the header less --web.timeout-offset (at least
// 0.1 s), never raises it past --collector.timeout, and a bad header is
// ignored.
func TestScrapeTimeoutHeader(t *testing.T) {
	for _, tc := range []struct {
		header string
		offset time.Duration
		want   time.Duration
	}{
		{"", 500 * time.Millisecond, 8 * time.Second},
		{"10", 500 * time.Millisecond, 8 * time.Second},
		{"5", 500 * time.Millisecond, 4500 * time.Millisecond},
		{"5", 2 * time.Second, 3 * time.Second},
		{"5", 0, 5 * time.Second},
		{"8.2", 0, 8 * time.Second},
		{"0.2", 500 * time.Millisecond, 100 * time.Millisecond},
		{"garbage", 500 * time.Millisecond, 8 * time.Second},
		{"-3", 500 * time.Millisecond, 8 * time.Second},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if tc.header != "" {
			r.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", tc.header)
		}
		if got := (scrapeTimeout{limit: 8 * time.Second, offset: tc.offset}).of(r); got != tc.want {
			t.Errorf("header %q offset %v: got %v, want %v", tc.header, tc.offset, got, tc.want)
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
				h := srv.metrics
				if strings.HasPrefix(path, "/probe") {
					h = srv.probe
				}
				ctx, hangUp := context.WithCancel(context.Background())
				r := httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx)
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
		lines, logger := collectortest.NewLogs(slog.LevelDebug)
		block := make(chan struct{})
		slow := &fakeCollector{name: "slow", block: block}
		h := newTestServer(testSetup{built: testBuilt(slow), timeout: 5 * time.Minute, maxRequests: 1, maxProbeRequests: 1, logger: logger}).metrics

		first := make(chan string)
		go func() { first <- serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil)).Body.String() }()
		synctest.Wait() // the first request holds the only slot
		refuse := func(n int) {
			for range n {
				if rec := serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil)); rec.Code != http.StatusServiceUnavailable {
					t.Fatalf("request over the limit: %d", rec.Code)
				}
			}
		}
		refuse(50)
		if n := lines.Count("WARN", "refusing requests", "handler=metrics"); n != 1 {
			t.Errorf("%d log lines for 50 refusals within a minute, want 1", n)
		}
		collectortest.Advance(refusalLogInterval)
		refuse(1)
		if n := lines.Count("WARN", "refusing requests", "count_since_last_line=50"); n != 1 {
			t.Errorf("the second line does not sum up the 49 unlogged refusals and this one:\n%s", lines.String())
		}
		close(block)
		<-first
		body := serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil)).Body.String()
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

// stubModule is a /probe module that allows the targets good:1 and good:2
// (both spelled with a port) and builds c, or a fakeCollector per target
// when c is nil; built counts the collectors it made.
type stubModule struct {
	c     collector.Collector
	built *atomic.Int32
}

func (m stubModule) Target(target string) (string, func(collector.Config) collector.Collector, error) {
	key, _ := strings.CutPrefix(target, "stub://")
	switch {
	case !strings.Contains(key, ":"):
		return "", nil, errors.New("want host:port")
	case key != "good:1" && key != "good:2":
		return "", nil, fmt.Errorf("%w: add it to --stub.allowed", collector.ErrTargetNotAllowed)
	}
	return key, func(cfg collector.Config) collector.Collector {
		if m.built != nil {
			m.built.Add(1)
		}
		if m.c != nil {
			return m.c
		}
		return &fakeCollector{name: "probed-" + key}
	}, nil
}

// drainProbes lets the probe cache's background trim drop every target
// and end, which a synctest bubble needs before it finishes.
func drainProbes() {
	collectortest.Advance(probeLimits.Idle + probeLimits.ConnIdle)
	synctest.Wait()
}

// newTestProbeHandler is /probe on modules with a timeout of 1 s.
func newTestProbeHandler(logger *slog.Logger, modules map[string]collector.ProbeModule) *probeHandler {
	return newTestServer(testSetup{modules: modules, timeout: time.Second, logger: logger}).probe
}

// failingProbe is a /probe collector that fails while fail is set, and
// blocks while hold is open.
type failingProbe struct {
	hold    chan struct{} // when not nil, Update waits for it to close
	fail    atomic.Bool
	started atomic.Int32
}

func (f *failingProbe) Update(_ context.Context, _ chan<- prometheus.Metric) error {
	f.started.Add(1)
	if f.hold != nil {
		<-f.hold
	}
	if f.fail.Load() {
		return errors.New("connection refused")
	}
	return nil
}

// TestProbeRequests checks /probe's input handling: the module and the
// target are required, a target is looked at by its module (400 when it
// is malformed, 403 outside the allowlist with the module's reason, never
// echoed back), debug is a boolean or a 400, and one
// collector is kept per module and target key, however the target is
// spelled.
func TestProbeRequests(t *testing.T) {
	built := &atomic.Int32{}
	h := newTestProbeHandler(slog.New(slog.DiscardHandler), map[string]collector.ProbeModule{"stub": stubModule{built: built}, "other": stubModule{}})
	for _, tc := range []struct {
		query string
		code  int
		body  string
	}{
		{"module=stub&target=good:1", 200, `stall_test_value{from="probed-good:1"} 1`},
		{"module=stub&target=stub://good:1", 200, `stall_test_value{from="probed-good:1"} 1`},
		{"module=stub&target=evil:1", 403, "target not allowed by configuration: add it to --stub.allowed"},
		{"module=stub&target=evil:1&debug=true", 403, "target not allowed by configuration: add it to --stub.allowed"},
		{"module=stub&target=good:1&debug=1", 200, `Logs for the probe of stub target good:1`},
		{"module=stub&target=good:1&debug=false", 200, `stall_test_value{from="probed-good:1"} 1`},
		{"module=stub&target=good:1&debug=yes", 400, "debug must be given once, as true or false"},
		{"module=stub&target=good:1&debug=", 400, "debug must be given once"},
		{"module=stub&target=good:1&debug=true&debug=false", 400, "debug must be given once"},
		{"module=stub&target=evil", 400, "want host:port"},
		{"module=stub", 400, "exactly one"},
		{"module=stub&target=", 400, "exactly one"},
		{"module=stub&target=good:1&target=evil:1", 400, "exactly one"},
		{"module=stub&target=" + strings.Repeat("a", 2000), 400, "longer than"},
		{"module=nope&target=good:1", 400, "unknown or missing module (module=other|stub)"},
		{"module=other&target=good:1", 200, `stall_test_value{from="probed-good:1"} 1`},
	} {
		rec := serve(h, httptest.NewRequest(http.MethodGet, "/probe?"+tc.query, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%.60s: %d %q, want %d containing %q", tc.query, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
		if strings.Contains(rec.Body.String(), "evil") {
			t.Errorf("%.60s: the refused target is echoed back", tc.query)
		}
	}
	if n := built.Load(); n != 2 {
		t.Errorf("the stub module built %d collectors, want 2: one kept for a target spelled two ways, one for the debug probe", n)
	}
	if n := h.targets.Len(); n != 2 {
		t.Errorf("%d targets kept, want 2 (good:1 of each module)", n)
	}
}

// TestProbeFailuresLoggedOnce: a target that keeps failing is logged at
// warn level once, later failures at debug level (100 failing probes once
// made 100 warn lines, though the text promised debug); another target
// gets its own warn line, since each target's failures are its own state;
// a recovery is logged once, at info level.
func TestProbeFailuresLoggedOnce(t *testing.T) {
	c := &failingProbe{}
	c.fail.Store(true)
	lines, logger := collectortest.NewLogs(slog.LevelDebug)
	h := newTestProbeHandler(logger, map[string]collector.ProbeModule{"failing": stubModule{c: c}})
	probe := func(target string) string {
		rec := serve(h, httptest.NewRequest(http.MethodGet, "/probe?module=failing&target="+target, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("probe %s: %d %s", target, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	for range 100 {
		if body := probe("good:1"); !strings.Contains(body, `stall_scrape_collector_success{collector="failing"} 0`) {
			t.Fatalf("a failing probe reports success:\n%s", body)
		}
	}
	probe("good:2")
	if n := lines.Count("WARN", "collector failed", "target=good:1"); n != 1 {
		t.Errorf("%d warn lines for 100 failures of one target, want 1", n)
	}
	if n := lines.Count("DEBUG", "collector failed", "target=good:1"); n != 99 {
		t.Errorf("%d debug lines for the repeats, want 99", n)
	}
	if n := lines.Count("WARN", "collector failed", "target=good:2"); n != 1 {
		t.Errorf("%d warn lines for a second target, want 1", n)
	}
	c.fail.Store(false)
	probe("good:1")
	probe("good:1")
	if n := lines.Count("INFO", "collector recovered", "target=good:1"); n != 1 {
		t.Errorf("%d info lines for the recovery, want 1", n)
	}
}

// loggingCollector logs at debug and info level through the logger its
// module gave it, sends one sample, and records that it was closed.
type loggingCollector struct {
	logger *slog.Logger
	closed *atomic.Int32
}

func (c loggingCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.logger.Debug("dialing the target", "step", "dial")
	c.logger.Info("target answered", "step", "read")
	ch <- prometheus.MustNewConstMetric(testGauge, prometheus.GaugeValue, 7, "debugged")
	return nil
}

func (c loggingCollector) Close() error {
	c.closed.Add(1)
	return nil
}

type loggingModule struct{ closed *atomic.Int32 }

func (m loggingModule) Target(target string) (string, func(collector.Config) collector.Collector, error) {
	if target != "good:1" {
		return "", nil, fmt.Errorf("%w: add it to --logging.allowed", collector.ErrTargetNotAllowed)
	}
	return target, func(cfg collector.Config) collector.Collector { return loggingCollector{cfg.Logger, m.closed} }, nil
}

// TestProbeDebug: &debug=true answers the probe's log lines at debug level
// (the process logs at info) in the main log's format (logfmt, with caller
// and time), its own steps among them, and its metrics as text, from a collector of
// its own that is closed afterwards and never cached; the allowlist holds
// as without debug.
func TestProbeDebug(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines, logger := collectortest.NewLogs(slog.LevelInfo)
		closed := &atomic.Int32{}
		h := newTestProbeHandler(logger, map[string]collector.ProbeModule{"logging": loggingModule{closed}})
		rec := serve(h, httptest.NewRequest(http.MethodGet, "/probe?module=logging&target=good:1&debug=true", nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Fatalf("%d %s: %s", rec.Code, rec.Header().Get("Content-Type"), body)
		}
		logs, metrics, ok := strings.Cut(body, "Metrics that would have been returned:\n")
		if !ok {
			t.Fatalf("no metrics part:\n%s", body)
		}
		// The logs part is in the main log's format (logfmt, with caller),
		// which a user reads: checked as text, not through collectortest.Logs.
		for _, want := range []string{"Logs for the probe of logging target good:1:\nlevel=debug caller=probe.go:",
			` msg="probe target allowed" module=logging target=good:1 timeout=1s` + "\n",
			"level=debug caller=handler_test.go:", ` msg="dialing the target" probe=logging step=dial` + "\n",
			"level=info caller=handler_test.go:", ` msg="target answered" probe=logging step=read` + "\n",
			` msg="probe finished" module=logging target=good:1 duration=0s metric_families=4` + "\n"} {
			if !strings.Contains(logs, want) {
				t.Errorf("the logs part lacks %q:\n%s", want, logs)
			}
		}
		for _, want := range []string{`stall_test_value{from="debugged"} 7`, `stall_scrape_collector_success{collector="logging"} 1`,
			"# HELP stall_scrape_collector_success "} {
			if !strings.Contains(metrics, want) {
				t.Errorf("the metrics part lacks %q:\n%s", want, metrics)
			}
		}
		if n := lines.Count("DEBUG", "dialing"); n != 0 {
			t.Error("the debug probe's lines went to the process log")
		}
		synctest.Wait()
		if n := closed.Load(); n != 1 || h.targets.Len() != 0 {
			t.Errorf("the debug collector was closed %d times and %d targets are cached; want 1 and 0", n, h.targets.Len())
		}
		if rec := serve(h, httptest.NewRequest(http.MethodGet, "/probe?module=logging&target=evil:1&debug=true", nil)); rec.Code != http.StatusForbidden ||
			!strings.Contains(rec.Body.String(), "--logging.allowed") {
			t.Errorf("a refused target with debug=true: %d %q, want 403 naming the flag", rec.Code, rec.Body)
		}
	})
}

// TestSeparateBudgets: /metrics and /probe have budgets of their own, so
// probes of a hanging target cannot starve the host metrics (both handlers
// once had the full --web.max-requests each, documented as one limit).
func TestSeparateBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hanging := &failingProbe{hold: make(chan struct{})}
		srv := newTestServer(testSetup{built: testBuilt(&fakeCollector{name: "fast"}), modules: map[string]collector.ProbeModule{"hanging": stubModule{c: hanging}},
			maxRequests: 1, maxProbeRequests: 1})
		mh, ph := srv.metrics, srv.probe

		done := make(chan int)
		go func() {
			done <- serve(ph, httptest.NewRequest(http.MethodGet, "/probe?module=hanging&target=good:1", nil)).Code
		}()
		synctest.Wait() // the first probe holds the only probe slot
		if code := serve(ph, httptest.NewRequest(http.MethodGet, "/probe?module=hanging&target=good:2", nil)).Code; code != http.StatusServiceUnavailable {
			t.Errorf("second probe while the probe budget is used: %d, want 503", code)
		}
		var rec *httptest.ResponseRecorder
		for range 3 {
			if rec = serve(mh, httptest.NewRequest(http.MethodGet, "/metrics", nil)); rec.Code != http.StatusOK {
				t.Fatalf("/metrics while a probe holds the probe budget: %d", rec.Code)
			}
		}
		if !strings.Contains(rec.Body.String(), `stall_exporter_requests_refused_total{handler="probe"} 1`+"\n") {
			t.Errorf("the refused probe is not counted:\n%s", rec.Body)
		}
		close(hanging.hold)
		if code := <-done; code != http.StatusOK {
			t.Errorf("held probe: %d", code)
		}
		drainProbes()
	})
}
