package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

var (
	scrapeDurationDesc = collector.NewMetric("scrape_collector_duration_seconds",
		"Wall time of the collector's last Update, in seconds (measured by the exporter).",
		prometheus.GaugeValue, "collector")
	scrapeSuccessDesc = collector.NewMetric("scrape_collector_success",
		"1 if the collector's last Update finished within its timeout without error (no data on this host counts as success), else 0.",
		prometheus.GaugeValue, "collector")
)

// newEntries wraps the collectors of /metrics, sorted by name; failures are
// logged with collector=<name>.
func newEntries(built map[string]collector.Built, logger *slog.Logger) []*entry {
	var entries []*entry
	for _, name := range slices.Sorted(maps.Keys(built)) {
		entries = append(entries, newEntry(name, built[name].Collector, built[name].Problems, logger.With("collector", name)))
	}
	return entries
}

// startRunners launches the background loops of the collectors that
// implement collector.Runner. They stop when ctx is cancelled.
func startRunners(ctx context.Context, entries []*entry) {
	for _, en := range entries {
		if r, ok := en.c.(collector.Runner); ok {
			go r.Run(ctx)
		}
	}
}

// entry is one collector as the exporter runs it, with what outlives one
// run: for /metrics an entry lives as long as the process, for /probe as
// long as the probe cache keeps its target. A run that overruns its
// deadline is reported as failed and its late metrics are dropped; while
// such an abandoned run is still going, new runs fail fast instead of
// piling up goroutines. A panic costs the run, never the process.
type entry struct {
	name     string // the collector label: a collector or /probe module name
	c        collector.Collector
	problems *collector.Problems
	logger   *slog.Logger        // collector=<name>, and target=<key> on /probe
	failures *collector.StateLog // the runs' failures and recovery

	abandoned atomic.Int32 // runs that overran their deadline and have not returned yet
}

func newEntry(name string, c collector.Collector, problems *collector.Problems, logger *slog.Logger) *entry {
	return &entry{name: name, c: c, problems: problems, logger: logger, failures: collector.NewStateLog(logger)}
}

// Close closes the collector if it is an io.Closer (a /probe target's).
func (en *entry) Close() error {
	if c, ok := en.c.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// CloseIdle closes the collector's idle connections if it keeps any
// (collector.IdleCloser) and reports whether none is left open.
func (en *entry) CloseIdle() bool {
	if c, ok := en.c.(collector.IdleCloser); ok {
		return c.CloseIdle()
	}
	return true
}

// run runs one Update under ctx and appends its metrics to out until ctx
// is done, then the entry's stall_scrape_collector_* and parse-error
// series.
func (en *entry) run(ctx context.Context, out *[]prometheus.Metric) {
	start := time.Now()
	err := en.update(ctx, out)
	elapsed := time.Since(start).Seconds()
	success := 1.0
	if err != nil && !errors.Is(err, collector.ErrNoData) {
		success = 0
		en.failures.Failed("collector failed", failureReason(err), err, "duration_seconds", elapsed)
	} else {
		en.failures.OK("collector recovered")
	}
	*out = append(*out, scrapeDurationDesc.New(elapsed, en.name), scrapeSuccessDesc.New(success, en.name), en.problems.Metric())
}

var (
	errStillRunning = errors.New("the previous run overran its timeout and is still running")
	errPanicked     = errors.New("collector panicked (a bug; stack logged at debug level)")
)

// failureReason is the reason word of a failed run, for its StateLog.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errStillRunning):
		return "still_running"
	case errors.Is(err, errPanicked):
		return "panic"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}

// update runs one Update, appending its metrics to out until it returns
// or ctx is done. The collector sends on a channel of its own and this
// goroutine forwards, so a collector that ignores ctx is cut off at the
// deadline: its late metrics are drained and dropped in the background.
func (en *entry) update(ctx context.Context, out *[]prometheus.Metric) error {
	if en.abandoned.Load() > 0 {
		return errStillRunning
	}

	// 256 buffered metrics: a collector rarely waits for the forwarder, and
	// the two goroutines hand over in batches rather than per metric.
	inner := make(chan prometheus.Metric, 256)
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: %v", errPanicked, r)
				en.logger.Debug("collector panic", "stack", string(debug.Stack()))
			}
			close(inner)
			done <- err
		}()
		err = en.c.Update(ctx, inner)
	}()
	for {
		// Take what is buffered without a select (the common case), and
		// select only to wait.
		for n := len(inner); n > 0; n-- {
			*out = append(*out, <-inner)
		}
		select {
		case m, ok := <-inner:
			if !ok {
				return <-done
			}
			*out = append(*out, m)
		case <-ctx.Done():
			en.abandoned.Add(1)
			en.logger.Debug("collector timed out; metrics it sends from now on are dropped")
			go func() {
				for range inner {
				}
				en.abandoned.Add(-1)
			}()
			return ctx.Err()
		}
	}
}
