package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/probecache"
)

// maxProbeTarget bounds the target parameter: a host:port, URL or socket
// path is far shorter.
const maxProbeTarget = 1024

// probeLimits bound what /probe keeps between requests, for every module
// together (collector/probecache): a target's collector (Redis' CONFIG
// cache, CLIENT LIST schedule and aggregates, a broker's put-latency
// histograms and config) for 10 minutes after its last probe, at most 1,000
// targets; its connections only while it is among the 64 most recently
// probed and was probed in the last 2 minutes (a scrape interval is rarely
// over a minute). The others connect again at their next probe, as
// redis_exporter does on every scrape; docs/redis.md and docs/rocketmq.md
// measure the cost.
var probeLimits = probecache.Limits{MaxTargets: 1000, Idle: 10 * time.Minute, MaxConns: 64, ConnIdle: 2 * time.Minute}

// probeHandler serves /probe?module=<module>&target=<target>: one remote
// instance scraped on demand, for Prometheus multi-target configurations.
// The module decides which targets are allowed; a refused target gets 403
// with the module's reason (the flag that would allow it, never the
// allowlist's entries) and no connection is attempted. With &debug=true
// (or any form strconv.ParseBool reads as true; another value is a 400) the
// answer is, instead of the exposition, the probe's log lines at debug
// level in the main log's format and its metrics as text, for a person
// checking a target.
type probeHandler struct {
	scraper
	paths    collector.Paths
	limit    *limiter
	logger   *slog.Logger
	debugLog func(io.Writer) *slog.Logger // a logger at debug level in --log.format
	modules  map[string]collector.ProbeModule
	names    string                         // "redis|rocketmq", for the 400 answer
	problems map[string]*collector.Problems // one bad-input counter per module
	targets  *probecache.Cache[probeKey, *entry]
}

type probeKey struct{ module, target string }

// newProbeHandler serves modules; debugLog makes the logger of a
// &debug=true probe, writing to the answer's buffer.
func newProbeHandler(modules map[string]collector.ProbeModule, paths collector.Paths, timeout scrapeTimeout, limit *limiter, logger *slog.Logger, debugLog func(io.Writer) *slog.Logger) *probeHandler {
	h := &probeHandler{
		scraper:  newScraper(nil, timeout, logger),
		paths:    paths,
		limit:    limit,
		logger:   logger,
		debugLog: debugLog,
		modules:  modules,
		names:    strings.Join(slices.Sorted(maps.Keys(modules)), "|"),
		problems: map[string]*collector.Problems{},
		targets:  probecache.New[probeKey, *entry](probeLimits),
	}
	for m := range modules {
		h.problems[m] = collector.NewProblems(m, logger.With("probe", m))
	}
	return h
}

func (h *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	module := q.Get("module")
	m, ok := h.modules[module]
	if !ok {
		http.Error(w, "unknown or missing module (module="+h.names+")", http.StatusBadRequest)
		return
	}
	targets := q["target"]
	switch {
	case len(targets) != 1 || targets[0] == "":
		http.Error(w, "want exactly one non-empty target parameter", http.StatusBadRequest)
		return
	case len(targets[0]) > maxProbeTarget:
		http.Error(w, "target longer than 1024 bytes", http.StatusBadRequest)
		return
	}
	debug := false
	if d := q["debug"]; len(d) > 0 {
		var err error
		if debug, err = strconv.ParseBool(d[0]); err != nil || len(d) > 1 {
			http.Error(w, "debug must be given once, as true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)", http.StatusBadRequest)
			return
		}
	}
	if !h.limit.acquire(w, r) {
		return
	}
	defer h.limit.release()
	key, build, err := m.Target(targets[0])
	if errors.Is(err, collector.ErrTargetNotAllowed) {
		// The module's reason names the flag that would allow the target;
		// the target itself is logged, not echoed back. Debug level: a
		// scanner's requests would otherwise flood the log.
		h.logger.Debug("probe target refused", "module", module, "target", targets[0], "err", err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if debug {
		h.debug(w, r, module, key, build)
		return
	}
	en := h.targets.Get(probeKey{module, key}, func() *entry {
		return h.newTarget(module, key, build, h.logger, h.problems[module])
	})
	h.serve(w, r, []*entry{en})
}

// newTarget is the entry of one target's collector, which build makes.
func (h *probeHandler) newTarget(module, key string, build func(collector.Config) collector.Collector, logger *slog.Logger, problems *collector.Problems) *entry {
	c := build(collector.Config{Paths: h.paths, Logger: logger.With("probe", module), Problems: problems})
	return newEntry(module, c, problems, logger.With("collector", module, "target", key))
}

// debug probes the target once with a collector of its own, not the
// cached one — the same allowlist, reply limits and timeout, but its own
// connection and a logger at debug level, in the main log's format, into a
// buffer — closes it, and answers the log lines (the probe's own steps and
// what the collector logged) and the metrics in the text format. What the
// collectors log carries no secret (passwords are never logged), so
// neither does the answer.
func (h *probeHandler) debug(w http.ResponseWriter, r *http.Request, module, key string, build func(collector.Config) collector.Collector) {
	logs := &logBuffer{}
	logger := h.debugLog(logs)
	timeout := h.timeout.of(r)
	logger.Debug("probe target allowed", "module", module, "target", key, "timeout", timeout)
	en := h.newTarget(module, key, build, logger, collector.NewProblems(module, logger.With("probe", module)))
	defer func() { go en.Close() }() // in the background: Close waits for a run that overran its deadline

	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	start := time.Now()
	mfs, done, err := h.gather(ctx, []*entry{en})
	defer done()
	args := []any{"module", module, "target", key, "duration", time.Since(start), "metric_families", len(mfs)}
	if err != nil {
		args = append(args, "err", err)
	}
	logger.Debug("probe finished", args...)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "Logs for the probe of %s target %s:\n%s\n", module, key, logs.String())
	if err != nil {
		fmt.Fprintf(w, "Errors gathering the metrics:\n%v\n\n", err)
	}
	fmt.Fprint(w, "Metrics that would have been returned:\n")
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			fmt.Fprintf(w, "# error encoding %s: %v\n", mf.GetName(), err)
		}
	}
}

// logBuffer keeps the log lines of one debug probe for its answer. A run
// abandoned at its deadline may still log while the answer reads them,
// hence the lock.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
