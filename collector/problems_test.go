package collector

import (
	"log/slog"
	"strings"
	"testing"
)

// Bad input and a recovered panic both count in the one counter, each kind
// logged once, a panic with a line of its own that names the work.
func TestProblemsAddAndRecover(t *testing.T) {
	var logs LogBuffer
	p := NewProblems("test", slog.New(slog.NewTextHandler(&logs, nil)))
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
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "skipping bad input") || !strings.Contains(lines[0], "kind=test_line") ||
		!strings.Contains(lines[1], "background work panicked") || !strings.Contains(lines[1], `err="a test tick panicked: boom"`) {
		t.Errorf("logged %q, want one line per kind, the panic's naming the work", lines)
	}
}
