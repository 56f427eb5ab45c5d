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
		return "", nil, fmt.Errorf("%w: %q is not in --stub.allowed", collector.ErrTargetNotAllowed, key)
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
// is malformed, 403 outside the allowlist, never echoed back), and one
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
		{"module=stub&target=evil:1", 403, "target not allowed by configuration"},
		{"module=stub&target=evil", 400, "want host:port"},
		{"module=stub", 400, "exactly one"},
		{"module=stub&target=", 400, "exactly one"},
		{"module=stub&target=good:1&target=evil:1", 400, "exactly one"},
		{"module=stub&target=" + strings.Repeat("a", 2000), 400, "longer than"},
		{"module=nope&target=good:1", 400, "unknown or missing module (module=other|stub)"},
		{"module=other&target=good:1", 200, `stall_test_value{from="probed-good:1"} 1`},
	} {
		rec := serve(h, httptest.NewRequest("GET", "/probe?"+tc.query, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%.60s: %d %q, want %d containing %q", tc.query, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
		if strings.Contains(rec.Body.String(), "evil") {
			t.Errorf("%.60s: the refused target is echoed back", tc.query)
		}
	}
	if n := built.Load(); n != 1 {
		t.Errorf("the stub module built %d collectors for one target spelled two ways, want 1", n)
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
	lines, logger := newLogLines(slog.LevelDebug)
	h := newTestProbeHandler(logger, map[string]collector.ProbeModule{"failing": stubModule{c: c}})
	probe := func(target string) string {
		rec := serve(h, httptest.NewRequest("GET", "/probe?module=failing&target="+target, nil))
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
	if n := lines.count("WARN", "collector failed", "target=good:1"); n != 1 {
		t.Errorf("%d warn lines for 100 failures of one target, want 1", n)
	}
	if n := lines.count("DEBUG", "collector failed", "target=good:1"); n != 99 {
		t.Errorf("%d debug lines for the repeats, want 99", n)
	}
	if n := lines.count("WARN", "collector failed", "target=good:2"); n != 1 {
		t.Errorf("%d warn lines for a second target, want 1", n)
	}
	c.fail.Store(false)
	probe("good:1")
	probe("good:1")
	if n := lines.count("INFO", "collector recovered", "target=good:1"); n != 1 {
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
		return "", nil, fmt.Errorf("%w: %q", collector.ErrTargetNotAllowed, target)
	}
	return target, func(cfg collector.Config) collector.Collector { return loggingCollector{cfg.Logger, m.closed} }, nil
}

// TestProbeDebug: &debug=true answers the probe's log lines at debug level
// (the process logs at info) and its metrics as text, from a collector of
// its own that is closed afterwards and never cached; the allowlist holds
// as without debug.
func TestProbeDebug(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines, logger := newLogLines(slog.LevelInfo)
		closed := &atomic.Int32{}
		h := newTestProbeHandler(logger, map[string]collector.ProbeModule{"logging": loggingModule{closed}})
		rec := serve(h, httptest.NewRequest("GET", "/probe?module=logging&target=good:1&debug=true", nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Fatalf("%d %s: %s", rec.Code, rec.Header().Get("Content-Type"), body)
		}
		logs, metrics, ok := strings.Cut(body, "Metrics that would have been returned:\n")
		if !ok {
			t.Fatalf("no metrics part:\n%s", body)
		}
		for _, want := range []string{"Logs for the probe of logging target good:1:", "level=DEBUG msg=\"dialing the target\" probe=logging step=dial",
			"level=INFO msg=\"target answered\""} {
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
		if n := lines.count("DEBUG", "dialing"); n != 0 {
			t.Error("the debug probe's lines went to the process log")
		}
		synctest.Wait()
		if n := closed.Load(); n != 1 || h.targets.Len() != 0 {
			t.Errorf("the debug collector was closed %d times and %d targets are cached; want 1 and 0", n, h.targets.Len())
		}
		if rec := serve(h, httptest.NewRequest("GET", "/probe?module=logging&target=evil:1&debug=true", nil)); rec.Code != http.StatusForbidden {
			t.Errorf("a refused target with debug=true: %d, want 403", rec.Code)
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
		go func() { done <- serve(ph, httptest.NewRequest("GET", "/probe?module=hanging&target=good:1", nil)).Code }()
		synctest.Wait() // the first probe holds the only probe slot
		if code := serve(ph, httptest.NewRequest("GET", "/probe?module=hanging&target=good:2", nil)).Code; code != http.StatusServiceUnavailable {
			t.Errorf("second probe while the probe budget is used: %d, want 503", code)
		}
		var rec *httptest.ResponseRecorder
		for range 3 {
			if rec = serve(mh, httptest.NewRequest("GET", "/metrics", nil)); rec.Code != http.StatusOK {
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
