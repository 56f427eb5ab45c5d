// Package rocketmq is the rocketmq collector. It reads Apache RocketMQ
// brokers over the remoting protocol (collector/rocketmq/remoting):
// GET_BROKER_CLUSTER_INFO (106) from the name servers to find every broker,
// masters and slaves; GET_BROKER_RUNTIME_INFO (28) from each broker at every
// scrape and, for the CommitLog lock-hold time, every
// --rocketmq.sample-interval in between; GET_BROKER_CONFIG (26) every
// --rocketmq.config-interval. On the broker host it also follows store.log
// and watermark.log (--rocketmq.log-dir, see log.go). With nothing
// configured it reports no data.
//
// It registers the "rocketmq" collector and /probe module in its init, so
// main only imports it.
//
// Where things are: collector.go is the scraper and its Update, flags.go
// the flags and options, discovery.go the rounds that ask the name servers
// and topology.go the set of brokers they change, broker.go one broker's
// scrape and state, runtime.go its runtime-info keys as metrics
// (metrics.go declares them), parse.go the value parsers, sampler.go the
// background lock sampler, reasons.go why a broker is down, log.go and
// loglines.go the broker log follower (over internal/logfollow), probe.go
// the /probe module.
package rocketmq

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

func init() {
	collector.Register("rocketmq",
		"RocketMQ broker put latency, CommitLog lock hold, send queue and config, from the brokers' remoting API (--rocketmq.namesrv, --rocketmq.broker) and store.log/watermark.log",
		true, newCollector)
	collector.RegisterProbe("rocketmq", probe)
}

// newCollector builds the collector from the --rocketmq.* flags; a bad
// flag value is an error: the exporter refuses to start.
func newCollector(cfg collector.Config) (collector.Collector, error) {
	opts, err := flags.validateMetrics()
	if err != nil {
		return nil, err
	}
	logWatched(cfg.Logger, opts)
	return newScraper(cfg, opts), nil
}

// logWatched says at start what the /metrics collector will poll and
// follow, so that a missing flag is seen in the log rather than guessed
// from absent series (a /probe-only exporter says so too).
func logWatched(logger *slog.Logger, opts options) {
	if len(opts.Namesrv) == 0 && len(opts.Brokers) == 0 && opts.LogDir == "" {
		logger.Info("rocketmq: no targets (--rocketmq.namesrv, --rocketmq.broker, --rocketmq.log-dir); the collector exports no broker series, /probe is unaffected")
		return
	}
	logger.Info("rocketmq: watching", "namesrv", strings.Join(opts.Namesrv, ","), "brokers", strings.Join(opts.Brokers, ","), "log_dir", opts.LogDir)
}

// scraper scrapes a set of brokers and optionally follows the broker logs.
type scraper struct {
	cfg  collector.Config
	opts options
	logs *logFollower

	mu            sync.Mutex
	brokers       map[brokerKey]*broker          // discovered by cluster, name and id; named directly by address
	sharedAddrs   map[string]*collector.StateLog // by address and the brokers announced there, while several are
	namesrvs      map[string]*namesrv            // by address
	lastDiscovery time.Time                      // start of the last discovery round
	discovered    bool                           // some round got an answer
	discovering   chan struct{}                  // closed when the running round ends; nil when none runs
	ready         chan struct{}                  // closed at the running round's first answer or its end
	roundWaited   bool                           // a scrape has waited for the running round
	roundFailed   bool                           // no name server answered the last finished round
}

func newScraper(cfg collector.Config, opts options) *scraper {
	c := &scraper{cfg: cfg, opts: opts,
		brokers: map[brokerKey]*broker{}, sharedAddrs: map[string]*collector.StateLog{}, namesrvs: map[string]*namesrv{}}
	for _, addr := range opts.Namesrv {
		c.namesrvs[addr] = &namesrv{
			client: remoting.NewClient(addr, remoting.Options{Timeout: opts.Timeout, MaxFrame: opts.MaxFrame,
				Budget: replyBudget(opts.MaxFrame), Dial: opts.dial}),
			state: collector.NewStateLog(cfg.Logger.With("namesrv", addr)),
		}
	}
	for _, a := range opts.Brokers {
		c.brokers[brokerKey{direct: a}] = c.newBroker(a, true, [3]string{"", collector.Label(a), ""})
	}
	if opts.LogDir != "" {
		c.logs = newLogFollower(cfg.Paths.Root(opts.LogDir), cfg.Problems, cfg.Logger)
	}
	return c
}

func (c *scraper) newBroker(addr string, direct bool, labels [3]string) *broker {
	logger := c.cfg.Logger.With("broker", addr)
	b := &broker{
		addr: addr, direct: direct, labels: labels,
		lockCounts: make([]uint64, len(lockBounds)+1),
		keyErrors:  map[string]uint64{},
		state:      collector.NewStateLog(logger), configState: collector.NewStateLog(logger),
		listing: collector.NewStateLog(logger),
	}
	b.client = remoting.NewClient(addr, remoting.Options{Timeout: c.opts.Timeout, MaxFrame: c.opts.MaxFrame,
		Budget: replyBudget(c.opts.MaxFrame), OnBudget: func() { b.budgetRefused.Add(1) },
		Credentials: c.opts.Credentials, Dial: c.opts.dial})
	return b
}

// replyBudgetMin is the smallest replyBudget.
const replyBudgetMin = 8 << 20

var (
	budgetsMu sync.Mutex
	budgets   = map[int]*remote.Budget{}
)

// replyBudget returns the budget shared by every client whose frame limit
// is maxFrame — in the exporter, every client: --rocketmq.max-frame-bytes
// is one value. Its size is twice the frame limit, or replyBudgetMin if
// more: a frame's buffers add up to less than twice its size (readFrame),
// so a frame at the limit always fits once the others give their bytes
// back.
func replyBudget(maxFrame int) *remote.Budget {
	budgetsMu.Lock()
	defer budgetsMu.Unlock()
	b := budgets[maxFrame]
	if b == nil {
		b = remote.NewBudget(max(replyBudgetMin, 2*int64(maxFrame)))
		budgets[maxFrame] = b
	}
	return b
}

// closeIdle closes the connections of the brokers and name servers that
// no request is using, keeping everything else, and reports whether it
// closed them all; the next scrape dials again. /probe calls it
// (probecache Hooks.DropConn) for brokers it has not probed lately.
func (c *scraper) closeIdle() bool {
	all := true
	for _, cl := range c.clients() {
		all = cl.CloseIdle() && all
	}
	return all
}

// close closes the connections, each once its request in progress ends;
// later requests fail. /probe calls it for a target it drops.
func (c *scraper) close() {
	for _, cl := range c.clients() {
		cl.Close()
	}
}

func (c *scraper) clients() []*remoting.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	clients := make([]*remoting.Client, 0, len(c.brokers)+len(c.namesrvs))
	for _, b := range c.brokers {
		clients = append(clients, b.client)
	}
	for _, ns := range c.namesrvs {
		clients = append(clients, ns.client)
	}
	return clients
}

func (c *scraper) remoteConfigured() bool {
	return len(c.opts.Namesrv) > 0 || len(c.opts.Brokers) > 0
}

// Update implements Collector. Every broker is asked concurrently, each
// under one budget for its whole scrape (collector.ScrapeDeadline), so the scrape
// takes at most about --rocketmq.timeout whatever the brokers and name
// servers do. A broker that does not answer reports stall_rocketmq_up 0;
// like the redis collector, the returned error (collector success 0) names
// every broker and name server that failed, and the other brokers' series
// are still sent.
func (c *scraper) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if !c.remoteConfigured() && c.logs == nil {
		return collector.ErrNoData
	}
	if c.logs != nil {
		c.logs.send(ch)
	}
	if !c.remoteConfigured() {
		return nil
	}
	start := time.Now()
	deadline := collector.ScrapeDeadline(ctx, start, c.opts.Timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if done, wait := c.refreshTopology(true); wait {
		// Wait for the name servers at most half the budget; after that
		// the last known brokers are scraped and the round finishes in the
		// background for the next scrape (refreshTopology says when a
		// scrape does not wait at all).
		wctx, cancel := context.WithTimeout(ctx, deadline.Sub(start)/2)
		select {
		case <-done:
		case <-wctx.Done():
		}
		cancel()
	}
	brokers := c.knownBrokers()
	errs := c.sendNamesrv(ch)
	berrs := make([]error, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		wg.Go(func() { berrs[i] = c.scrapeBroker(ctx, b, ch) })
	}
	wg.Wait()
	c.mu.Lock()
	undiscovered := len(c.opts.Namesrv) > 0 && !c.discovered
	c.mu.Unlock()
	if len(brokers) == 0 && len(errs) == 0 && undiscovered {
		errs = append(errs, errors.New("no broker known yet: the name servers have not answered"))
	}
	return errors.Join(append(errs, berrs...)...)
}
