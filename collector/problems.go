package collector

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// parseErrorsDesc counts both kinds of Problems: bad input, and the panics
// Recover turns into a problem. A panic is a bug, never expected, and rare
// enough not to need a family of its own: its kind ends in _panic and its
// log line says "panicked".
var parseErrorsDesc = NewMetric("collector_parse_errors_total",
	"Malformed or unexpected input (lines, fields, replies, frames) a collector skipped since start, and panics of its background work (a bug: the unit of work is skipped); each kind is logged once.",
	prometheus.CounterValue, "collector")

// Problems counts and logs bad input for one collector: every occurrence
// counted, each distinct kind logged once at warn level. Recover counts a
// panic of background work the same way. It is safe for concurrent use.
type Problems struct {
	name   string
	logger *slog.Logger
	mu     sync.Mutex
	count  uint64
	logged map[string]bool
}

// NewProblems returns the bad-input counter of collector name.
func NewProblems(name string, logger *slog.Logger) *Problems {
	return &Problems{name: name, logger: logger, logged: map[string]bool{}}
}

// Add counts n occurrences of a problem of the given kind; the first one of
// each kind is logged with err.
func (p *Problems) Add(kind string, n int, err error) {
	p.add(kind, n, err, "skipping bad input (logged once per kind, counted in stall_collector_parse_errors_total)")
}

func (p *Problems) add(kind string, n int, err error, msg string) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.count += uint64(n)
	first := !p.logged[kind]
	p.logged[kind] = true
	p.mu.Unlock()
	if first {
		p.logger.Warn(msg, "kind", kind, "err", err)
	}
}

// Recover, deferred around one unit of background work (a sampler tick, a
// kernel log record, a captured packet), turns a panic, a bug that is
// never expected, into one problem of kind (<collector>_panic) instead of
// the end of the exporter; what names the work. The unit is skipped; the
// next one runs.
func (p *Problems) Recover(kind, what string) {
	if r := recover(); r != nil {
		p.add(kind, 1, fmt.Errorf("%s panicked: %v", what, r),
			"a bug: background work panicked and was skipped (logged once per kind, counted in stall_collector_parse_errors_total)")
	}
}

// Count is the number of problems seen since start.
func (p *Problems) Count() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// Metric is stall_collector_parse_errors_total for this collector.
func (p *Problems) Metric() prometheus.Metric {
	return parseErrorsDesc.New(float64(p.Count()), p.name)
}
