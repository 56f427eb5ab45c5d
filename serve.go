package main

import (
	"compress/gzip"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/stall-exporter/stall_exporter/collector"
)

// Serving is client_golang's: a prometheus.Registry gathers, promhttp
// negotiates the format and encodes, continuing past what cannot be
// gathered (logged). Ours is what it lacks: the request's context, with
// Prometheus' scrape timeout, reaches every collector (Registry.Gather takes
// none, so each request binds it to a pooled scrapeRun, the gatherer of its
// own promhttp handler); a concurrency limit that counts and logs what it
// refuses; and, because docs/benchmarks.md measured them as needed, gzip at
// BestSpeed and the constant metrics grouped beside the registry (gather.go).

var refusedDesc = collector.NewMetric("exporter_requests_refused_total",
	"HTTP requests answered 503 because --web.max-requests (/metrics) or --web.max-probe-requests (/probe) requests were already running.",
	prometheus.CounterValue, "handler")

// scrapeTimeout returns the collectors' time limit for one request: the
// flag, lowered to Prometheus' X-Prometheus-Scrape-Timeout-Seconds minus a
// 0.5 s margin when that is shorter, so a slow collector fails on its own
// instead of failing the whole scrape.
func scrapeTimeout(r *http.Request, flag time.Duration) time.Duration {
	h := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds")
	if h == "" {
		return flag
	}
	s, err := strconv.ParseFloat(h, 64)
	if err != nil || s <= 0 {
		return flag
	}
	t := max(time.Duration(s*float64(time.Second))-500*time.Millisecond, 100*time.Millisecond)
	return min(t, flag)
}

// refusalLog counts refusals and logs them: the first at once, later ones
// as one summary line per minute at most, so a flood cannot flood the log.
type refusalLog struct {
	logger           *slog.Logger
	refused, pending atomic.Uint64 // pending: refusals since the last log line
	every            rate.Sometimes
}

func newRefusalLog(logger *slog.Logger) refusalLog {
	return refusalLog{logger: logger, every: rate.Sometimes{Interval: refusalLogInterval}}
}

// refusalLogInterval is the least time between two refusal log lines.
const refusalLogInterval = time.Minute

// count counts one refusal and, when a line is due, logs msg with args and
// the number of refusals since the last line.
func (rl *refusalLog) count(msg string, args ...any) {
	rl.refused.Add(1)
	rl.pending.Add(1)
	rl.every.Do(func() { rl.logger.Warn(msg, append(args, "count_since_last_line", rl.pending.Swap(0))...) })
}

// limiter is one handler's concurrency budget. A refused request is
// answered 503, counted in stall_exporter_requests_refused_total (the
// limiter is its prometheus.Collector), and logged through a refusalLog.
type limiter struct {
	handler string // label value: metrics, probe
	flag    string // the flag that sets the budget, for messages
	slots   chan struct{}
	refusalLog
}

// newLimiter allows n concurrent requests; n == 0 means no limit.
func newLimiter(handler, flag string, n int, logger *slog.Logger) *limiter {
	l := &limiter{handler: handler, flag: flag, refusalLog: newRefusalLog(logger)}
	if n > 0 {
		l.slots = make(chan struct{}, n)
	}
	return l
}

// acquire takes a slot, or answers 503, counts and logs the refusal and
// returns false. A true return must be followed by release.
func (l *limiter) acquire(w http.ResponseWriter, r *http.Request) bool {
	if l.slots == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.count("refusing requests over the concurrency limit (at most one line per minute; every refusal is counted in stall_exporter_requests_refused_total)",
		"handler", l.handler, "limit", cap(l.slots), "flag", l.flag, "remote", r.RemoteAddr)
	http.Error(w, "too many concurrent requests ("+l.flag+")", http.StatusServiceUnavailable)
	return false
}

func (l *limiter) release() {
	if l.slots != nil {
		<-l.slots
	}
}

func (l *limiter) Collect(ch chan<- prometheus.Metric) {
	ch <- refusedDesc.New(float64(l.refused.Load()), l.handler)
}

func (*limiter) Describe(chan<- *prometheus.Desc) {}

// scrapeHandler serves collectors through a pool of scrapeRuns. A request
// takes one or builds one; at most cap(free) are kept, which covers the
// concurrency of normal scraping (one or two Prometheus servers) without
// holding the memory of a past burst.
type scrapeHandler struct {
	timeout time.Duration // --collector.timeout
	static  []prometheus.Collector
	opts    promhttp.HandlerOpts
	free    chan *scrapeRun
}

func newScrapeHandler(timeout time.Duration, logger *slog.Logger, static ...prometheus.Collector) scrapeHandler {
	return scrapeHandler{
		timeout: timeout,
		static:  static,
		opts: promhttp.HandlerOpts{
			ErrorLog:           slog.NewLogLogger(logger.Handler(), slog.LevelError),
			ErrorHandling:      promhttp.ContinueOnError,
			DisableCompression: true, // compressed in serve
		},
		free: make(chan *scrapeRun, 4),
	}
}

// serve runs entries under the request's context, ending at
// scrapeTimeout, and writes what they and the static collectors export in
// the format and encoding the request negotiates.
func (h *scrapeHandler) serve(w http.ResponseWriter, r *http.Request, entries []*entry) {
	ctx, cancel := context.WithTimeout(r.Context(), scrapeTimeout(r, h.timeout))
	defer cancel()
	var run *scrapeRun
	select {
	case run = <-h.free:
	default:
		run = newScrapeRun(h.static...)
		run.handler = promhttp.HandlerForTransactional(run, h.opts)
	}
	run.ctx, run.entries = ctx, entries
	w.Header().Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		gz := &gzipResponse{ResponseWriter: w}
		run.handler.ServeHTTP(gz, r)
		gz.close()
	} else {
		run.handler.ServeHTTP(w, r)
	}
	run.ctx, run.entries = nil, nil
	select {
	case h.free <- run:
	default:
	}
}

// Compression is ours too: promhttp compresses at gzip's default level
// with writers kept in a sync.Pool, which every garbage collection empties;
// a new writer is about 1 MB to allocate and clear, more than compressing
// a scrape costs. At BestSpeed, with two writers kept between requests, a
// series costs 14k instructions instead of 21k (docs/benchmarks.md), for a
// body about 15 % larger.
var gzipWriters = make(chan *gzip.Writer, 2)

// gzipResponse compresses the body with a writer it takes at the first
// Write, so that a request holds one only while its body is encoded, not
// while its collectors run.
type gzipResponse struct {
	http.ResponseWriter
	z *gzip.Writer
}

func (g *gzipResponse) Write(p []byte) (int, error) {
	if g.z == nil {
		select {
		case g.z = <-gzipWriters:
			g.z.Reset(g.ResponseWriter)
		default:
			g.z, _ = gzip.NewWriterLevel(g.ResponseWriter, gzip.BestSpeed)
		}
	}
	return g.z.Write(p)
}

// close ends the compressed body and keeps the writer for a later
// request.
func (g *gzipResponse) close() {
	if g.z == nil {
		_, _ = g.Write(nil) // an empty body is still a gzip stream
	}
	_ = g.z.Close()
	select {
	case gzipWriters <- g.z:
	default:
	}
}

// acceptsGzip reports whether the request's Accept-Encoding names gzip
// (or *) with a q-value above 0; Prometheus sends "gzip".
func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(part, ";")
		if c := strings.TrimSpace(coding); c != "gzip" && c != "*" {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if v, err := strconv.ParseFloat(q, 64); !ok || err == nil && v > 0 {
			return true
		}
	}
	return false
}

// newMetricsHandler serves /metrics within limit, its own concurrency
// budget: the entries' collectors, the exporter's own process and Go
// runtime metrics (client_golang's collectors), its build info, and the
// given self-metric collectors (the refusal counters).
func newMetricsHandler(entries []*entry, timeout time.Duration, limit *limiter, logger *slog.Logger, self ...prometheus.Collector) http.Handler {
	static := append([]prometheus.Collector{
		versioncollector.NewCollector("stall_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, self...)
	h := newScrapeHandler(timeout, logger, static...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if limit.acquire(w, r) {
			defer limit.release()
			h.serve(w, r, entries)
		}
	})
}
