package main

import (
	"bytes"
	"context"
	"errors"
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

// logLines is a slog handler that keeps every line, for tests that count
// log lines by level.
type logLines struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	inner slog.Handler
}

func newLogLines() (*logLines, *slog.Logger) {
	l := &logLines{}
	l.inner = slog.NewTextHandler(lockedWriter{l}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return l, slog.New(l.inner)
}

type lockedWriter struct{ l *logLines }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.buf.Write(p)
}

// count returns how many lines have the level and contain every part.
func (l *logLines) count(level string, parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if !strings.Contains(line, "level="+level) {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			n++
		}
	}
	return n
}

// failingProbe is a /probe module whose collector always fails, and whose
// collector blocks while hold is set.
type failingProbe struct {
	hold    chan struct{} // when not nil, Update waits for it to close
	started atomic.Int32
}

func (f *failingProbe) Update(_ context.Context, _ chan<- prometheus.Metric) error {
	f.started.Add(1)
	if f.hold != nil {
		<-f.hold
	}
	return errors.New("connection refused")
}

// probeModules holds each test's /probe module collector; a module is
// registered once per test binary (RegisterProbe refuses a name twice, and
// -count runs a test again with a new collector).
var probeModules, registeredModules sync.Map

func registerTestProbe(module string, c collector.Collector) {
	probeModules.Store(module, c)
	if _, loaded := registeredModules.LoadOrStore(module, true); loaded {
		return
	}
	collector.RegisterProbe(module, func(collector.Config, string) (collector.Collector, error) {
		v, _ := probeModules.Load(module)
		return v.(collector.Collector), nil
	})
}

// TestProbeFailuresLoggedOnce: a target that keeps failing is logged at
// warn level once, later failures at debug level (issue 11: 100 failing
// probes made 100 warn lines, though the text promised debug); another
// target gets its own warn line; a recovery is logged.
func TestProbeFailuresLoggedOnce(t *testing.T) {
	registerTestProbe("failing", &failingProbe{})
	lines, logger := newLogLines()
	h := newProbeHandler(collector.Paths{}, time.Second, newLimiter("probe", "--web.max-probe-requests", 0, logger), logger)
	probe := func(target string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/probe?module=failing&target="+target, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("probe %s: %d %s", target, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	for range 100 {
		if body := probe("a:1"); !strings.Contains(body, `stall_scrape_collector_success{collector="failing"} 0`) {
			t.Fatalf("a failing probe reports success:\n%s", body)
		}
	}
	probe("b:2")
	if n := lines.count("WARN", "collector failed", "target=a:1"); n != 1 {
		t.Errorf("%d warn lines for 100 failures of one target, want 1", n)
	}
	if n := lines.count("DEBUG", "collector failed", "target=a:1"); n != 99 {
		t.Errorf("%d debug lines for the repeats, want 99", n)
	}
	if n := lines.count("WARN", "collector failed", "target=b:2"); n != 1 {
		t.Errorf("%d warn lines for a second target, want 1", n)
	}
}

// TestRefusalsCountedAndLogged: requests over --web.max-requests are
// answered 503, counted in stall_exporter_requests_refused_total and logged
// at most once a minute with the number refused since the last line (issue
// 11: they were neither logged nor counted).
func TestRefusalsCountedAndLogged(t *testing.T) {
	lines, logger := newLogLines()
	block := make(chan struct{})
	slow := &fakeCollector{name: "slow", block: block}
	e := NewExporter(map[string]collector.Built{"slow": {Collector: slow, Problems: collector.NewProblems("slow", logger)}}, 5*time.Second, logger)
	metricsLimit := newLimiter("metrics", "--web.max-requests", 1, logger)
	probeLimit := newLimiter("probe", "--web.max-probe-requests", 1, logger)
	now := time.Unix(1e9, 0)
	metricsLimit.now = func() time.Time { return now }
	h := newMetricsHandler(e, 5*time.Second, metricsLimit, logger, refusals(nil, metricsLimit, probeLimit))

	first := make(chan string)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		first <- rec.Body.String()
	}()
	for slow.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	refuse := func(n int) {
		for range n {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("request over the limit: %d", rec.Code)
			}
		}
	}
	refuse(50)
	if n := lines.count("WARN", "refusing requests", "handler=metrics"); n != 1 {
		t.Errorf("%d log lines for 50 refusals within a minute, want 1", n)
	}
	now = now.Add(61 * time.Second)
	refuse(1)
	if n := lines.count("WARN", "refusing requests", "count_since_last_line=50"); n != 1 {
		t.Errorf("the second line does not sum up the 49 unlogged refusals and this one:\n%s", lines.buf.String())
	}
	close(block)
	<-first
	// The counters are read while the registry gathers, concurrently with
	// the collectors, so the next scrape is the one sure to see them all.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`stall_exporter_requests_refused_total{handler="metrics"} 51`,
		`stall_exporter_requests_refused_total{handler="probe"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("missing %s in\n%s", want, body)
		}
	}
}

// TestSeparateBudgets: /metrics and /probe have budgets of their own, so
// probes of a hanging target cannot starve the host metrics (issue 11: both
// handlers had the full --web.max-requests each, documented as one limit).
func TestSeparateBudgets(t *testing.T) {
	hanging := &failingProbe{hold: make(chan struct{})}
	registerTestProbe("hanging", hanging)
	logger := slog.New(slog.DiscardHandler)
	metricsLimit := newLimiter("metrics", "--web.max-requests", 1, logger)
	probeLimit := newLimiter("probe", "--web.max-probe-requests", 1, logger)
	fast := &fakeCollector{name: "fast"}
	e := NewExporter(map[string]collector.Built{"fast": {Collector: fast, Problems: collector.NewProblems("fast", logger)}}, 5*time.Second, logger)
	mh := newMetricsHandler(e, 5*time.Second, metricsLimit, logger, refusals(nil, metricsLimit, probeLimit))
	ph := newProbeHandler(collector.Paths{}, 5*time.Second, probeLimit, logger)

	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		ph.ServeHTTP(rec, httptest.NewRequest("GET", "/probe?module=hanging&target=hang:1", nil))
		done <- rec.Code
	}()
	for hanging.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	rec := httptest.NewRecorder()
	ph.ServeHTTP(rec, httptest.NewRequest("GET", "/probe?module=hanging&target=other:1", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("second probe while the probe budget is used: %d, want 503", rec.Code)
	}
	for range 3 {
		rec = httptest.NewRecorder()
		mh.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != http.StatusOK {
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
}
