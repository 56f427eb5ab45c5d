package main

import (
	"compress/gzip"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/expfmt"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/exposition"
)

// The scrape path. A request runs the collectors (exporter.go), writes
// their exposition.Samples straight to text, and everything else (the Go
// runtime metrics, build info, histograms) through client_golang's protobuf
// form and expfmt, merged into the one sorted exposition promhttp would
// write, without a registry. All per-request memory (sample lists, the
// output buffer, a gzip writer) is reused between requests.

var refusedDesc = collector.NewMetric("exporter_requests_refused_total",
	"HTTP requests answered 503 because the handler's concurrency budget was in use: --web.max-requests for handler=\"metrics\", --web.max-probe-requests for handler=\"probe\".",
	prometheus.CounterValue, "handler")

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

// limiter is one handler's concurrency budget. A refused request is
// answered 503, counted in stall_exporter_requests_refused_total, and
// logged: the first refusal at once, later ones as one summary line per
// minute at most, so a flood cannot flood the log.
type limiter struct {
	handler string // label value: metrics, probe
	flag    string // the flag that sets the budget, for messages
	slots   chan struct{}
	logger  *slog.Logger
	now     func() time.Time

	refused atomic.Uint64

	mu       sync.Mutex
	loggedAt time.Time
	pending  uint64 // refusals since the last log line
}

// refusalLogInterval is the least time between two refusal log lines.
const refusalLogInterval = time.Minute

// newLimiter allows n concurrent requests; n == 0 means no limit.
func newLimiter(handler, flag string, n int, logger *slog.Logger) *limiter {
	l := &limiter{handler: handler, flag: flag, logger: logger, now: time.Now}
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
	l.refused.Add(1)
	l.mu.Lock()
	l.pending++
	now := l.now()
	var n uint64
	if l.loggedAt.IsZero() || now.Sub(l.loggedAt) >= refusalLogInterval {
		n, l.pending, l.loggedAt = l.pending, 0, now
	}
	l.mu.Unlock()
	if n > 0 {
		l.logger.Warn("refusing requests over the concurrency limit (at most one line per minute; every refusal is counted in stall_exporter_requests_refused_total)",
			"handler", l.handler, "limit", cap(l.slots), "flag", l.flag, "refused_since_last_line", n, "remote", r.RemoteAddr)
	}
	http.Error(w, "too many concurrent requests ("+l.flag+")", http.StatusServiceUnavailable)
}

// collectInto runs client_golang collectors (the Go runtime metrics, build
// info) and adds what they send to sc. Collect may send any number of
// metrics, so it runs in a goroutine of its own while this one receives.
func collectInto(sc *exposition.Scrape, cs []prometheus.Collector) {
	if len(cs) == 0 {
		return
	}
	ch := make(chan prometheus.Metric, 64)
	go func() {
		defer close(ch)
		for _, c := range cs {
			c.Collect(ch)
		}
	}()
	for m := range ch {
		sc.AddMetric(m)
	}
}

// scrapeState is the reusable memory of one request.
type scrapeState struct {
	sc  exposition.Scrape
	out []collected
}

var scrapeStates = sync.Pool{New: func() any { return new(scrapeState) }}

// gzipWriters keeps two gzip writers between requests. A flate writer is
// about 1 MB of state; sync.Pool would drop it at every garbage collection
// and allocating a new one costs more than the compression.
var gzipWriters = make(chan *gzip.Writer, 2)

// scrapeHandler serves one exporter's collectors: /metrics, and each
// /probe request with an exporter of its own.
type scrapeHandler struct {
	timeout time.Duration
	logger  *slog.Logger
	self    []prometheus.Collector   // client_golang collectors of the handler's own (Go runtime, build info)
	extra   func(*exposition.Scrape) // adds samples of the handler's own (process metrics)
}

// serve runs exp's collectors under the request's timeout and writes the
// exposition in the format and encoding the request negotiates.
func (h *scrapeHandler) serve(w http.ResponseWriter, r *http.Request, exp *Exporter) {
	st := scrapeStates.Get().(*scrapeState)
	defer func() {
		st.sc.Reset()
		scrapeStates.Put(st)
	}()
	if n := len(exp.entries); len(st.out) < n {
		st.out = append(st.out, make([]collected, n-len(st.out))...)
	}
	out := st.out[:len(exp.entries)]
	exp.gather(scrapeTimeout(r, h.timeout), out)
	for i := range out {
		for _, s := range out[i].samples {
			st.sc.Add(s)
		}
		for _, m := range out[i].others {
			st.sc.AddMetric(m)
		}
		out[i].reset()
	}
	collectInto(&st.sc, h.self)
	if h.extra != nil {
		h.extra(&st.sc)
	}
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
	var names map[string]bool
	if r.URL != nil && r.URL.RawQuery != "" {
		if ns := r.URL.Query()["name[]"]; len(ns) > 0 {
			names = make(map[string]bool, len(ns))
			for _, n := range ns {
				names[n] = true
			}
		}
	}
	body, errs := st.sc.Encode(format, names)
	for _, err := range errs {
		h.logger.Error("error gathering metrics", "err", err)
	}
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
// identity, with promhttp's rule: the highest q wins, identity on a tie.
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
// process and Go runtime metrics, its build info, and the refusal counters
// of the given limiters. limit is /metrics' own concurrency budget.
func newMetricsHandler(exp *Exporter, timeout time.Duration, limit *limiter, logger *slog.Logger, refusals ...*limiter) http.Handler {
	proc := newProcessMetrics(logger)
	return &metricsHandler{
		scrapeHandler: scrapeHandler{
			timeout: timeout,
			logger:  logger,
			self: []prometheus.Collector{
				versioncollector.NewCollector("stall_exporter"),
				prometheus.NewGoCollector(),
			},
			extra: func(sc *exposition.Scrape) {
				proc.add(sc)
				for _, l := range refusals {
					sc.AddMetric(refusedDesc.New(float64(l.refused.Load()), l.handler))
				}
			},
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
