package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// One /metrics request, top to bottom: the handler takes a slot of its
// budget (limit.go), gives the request a deadline (scrapeTimeout), and
// answers it with a promhttp handler over a gatherer made for this request,
// a closure over its context. The gatherer runs every collector's entry
// (entry.go: the deadline, the panic and the failure log of one collector,
// around its Update) and merges what they send with the exporter's own
// metrics, gathered from one registry built at start. /probe (probe.go)
// serves one target's entry through the same scraper.
//
// The rest is client_golang's (promhttp negotiates the format, encodes, and
// continues past what cannot be gathered, logging it), except two leaves
// that docs/benchmarks.md measured as needed: gzip at BestSpeed (gzip.go)
// and the constant metrics grouped into families without a registry
// (families.go).

// ownMetrics is the registry of the exporter's own metrics, built once:
// its build info, the Go runtime's and the process's metrics
// (client_golang's collectors), and own (the budgets' refusals, the
// connection limit's counters).
func ownMetrics(own ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("stall_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(own...)
	return reg
}

// metricsHandler serves /metrics: the entries' collectors and the
// exporter's own metrics, within limit, the handler's concurrency budget.
type metricsHandler struct {
	entries []*entry
	limit   *limiter
	scraper
}

func newMetricsHandler(entries []*entry, own prometheus.Gatherer, limit *limiter, timeout scrapeTimeout, logger *slog.Logger) *metricsHandler {
	return &metricsHandler{entries: entries, limit: limit, scraper: newScraper(own, timeout, logger)}
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.limit.acquire(w, r) {
		return
	}
	defer h.limit.release()
	h.serve(w, r, h.entries)
}

// scrapeTimeout is the one rule for how long the collectors of a request
// may run: limit (--collector.timeout), lowered to Prometheus' scrape
// timeout (the X-Prometheus-Scrape-Timeout-Seconds header) minus offset
// (--web.timeout-offset) when that is shorter, at least 0.1 s, so a slow
// collector fails on its own instead of failing the whole scrape. Within
// it, the collectors of remote targets end their requests a little earlier
// still (collector.ScrapeDeadline), to send what they did gather.
type scrapeTimeout struct {
	limit, offset time.Duration
}

// of returns the collectors' time limit for r; a header that is not a
// positive number of seconds is ignored.
func (t scrapeTimeout) of(r *http.Request) time.Duration {
	s, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64)
	if err != nil || s <= 0 {
		return t.limit
	}
	header := max(time.Duration(s*float64(time.Second))-t.offset, 100*time.Millisecond)
	return min(header, t.limit)
}

// scraper answers one scrape of a list of entries: /metrics' (with the
// exporter's own metrics) and /probe's (one target's entry).
type scraper struct {
	own     prometheus.Gatherer // nil for /probe
	timeout scrapeTimeout
	opts    promhttp.HandlerOpts
	// free keeps a few scratches between requests: enough for the
	// concurrency of normal scraping (one or two Prometheus servers),
	// without holding the memory of a past burst.
	free chan *scratch
}

func newScraper(own prometheus.Gatherer, timeout scrapeTimeout, logger *slog.Logger) scraper {
	return scraper{
		own:     own,
		timeout: timeout,
		opts: promhttp.HandlerOpts{
			ErrorLog:           slog.NewLogLogger(logger.Handler(), slog.LevelError),
			ErrorHandling:      promhttp.ContinueOnError,
			DisableCompression: true, // compressed by ours (gzip.go)
		},
		free: make(chan *scratch, 4),
	}
}

// serve runs entries under r's context until the scrapeTimeout and answers
// with their metrics and the own ones, in the format and encoding r
// negotiates. The promhttp handler is made for the request, as
// mysqld_exporter makes one, so that the context reaches the collectors
// in a closure (prometheus.Gatherer.Gather takes none).
func (s *scraper) serve(w http.ResponseWriter, r *http.Request, entries []*entry) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout.of(r))
	defer cancel()
	gatherer := transactional(func() ([]*dto.MetricFamily, func(), error) { return s.gather(ctx, entries) })
	compressed(promhttp.HandlerForTransactional(gatherer, s.opts), w, r)
}

// gather runs entries under ctx and returns every family, sorted by name:
// the entries' and the own registry's, merged. The error lists what a
// registry would have refused (a series sent twice, descriptors of one
// name that disagree), which is left out. done gives the request's scratch
// back to the pool; the families stay valid after it.
func (s *scraper) gather(ctx context.Context, entries []*entry) (mfs []*dto.MetricFamily, done func(), err error) {
	sc := s.take()
	sc.collect(ctx, entries)
	var gathered [][]*dto.MetricFamily
	var errs prometheus.MultiError
	gatherFrom := func(g prometheus.Gatherer) {
		families, gatherErr := g.Gather()
		gathered = append(gathered, families)
		if multi := (prometheus.MultiError{}); errors.As(gatherErr, &multi) {
			errs = append(errs, multi...)
		} else if gatherErr != nil {
			errs = append(errs, gatherErr)
		}
	}
	if s.own != nil {
		gatherFrom(s.own)
	}
	if len(sc.rest) > 0 {
		// What the constant grouping cannot take goes through a registry.
		reg := prometheus.NewRegistry()
		reg.MustRegister(metricList(sc.rest))
		gatherFrom(reg)
	}
	mfs = sc.consts.families(gathered...)
	errs = append(errs, sc.consts.errs...)
	return mfs, func() { s.put(sc) }, errs.MaybeUnwrap()
}

func (s *scraper) take() *scratch {
	select {
	case sc := <-s.free:
		return sc
	default:
		return &scratch{}
	}
}

func (s *scraper) put(sc *scratch) {
	clear(sc.rest) // drop the metrics, keep the array
	sc.rest = sc.rest[:0]
	select {
	case s.free <- sc:
	default:
	}
}

// scratch is the memory of one scrape, kept for later ones: each entry's
// array of metrics, the grouping of the constant ones (families.go), and
// the others (histograms and vectors the collectors keep), for a registry.
type scratch struct {
	slots  [][]prometheus.Metric
	consts constFamilies
	rest   []prometheus.Metric
}

// collect runs entries concurrently under ctx and sorts what they send
// into consts and rest.
func (sc *scratch) collect(ctx context.Context, entries []*entry) {
	sc.consts.reset()
	if n := len(entries); len(sc.slots) < n {
		sc.slots = append(sc.slots, make([][]prometheus.Metric, n-len(sc.slots))...)
	}
	var wg sync.WaitGroup
	for i, en := range entries {
		wg.Go(func() { en.run(ctx, &sc.slots[i]) })
	}
	wg.Wait()
	for i := range entries {
		for _, m := range sc.slots[i] {
			if !sc.consts.add(m) {
				sc.rest = append(sc.rest, m)
			}
		}
		clear(sc.slots[i]) // drop the metrics, keep the array
		sc.slots[i] = sc.slots[i][:0]
	}
}

// transactional is a prometheus.TransactionalGatherer made of a function.
type transactional func() ([]*dto.MetricFamily, func(), error)

func (f transactional) Gather() ([]*dto.MetricFamily, func(), error) { return f() }

// metricList is an unchecked prometheus.Collector of fixed metrics (what
// the collectors send depends on the host and the target, so nothing is
// described in advance).
type metricList []prometheus.Metric

func (metricList) Describe(chan<- *prometheus.Desc) {}

func (l metricList) Collect(ch chan<- prometheus.Metric) {
	for _, m := range l {
		ch <- m
	}
}
