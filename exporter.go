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
	target   string // /probe only: the probed target, for log lines
	c        collector.Collector
	problems *collector.Problems
	*runState
}

// runState outlives one run: for /metrics an entry lives as long as the
// exporter, for /probe it is kept per target across requests.
type runState struct {
	mu        sync.Mutex
	abandoned int  // runs that overran their timeout and have not returned yet
	failing   bool // the last run failed: log transitions, not every scrape
}

// NewExporter wraps built collectors. timeout bounds each collector's Update.
func NewExporter(built map[string]collector.Built, timeout time.Duration, logger *slog.Logger) *Exporter {
	e := &Exporter{logger: logger, timeout: timeout}
	for name, b := range built {
		e.entries = append(e.entries, &entry{name: name, c: b.Collector, problems: b.Problems, runState: &runState{}})
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
// per-collector timeout and sends everything to ch (the registry path; the
// /metrics and /probe handlers use gather).
func (e *Exporter) CollectWithTimeout(ch chan<- prometheus.Metric, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	send := func(m prometheus.Metric) { ch <- m }
	var wg sync.WaitGroup
	for _, en := range e.entries {
		wg.Go(func() { e.run(ctx, en, send) })
	}
	wg.Wait()
}

// gather runs every collector concurrently, all under one deadline. A
// constant metric made by collector.Metric is appended to the collector's
// own slot of consts (one per collector, in e.entries order, reused between
// scrapes), for constFamilies; any other metric (a histogram, a counter
// object) is sent to ch, a registry's, which writes it as it arrives.
func (e *Exporter) gather(timeout time.Duration, consts [][]prometheus.Metric, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, en := range e.entries {
		slot := &consts[i]
		wg.Go(func() {
			e.run(ctx, en, func(m prometheus.Metric) {
				if _, ok := collector.FamilyOf(m.Desc()); ok {
					*slot = append(*slot, m)
				} else {
					ch <- m
				}
			})
		})
	}
	wg.Wait()
}

func (e *Exporter) run(ctx context.Context, en *entry, sink func(prometheus.Metric)) {
	start := time.Now()
	err := e.update(ctx, en, sink)
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
	if failed || was {
		logger := e.logger.With("collector", en.name)
		if en.target != "" {
			logger = logger.With("target", en.target)
		}
		switch {
		case failed && !was:
			logger.Warn("collector failed; repeats are logged at debug level until it recovers",
				"duration_seconds", elapsed, "err", err)
		case failed:
			logger.Debug("collector failed", "duration_seconds", elapsed, "err", err)
		default:
			logger.Info("collector recovered")
		}
	}
	sink(scrapeDurationDesc.New(elapsed, en.name))
	sink(scrapeSuccessDesc.New(success, en.name))
	sink(en.problems.Metric())
}

var (
	errStillRunning = errors.New("the previous run overran its timeout and is still running")
	errPanicked     = errors.New("collector panicked (a bug; stack logged at debug level)")
)

// update runs one Update, passing its metrics to sink until it returns or
// ctx is done. The collector sends on a channel of its own and this
// goroutine forwards, so a collector that ignores ctx is cut off at the
// deadline: its late metrics are drained and dropped in the background.
func (e *Exporter) update(ctx context.Context, en *entry, sink func(prometheus.Metric)) error {
	en.mu.Lock()
	if en.abandoned > 0 {
		en.mu.Unlock()
		return errStillRunning
	}
	en.mu.Unlock()

	// 256 buffered metrics: a collector rarely waits for the forwarder, and
	// the two goroutines hand over in batches rather than per metric.
	inner := make(chan prometheus.Metric, 256)
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
		// Take what is buffered without a select (the common case), and
		// select only to wait.
		for n := len(inner); n > 0; n-- {
			sink(<-inner)
		}
		select {
		case m, ok := <-inner:
			if !ok {
				return <-done
			}
			sink(m)
		case <-ctx.Done():
			en.mu.Lock()
			en.abandoned++
			en.mu.Unlock()
			e.logger.Debug("collector timed out; metrics it sends from now on are dropped",
				"collector", en.name)
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
