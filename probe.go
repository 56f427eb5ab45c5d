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

// maxProbeTarget bounds the target parameter: a host:port, URL or socket
// path is far shorter.
const maxProbeTarget = 1024

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
		http.Error(w, "too many concurrent scrapes (--web.max-requests)", http.StatusServiceUnavailable)
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
	exp := &Exporter{logger: h.logger, timeout: h.timeout, entries: []*entry{{name: module, c: c, problems: problems}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(timeoutCollector{exp: exp, timeout: scrapeTimeout(r, h.timeout)})
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}
