package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The scrape path is promhttp.HandlerFor's, built from the same parts: a
// prometheus.Registry gathers, expfmt negotiates the format and encodes,
// gzip compresses when the client prefers it (promhttp's rule). It differs
// where the exporter needs it to: every collector runs under the request's
// own timeout (Prometheus' X-Prometheus-Scrape-Timeout-Seconds), so the
// registry is taken from a small pool per request instead of being one
// shared registry; the body is encoded into a buffer first, so an
// uncompressed answer carries Content-Length; and gzip runs at BestSpeed
// with its writers kept between requests (docs/benchmarks.md has the cost
// of each).

var refusedDesc = collector.NewMetric("exporter_requests_refused_total",
	"HTTP requests answered 503 because --web.max-requests (/metrics) or --web.max-probe-requests (/probe) requests were already running.",
	prometheus.CounterValue, "handler")

var (
	connsRefusedDesc = collector.NewMetric("exporter_connections_refused_total",
		"HTTP connections closed when accepted because --web.max-connections connections were open, all serving requests.",
		prometheus.CounterValue)
	connsEvictedDesc = collector.NewMetric("exporter_idle_connections_evicted_total",
		"Idle keep-alive HTTP connections closed to make room for a new one at --web.max-connections.",
		prometheus.CounterValue)
)

// scrapeTimeout returns the per-collector timeout for one request: the flag,
// lowered to Prometheus' X-Prometheus-Scrape-Timeout-Seconds minus a 0.5 s
// margin when that is shorter, so a slow collector fails on its own instead
// of failing the whole scrape.
func scrapeTimeout(r *http.Request, flag time.Duration) time.Duration {
	h := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds")
	if h == "" {
		return flag
	}
	s, err := strconv.ParseFloat(h, 64)
	if err != nil || s <= 0 {
		return flag
	}
	t := time.Duration(s*float64(time.Second)) - 500*time.Millisecond
	if t < 100*time.Millisecond {
		t = 100 * time.Millisecond
	}
	if t < flag {
		return t
	}
	return flag
}

// refusalLog counts refusals and logs them: the first at once, later ones
// as one summary line per minute at most, so a flood cannot flood the log.
type refusalLog struct {
	logger *slog.Logger
	now    func() time.Time

	refused atomic.Uint64

	mu       sync.Mutex
	loggedAt time.Time
	pending  uint64 // refusals since the last log line
}

// refusalLogInterval is the least time between two refusal log lines.
const refusalLogInterval = time.Minute

// count counts one refusal and logs msg with args and the number of
// refusals since the last line, when a line is due.
func (rl *refusalLog) count(msg string, args ...any) {
	rl.refused.Add(1)
	rl.mu.Lock()
	rl.pending++
	now := rl.now()
	var n uint64
	if rl.loggedAt.IsZero() || now.Sub(rl.loggedAt) >= refusalLogInterval {
		n, rl.pending, rl.loggedAt = rl.pending, 0, now
	}
	rl.mu.Unlock()
	if n > 0 {
		rl.logger.Warn(msg, append(args, "count_since_last_line", n)...)
	}
}

// limiter is one handler's concurrency budget. A refused request is
// answered 503, counted in stall_exporter_requests_refused_total, and
// logged through a refusalLog.
type limiter struct {
	handler string // label value: metrics, probe
	flag    string // the flag that sets the budget, for messages
	slots   chan struct{}
	refusalLog
}

// newLimiter allows n concurrent requests; n == 0 means no limit.
func newLimiter(handler, flag string, n int, logger *slog.Logger) *limiter {
	l := &limiter{handler: handler, flag: flag, refusalLog: refusalLog{logger: logger, now: time.Now}}
	if n > 0 {
		l.slots = make(chan struct{}, n)
	}
	return l
}

func (l *limiter) acquire() bool {
	if l.slots == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *limiter) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// refuse answers 503, counts and logs one refused request.
func (l *limiter) refuse(w http.ResponseWriter, r *http.Request) {
	l.count("refusing requests over the concurrency limit (at most one line per minute; every refusal is counted in stall_exporter_requests_refused_total)",
		"handler", l.handler, "limit", cap(l.slots), "flag", l.flag, "remote", r.RemoteAddr)
	http.Error(w, "too many concurrent requests ("+l.flag+")", http.StatusServiceUnavailable)
}

// connLimit bounds the HTTP connections open at once
// (--web.max-connections). When a new connection would pass the bound, the
// keep-alive connection that has been idle longest is closed to make room
// (counted in stall_exporter_idle_connections_evicted_total): holding idle
// connections cannot lock a scraper out. Only when every open connection
// is in the middle of a request is the new one closed as soon as it is
// accepted, before anything is read from it (counted in
// stall_exporter_connections_refused_total); requests themselves are
// bounded by --web.max-requests and --web.max-probe-requests, and request
// headers by the server's ReadHeaderTimeout. Without a bound every idle
// connection costs 11–19 KB and a file descriptor until the descriptors
// run out. Both kinds of closing are logged through a refusalLog. Use its
// connState as http.Server.ConnState.
type connLimit struct {
	max int // 0: no limit
	now func() time.Time

	mu sync.Mutex
	// conns are the open connections, each with the time it last became
	// idle; zero while it is new or serving a request.
	conns map[net.Conn]time.Time

	refusalLog            // new connections closed
	evictions  refusalLog // idle connections closed for a new one
}

func newConnLimit(n int, logger *slog.Logger) *connLimit {
	return &connLimit{max: n, now: time.Now, conns: map[net.Conn]time.Time{},
		refusalLog: refusalLog{logger: logger, now: time.Now}, evictions: refusalLog{logger: logger, now: time.Now}}
}

// connState tracks each connection from StateNew to StateClosed (or
// StateHijacked; net/http reports one of them for every connection) and
// makes room for a new connection over the bound.
func (c *connLimit) connState(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	switch state {
	case http.StateNew:
		c.conns[conn] = time.Time{}
	case http.StateIdle:
		if _, ok := c.conns[conn]; ok {
			c.conns[conn] = c.now()
		}
	case http.StateActive:
		if _, ok := c.conns[conn]; ok {
			c.conns[conn] = time.Time{}
		}
	case http.StateClosed, http.StateHijacked:
		delete(c.conns, conn)
	}
	if state != http.StateNew || c.max <= 0 || len(c.conns) <= c.max {
		c.mu.Unlock()
		return
	}
	victim := c.longestIdleLocked()
	if victim == nil {
		victim = conn
	}
	delete(c.conns, victim) // closed below; its StateClosed finds nothing
	c.mu.Unlock()
	remote := conn.RemoteAddr().String()
	if victim == conn {
		c.count("closing new connections while --web.max-connections connections are all serving requests (at most one line per minute; every one is counted in stall_exporter_connections_refused_total)",
			"limit", c.max, "flag", "--web.max-connections", "remote", remote)
	} else {
		c.evictions.count("closing the longest idle keep-alive connections to make room for new ones at --web.max-connections (at most one line per minute; every one is counted in stall_exporter_idle_connections_evicted_total)",
			"limit", c.max, "flag", "--web.max-connections", "evicted_remote", victim.RemoteAddr().String(), "new_remote", remote)
	}
	victim.Close()
}

// longestIdleLocked returns the open connection idle for the longest
// time, or nil when none is idle. A scan: it runs only at the bound, over
// at most --web.max-connections entries. c.mu must be held.
func (c *connLimit) longestIdleLocked() net.Conn {
	var victim net.Conn
	var since time.Time
	for conn, idle := range c.conns {
		if !idle.IsZero() && (victim == nil || idle.Before(since)) {
			victim, since = conn, idle
		}
	}
	return victim
}

// open is the number of connections counted as open.
func (c *connLimit) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// refusals exports the refusal counters of the given limiters and of the
// connection limit (none when conns is nil).
func refusals(conns *connLimit, ls ...*limiter) prometheus.Collector {
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		for _, l := range ls {
			refusedDesc.Send(ch, float64(l.refused.Load()), l.handler)
		}
		if conns != nil {
			connsRefusedDesc.Send(ch, float64(conns.refused.Load()))
			connsEvictedDesc.Send(ch, float64(conns.evictions.refused.Load()))
		}
	})
}

// exporterRun is one request's exporter and collector timeout, as an
// unchecked prometheus.Collector (the series each collector exports depend
// on the host and the target). It hands the registry only what
// constFamilies cannot group; the constant metrics stay in consts.
type exporterRun struct {
	exp     *Exporter
	timeout time.Duration
	consts  [][]prometheus.Metric
}

func (*exporterRun) Describe(chan<- *prometheus.Desc) {}

func (r *exporterRun) Collect(ch chan<- prometheus.Metric) {
	if n := len(r.exp.entries); len(r.consts) < n {
		r.consts = append(r.consts, make([][]prometheus.Metric, n-len(r.consts))...)
	}
	r.exp.gather(r.timeout, r.consts[:len(r.exp.entries)], ch)
}

// scrapeState is what one request uses and the next one reuses: a
// registry (registering the Go collector costs more than gathering it),
// the run it gathers, the grouping of the run's constant metrics, and the
// encoding buffer.
type scrapeState struct {
	reg    *prometheus.Registry
	run    exporterRun
	consts constFamilies
	buf    bytes.Buffer
}

// scrapeStates keeps scrapeStates for reuse. A request takes one or builds
// one; at most cap(free) are kept, which covers the concurrency of normal
// scraping (one or two Prometheus servers) without holding the memory of a
// past burst.
type scrapeStates struct {
	free   chan *scrapeState
	static []prometheus.Collector // registered in every registry besides the run
}

func newScrapeStates(static ...prometheus.Collector) *scrapeStates {
	return &scrapeStates{free: make(chan *scrapeState, 4), static: static}
}

func (p *scrapeStates) get() *scrapeState {
	select {
	case st := <-p.free:
		return st
	default:
	}
	st := &scrapeState{reg: prometheus.NewRegistry()}
	st.reg.MustRegister(&st.run)
	st.reg.MustRegister(p.static...)
	return st
}

func (p *scrapeStates) put(st *scrapeState) {
	st.run.exp = nil
	for i := range st.run.consts {
		clear(st.run.consts[i]) // drop the references, keep the arrays
		st.run.consts[i] = st.run.consts[i][:0]
	}
	st.consts.reset()
	st.buf.Reset()
	select {
	case p.free <- st:
	default:
	}
}

// gather runs exp's collectors under timeout and returns the families of
// everything: the registry gathers the static collectors and what the
// collectors send besides constant metrics, constFamilies groups the
// constant metrics, and the two are merged. errs are what a registry would
// have reported; what they name is left out.
func (st *scrapeState) gather(exp *Exporter, timeout time.Duration) (mfs []*dto.MetricFamily, errs []error) {
	st.run.exp, st.run.timeout = exp, timeout
	theirs, err := st.reg.Gather()
	if err != nil {
		var multi prometheus.MultiError
		if !errors.As(err, &multi) {
			multi = prometheus.MultiError{err}
		}
		errs = append(errs, multi...)
	}
	for _, ms := range st.run.consts {
		for _, m := range ms {
			st.consts.add(m)
		}
	}
	mfs = st.consts.merge(st.consts.families(), theirs)
	return mfs, append(errs, st.consts.errs...)
}

// gzipWriters keeps two gzip writers between requests. A flate writer is
// about 1 MB of state; sync.Pool (what promhttp uses) drops it at every
// garbage collection, and allocating a new one costs more than compressing
// a scrape.
var gzipWriters = make(chan *gzip.Writer, 2)

// scrapeHandler serves one exporter's collectors: /metrics, and each
// /probe request with an exporter of its own.
type scrapeHandler struct {
	timeout time.Duration
	logger  *slog.Logger
	states  *scrapeStates
}

// serve gathers exp's collectors (and the handler's static collectors)
// under the request's timeout and writes the exposition in the format and
// encoding the request negotiates. Like promhttp with ContinueOnError, what
// could not be gathered or encoded is logged and left out, and the rest is
// served.
func (h *scrapeHandler) serve(w http.ResponseWriter, r *http.Request, exp *Exporter) {
	st := h.states.get()
	defer h.states.put(st)
	mfs, errs := st.gather(exp, scrapeTimeout(r, h.timeout))
	for _, err := range errs {
		h.logger.Error("error gathering metrics", "err", err)
	}
	if len(mfs) == 0 && len(errs) > 0 {
		http.Error(w, "An error has occurred while gathering metrics:\n\n"+errors.Join(errs...).Error(), http.StatusInternalServerError)
		return
	}

	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
	var names map[string]bool // promhttp's name[] filter
	if r.URL != nil && r.URL.RawQuery != "" {
		if ns := r.URL.Query()["name[]"]; len(ns) > 0 {
			names = make(map[string]bool, len(ns))
			for _, n := range ns {
				names[n] = true
			}
		}
	}
	enc := expfmt.NewEncoder(&st.buf, format)
	for _, mf := range mfs {
		if names != nil && !names[mf.GetName()] {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			h.logger.Error("error encoding metric family", "family", mf.GetName(), "err", err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			h.logger.Error("error finishing the exposition", "err", err)
		}
	}
	body := st.buf.Bytes()

	hdr := w.Header()
	hdr.Add("Vary", "Accept")
	hdr.Add("Vary", "Accept-Encoding")
	hdr.Set("Content-Type", string(format))
	if !acceptsGzip(r) {
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
		return
	}
	hdr.Set("Content-Encoding", "gzip")
	var z *gzip.Writer
	select {
	case z = <-gzipWriters:
		z.Reset(w)
	default:
		// BestSpeed: less than half the default level's instructions for a
		// body ~18 % larger, and none of its 640 KB table clearing per
		// request (docs/benchmarks.md).
		z, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
	}
	_, _ = z.Write(body)
	_ = z.Close()
	select {
	case gzipWriters <- z:
	default:
	}
}

// acceptsGzip reports whether the request's Accept-Encoding prefers gzip to
// identity, with promhttp's rule (its negotiation is internal to
// client_golang): the highest q wins, identity on a tie.
func acceptsGzip(r *http.Request) bool {
	h := r.Header.Get("Accept-Encoding")
	if h == "" {
		return false
	}
	gz, id := -1.0, -1.0
	for part := range strings.SplitSeq(h, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.TrimSpace(coding)
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				q = f
			}
		}
		switch coding {
		case "gzip":
			gz = max(gz, q)
		case "identity":
			id = max(id, q)
		case "*":
			gz, id = max(gz, q), max(id, q)
		}
	}
	return gz > 0 && gz > id
}

// metricsHandler serves /metrics.
type metricsHandler struct {
	scrapeHandler
	exp   *Exporter
	limit *limiter
}

// newMetricsHandler serves /metrics: exp's collectors, the exporter's own
// process and Go runtime metrics (client_golang's collectors), its build
// info, and the given self-metric collectors (the refusal counters).
// limit is /metrics' own concurrency budget.
func newMetricsHandler(exp *Exporter, timeout time.Duration, limit *limiter, logger *slog.Logger, self ...prometheus.Collector) http.Handler {
	return &metricsHandler{
		scrapeHandler: scrapeHandler{
			timeout: timeout,
			logger:  logger,
			states: newScrapeStates(append([]prometheus.Collector{
				versioncollector.NewCollector("stall_exporter"),
				collectors.NewGoCollector(),
				collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			}, self...)...),
		},
		exp:   exp,
		limit: limit,
	}
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.limit.acquire() {
		h.limit.refuse(w, r)
		return
	}
	defer h.limit.release()
	h.serve(w, r, h.exp)
}
