package main

import (
	"context"
	"errors"
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
	for _, line := range strings.Split(l.String(), "\n") {
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

// TestRefusalsCountedAndLogged: requests over --web.max-requests are
// answered 503, counted in stall_exporter_requests_refused_total and logged
// at most once a minute with the number refused since the last line
// (they were once neither logged nor counted).
func TestRefusalsCountedAndLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines, logger := newLogLines(slog.LevelDebug)
		block := make(chan struct{})
		slow := &fakeCollector{name: "slow", block: block}
		metricsLimit := newLimiter("metrics", "--web.max-requests", 1, logger)
		probeLimit := newLimiter("probe", "--web.max-probe-requests", 1, logger)
		h := newMetricsHandler(newTestExporter(logger, slow), 5*time.Minute, metricsLimit, logger, metricsLimit, probeLimit)

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
		time.Sleep(refusalLogInterval)
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

// TestSeparateBudgets: /metrics and /probe have budgets of their own, so
// probes of a hanging target cannot starve the host metrics (both handlers
// once had the full --web.max-requests each, documented as one limit).
func TestSeparateBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hanging := &failingProbe{hold: make(chan struct{})}
		logger := slog.New(slog.DiscardHandler)
		metricsLimit := newLimiter("metrics", "--web.max-requests", 1, logger)
		probeLimit := newLimiter("probe", "--web.max-probe-requests", 1, logger)
		mh := newMetricsHandler(newTestExporter(logger, &fakeCollector{name: "fast"}), 5*time.Second, metricsLimit, logger, metricsLimit, probeLimit)
		ph := newProbeHandler(map[string]collector.ProbeModule{"hanging": stubModule{c: hanging}}, collector.Paths{}, 5*time.Second, probeLimit, logger)

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
		drainProbes(ph)
	})
}
