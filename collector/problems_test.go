package collector_test

import (
	"log/slog"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// Bad input and a recovered panic both count in the one counter, each kind
// logged once, a panic with a line of its own that names the work.
func TestProblemsAddAndRecover(t *testing.T) {
	logs, logger := collectortest.NewLogs(slog.LevelInfo)
	p := collector.NewProblems("test", logger)
	p.Add("test_line", 2, nil)
	p.Add("test_line", 1, nil)
	for range 2 {
		func() {
			defer p.Recover("test_panic", "a test tick")
			panic("boom")
		}()
	}
	if got := p.Count(); got != 5 {
		t.Errorf("Count = %d, want 5 (3 bad lines, 2 panics)", got)
	}
	lines := logs.Take()
	if len(lines) != 2 || logs.Count("warn", "skipping bad input", "kind=test_line") != 1 ||
		logs.Count("warn", "background work panicked", "err=a test tick panicked: boom") != 1 {
		t.Errorf("logged %q, want one line per kind, the panic's naming the work", lines)
	}
}
