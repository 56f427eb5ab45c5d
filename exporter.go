package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
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

// Exporter is the prometheus.Collector that runs every enabled collector
// concurrently, each under its own timeout, and adds the
// stall_scrape_collector_* self-metrics. A collector that overruns its
// timeout is reported as failed and its late metrics are dropped; while such
// an abandoned run is still going, new scrapes of that collector fail fast
// instead of piling up goroutines.
type Exporter struct {
	logger  *slog.Logger
	timeout time.Duration
	entries []*entry
}

type entry struct {
	name     string
	c        collector.Collector
	problems *collector.Problems

	mu        sync.Mutex
	abandoned int  // runs that overran their timeout and have not returned yet
	failing   bool // the last run failed: log transitions, not every scrape
}

// NewExporter wraps built collectors. timeout bounds each collector's Update.
func NewExporter(built map[string]collector.Built, timeout time.Duration, logger *slog.Logger) *Exporter {
	e := &Exporter{logger: logger, timeout: timeout}
	for name, b := range built {
		e.entries = append(e.entries, &entry{name: name, c: b.Collector, problems: b.Problems})
	}
	sort.Slice(e.entries, func(i, j int) bool { return e.entries[i].name < e.entries[j].name })
	return e
}

// Start launches the background loops of collectors that implement
// collector.Runner. They stop when ctx is cancelled.
func (e *Exporter) Start(ctx context.Context) {
	for _, en := range e.entries {
		if r, ok := en.c.(collector.Runner); ok {
			go r.Run(ctx)
		}
	}
}

// Describe sends nothing: the exporter is an unchecked collector, since the
// series each collector exports depend on the host.
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.CollectWithTimeout(ch, e.timeout)
}

// CollectWithTimeout runs every collector concurrently with the given
// per-collector timeout.
func (e *Exporter) CollectWithTimeout(ch chan<- prometheus.Metric, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, en := range e.entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.run(en, ch, timeout)
		}()
	}
	wg.Wait()
}

func (e *Exporter) run(en *entry, ch chan<- prometheus.Metric, timeout time.Duration) {
	start := time.Now()
	err := e.update(en, ch, timeout)
	elapsed := time.Since(start).Seconds()
	success := 1.0
	failed := err != nil && !errors.Is(err, collector.ErrNoData)
	if failed {
		success = 0
	}
	en.mu.Lock()
	was := en.failing
	en.failing = failed
	en.mu.Unlock()
	switch {
	case failed && !was:
		e.logger.Warn("collector failed; repeats are logged at debug level until it recovers",
			"collector", en.name, "duration_seconds", elapsed, "err", err)
	case failed:
		e.logger.Debug("collector failed", "collector", en.name, "duration_seconds", elapsed, "err", err)
	case was:
		e.logger.Info("collector recovered", "collector", en.name)
	}
	scrapeDurationDesc.Send(ch, elapsed, en.name)
	scrapeSuccessDesc.Send(ch, success, en.name)
	en.problems.Send(ch)
}

var (
	errStillRunning = errors.New("the previous run overran its timeout and is still running")
	errPanicked     = errors.New("collector panicked (a bug; stack logged at debug level)")
)

// update runs one Update, forwarding its metrics to ch until it returns or
// the timeout passes.
func (e *Exporter) update(en *entry, ch chan<- prometheus.Metric, timeout time.Duration) error {
	en.mu.Lock()
	if en.abandoned > 0 {
		en.mu.Unlock()
		return errStillRunning
	}
	en.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	inner := make(chan prometheus.Metric, 64)
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			// A bug in one collector costs that collector's scrape, never
			// the process.
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: %v", errPanicked, r)
				e.logger.Debug("collector panic", "collector", en.name, "stack", string(debug.Stack()))
			}
			close(inner)
			done <- err
		}()
		err = en.c.Update(ctx, inner)
	}()
	for {
		select {
		case m, ok := <-inner:
			if !ok {
				return <-done
			}
			ch <- m
		case <-ctx.Done():
			en.mu.Lock()
			en.abandoned++
			en.mu.Unlock()
			e.logger.Debug("collector timed out; metrics it sends from now on are dropped",
				"collector", en.name, "timeout", timeout)
			go func() {
				for range inner {
				}
				en.mu.Lock()
				en.abandoned--
				en.mu.Unlock()
			}()
			return ctx.Err()
		}
	}
}
