package main

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stall-exporter/stall_exporter/collector"
)

// probeHandler serves /probe?module=<module>&target=<target>: one remote
// instance scraped on demand, for Prometheus multi-target configurations.
// The module's factory decides which targets are allowed; a refused target
// gets 403 and no connection is attempted.
type probeHandler struct {
	paths   collector.Paths
	timeout time.Duration
	logger  *slog.Logger
	limit   limiter

	mu       sync.Mutex
	problems map[string]*collector.Problems // one bad-input counter per module, kept across requests
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

func (h *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	module := r.URL.Query().Get("module")
	target := r.URL.Query().Get("target")
	factory, ok := collector.Probe(module)
	if !ok {
		http.Error(w, "unknown or missing module (module=redis|rocketmq)", http.StatusBadRequest)
		return
	}
	if target == "" {
		http.Error(w, "missing target parameter", http.StatusBadRequest)
		return
	}
	if !h.limit.acquire() {
		http.Error(w, "too many concurrent scrapes (--web.max-requests)", http.StatusServiceUnavailable)
		return
	}
	defer h.limit.release()
	problems := h.moduleProblems(module)
	c, err := factory(collector.Config{Paths: h.paths, Logger: h.logger.With("probe", module), Problems: problems}, target)
	if errors.Is(err, collector.ErrTargetNotAllowed) {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	exp := &Exporter{logger: h.logger, timeout: h.timeout, entries: []*entry{{name: module, c: c, problems: problems}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(timeoutCollector{exp: exp, timeout: scrapeTimeout(r, h.timeout)})
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
