package main

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
)

// maxProbeTarget bounds the target parameter: a host:port, URL or socket
// path is far shorter.
const maxProbeTarget = 1024

// probeHandler serves /probe?module=<module>&target=<target>: one remote
// instance scraped on demand, for Prometheus multi-target configurations.
// The module's factory decides which targets are allowed; a refused target
// gets 403 and no connection is attempted.
type probeHandler struct {
	scrapeHandler
	paths collector.Paths
	limit *limiter

	mu       sync.Mutex
	problems map[string]*collector.Problems // one bad-input counter per module, kept across requests
	states   map[probeKey]*runState         // per target: failure logging and stuck runs, across requests
}

type probeKey struct{ module, target string }

// maxProbeStates bounds the per-target state map; targets are bounded by the
// allowlists, this only guards against an allowlist pattern that matches
// many spellings.
const maxProbeStates = 4096

func newProbeHandler(paths collector.Paths, timeout time.Duration, limit *limiter, logger *slog.Logger) *probeHandler {
	return &probeHandler{
		scrapeHandler: scrapeHandler{timeout: timeout, logger: logger, states: newScrapeStates()},
		paths:         paths,
		limit:         limit,
	}
}

func (h *probeHandler) moduleProblems(module string) *collector.Problems {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.problems == nil {
		h.problems = map[string]*collector.Problems{}
	}
	p, ok := h.problems[module]
	if !ok {
		p = collector.NewProblems(module, h.logger.With("probe", module))
		h.problems[module] = p
	}
	return p
}

// state returns the run state of one target, so that a target that keeps
// failing is logged at warn level once, not on every probe, and a run stuck
// past its timeout makes the next probes of that target fail fast.
func (h *probeHandler) state(module, target string) *runState {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := probeKey{module, target}
	st, ok := h.states[k]
	if !ok {
		if h.states == nil || len(h.states) >= maxProbeStates {
			h.states = map[probeKey]*runState{}
		}
		st = &runState{}
		h.states[k] = st
	}
	return st
}

func (h *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	module := q.Get("module")
	factory, ok := collector.Probe(module)
	if !ok {
		http.Error(w, "unknown or missing module (module=redis|rocketmq)", http.StatusBadRequest)
		return
	}
	switch targets := q["target"]; {
	case len(targets) != 1 || targets[0] == "":
		http.Error(w, "want exactly one non-empty target parameter", http.StatusBadRequest)
		return
	case len(targets[0]) > maxProbeTarget:
		http.Error(w, "target longer than 1024 bytes", http.StatusBadRequest)
		return
	}
	target := q.Get("target")
	if !h.limit.acquire() {
		h.limit.refuse(w, r)
		return
	}
	defer h.limit.release()
	problems := h.moduleProblems(module)
	c, err := factory(collector.Config{Paths: h.paths, Logger: h.logger.With("probe", module), Problems: problems}, target)
	if errors.Is(err, collector.ErrTargetNotAllowed) {
		// The reason names the allowlist flag; the target itself is not
		// echoed back.
		h.logger.Debug("probe target refused", "module", module, "err", err)
		http.Error(w, "target not allowed by configuration", http.StatusForbidden)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	en := &entry{name: module, target: target, c: c, problems: problems, runState: h.state(module, target)}
	h.serve(w, r, &Exporter{logger: h.logger, timeout: h.timeout, entries: []*entry{en}})
}
