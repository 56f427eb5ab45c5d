package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// The rocketmq collector reads Apache RocketMQ brokers over the remoting
// protocol (collector/rocketmq/remoting): GET_BROKER_CLUSTER_INFO (106) from the name
// servers to find every broker, masters and slaves; GET_BROKER_RUNTIME_INFO
// (28) from each broker at every scrape and, for the CommitLog lock-hold
// time, every --rocketmq.sample-interval in between; GET_BROKER_CONFIG (26)
// every --rocketmq.config-interval. On the broker host it also follows
// store.log and watermark.log (--rocketmq.log-dir, see log.go).
// With nothing configured it reports no data.

var (
	namesrvFlag = kingpin.Flag("rocketmq.namesrv",
		"RocketMQ name server host:port to discover brokers from (GET_BROKER_CLUSTER_INFO); repeatable, or a ';'-separated list as in namesrvAddr. Masters and slaves of every cluster are scraped.").Strings()
	brokerFlag = kingpin.Flag("rocketmq.broker",
		"RocketMQ broker host:port (remoting port, usually 10911) to scrape directly, without a name server; repeatable.").Strings()
	timeoutFlag = kingpin.Flag("rocketmq.timeout",
		"Time limit of one broker's whole scrape (runtime info, plus its config when due: dial, send, reply) and of one discovery round; brokers and name servers are asked concurrently, so a scrape takes at most about this long. Also capped by the scrape's own timeout.").Default("3s").Duration()
	sampleFlag = kingpin.Flag("rocketmq.sample-interval",
		"How often pageCacheLockTimeMills is sampled between scrapes for stall_rocketmq_commitlog_lock_held_sampled_seconds; 0 disables. Each sample is one GET_BROKER_RUNTIME_INFO, which makes a 4.9.4+ broker write two INFO lines to store.log.").
		Default("1s").Duration()
	configIntervalFlag = kingpin.Flag("rocketmq.config-interval",
		"How often each broker's configuration (GET_BROKER_CONFIG) is re-read.").Default("5m").Duration()
	discoveryIntervalFlag = kingpin.Flag("rocketmq.discovery-interval",
		"How often the name servers are asked for the cluster topology.").Default("30s").Duration()
	aclFileFlag = kingpin.Flag("rocketmq.acl-file",
		"File with accessKey=… and secretKey=… lines (optionally securityToken=…) to sign requests to brokers with aclEnable=true.").String()
	maxFrameFlag = kingpin.Flag("rocketmq.max-frame-bytes",
		"Largest remoting reply frame accepted, in bytes (the broker's own limit is 16 MiB).").Default(strconv.Itoa(remoting.DefaultMaxFrame)).Int()
	probeAllowFlag = kingpin.Flag("rocketmq.probe.allowed-targets",
		"Target allowed for /probe?module=rocketmq: host:port, a host (any port), or a CIDR; repeatable. '*' allows any target. With none, /probe refuses every RocketMQ target (403).").Strings()
	logDirFlag = kingpin.Flag("rocketmq.log-dir",
		"Broker log directory (…/logs/rocketmqlogs) whose store.log and watermark.log are followed, read under --path.rootfs; empty disables.").String()
)

func init() {
	collector.Register("rocketmq", true, newCollector)
	collector.RegisterProbe("rocketmq", probe)
}

// newCollector builds the collector from the --rocketmq.* flags; a
// flag value that cannot work is an error, so the exporter refuses to
// start.
func newCollector(cfg collector.Config) (collector.Collector, error) {
	opts, err := optionsFromFlags()
	if err != nil {
		return nil, err
	}
	opts.Namesrv, opts.Brokers, opts.LogDir = splitAddrs(*namesrvFlag), splitAddrs(*brokerFlag), *logDirFlag
	for _, a := range opts.Namesrv {
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("--rocketmq.namesrv: %w", err)
		}
	}
	for _, a := range opts.Brokers {
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("--rocketmq.broker: %w", err)
		}
	}
	return newScraper(cfg, opts), nil
}

// splitAddrs accepts repeated flags and RocketMQ's own list form
// ("10.0.0.9:9876;10.0.0.10:9876", as in namesrvAddr), dropping duplicates.
func splitAddrs(values []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, a := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// checkHostPort checks a --rocketmq.broker or --rocketmq.namesrv value:
// host:port with a non-empty host and a port 1–65535.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("%q: want host:port, the host is empty", a)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: port %q is not a number 1-65535", a, port)
	}
	return nil
}

// checkAllowed checks the /probe allowlist entries: "*", host:port, a
// bare host, or a CIDR.
func checkAllowed(allow []string) error {
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			return errors.New("empty entry")
		case a == "*":
		case strings.Contains(a, "/"):
			if _, err := netip.ParsePrefix(a); err != nil {
				return fmt.Errorf("%q is not a CIDR: %w", a, err)
			}
		case strings.ContainsAny(a, " \t"):
			return fmt.Errorf("%q: want host:port, a host, a CIDR or '*'", a)
		default:
			if _, _, err := net.SplitHostPort(a); err == nil {
				if err := checkHostPort(a); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Limits of --rocketmq.max-frame-bytes: a 5.x runtime-info reply alone is
// about 3 KB and cluster info grows with the brokers, so less than 64 KiB
// only makes requests fail; more than 1 GiB is no limit at all.
const (
	minFrame = 64 << 10
	maxFrame = 1 << 30
)

func optionsFromFlags() (options, error) {
	opts := options{
		Timeout:           *timeoutFlag,
		SampleInterval:    *sampleFlag,
		ConfigInterval:    *configIntervalFlag,
		DiscoveryInterval: *discoveryIntervalFlag,
		MaxFrame:          *maxFrameFlag,
	}
	if err := opts.validate(); err != nil {
		return opts, err
	}
	if err := checkAllowed(*probeAllowFlag); err != nil {
		return opts, fmt.Errorf("--rocketmq.probe.allowed-targets: %w", err)
	}
	if *aclFileFlag != "" {
		cr, err := remoting.LoadCredentials(*aclFileFlag)
		if err != nil {
			return opts, fmt.Errorf("--rocketmq.acl-file: %w", err)
		}
		opts.Credentials = cr
	}
	return opts, nil
}

// options is the parsed configuration of one rocketmq collector.
type options struct {
	Namesrv           []string
	Brokers           []string
	LogDir            string
	Timeout           time.Duration
	SampleInterval    time.Duration
	ConfigInterval    time.Duration
	DiscoveryInterval time.Duration
	MaxFrame          int
	Credentials       *remoting.Credentials
}

// validate rejects settings that cannot work.
func (o options) validate() error {
	switch {
	case o.Timeout <= 0:
		return fmt.Errorf("--rocketmq.timeout must be positive, got %s", o.Timeout)
	case o.SampleInterval < 0:
		return fmt.Errorf("--rocketmq.sample-interval must be 0 (off) or positive, got %s", o.SampleInterval)
	case o.ConfigInterval <= 0:
		return fmt.Errorf("--rocketmq.config-interval must be positive, got %s", o.ConfigInterval)
	case o.DiscoveryInterval <= 0:
		return fmt.Errorf("--rocketmq.discovery-interval must be positive, got %s", o.DiscoveryInterval)
	case o.MaxFrame < minFrame || o.MaxFrame > maxFrame:
		return fmt.Errorf("--rocketmq.max-frame-bytes must be between %d and %d, got %d", minFrame, maxFrame, o.MaxFrame)
	}
	return nil
}

var brokerLabels = []string{"cluster", "broker", "broker_id"}

func brokerMetric(name, help string, typ prometheus.ValueType, extra ...string) collector.Metric {
	return collector.NewMetric("rocketmq_"+name, help, typ, append(append([]string(nil), brokerLabels...), extra...)...)
}

var (
	upDesc = brokerMetric("up",
		"1 if the broker answered GET_BROKER_RUNTIME_INFO (request 28) in this scrape within --rocketmq.timeout (and the scrape timeout), else 0. The config read does not affect it.", prometheus.GaugeValue)
	infoDesc = brokerMetric("broker_info",
		"Broker identity (always 1): version from runtime-info key brokerVersionDesc, address it is scraped at.", prometheus.GaugeValue, "version", "address")
	namesrvUpDesc = collector.NewMetric("rocketmq_namesrv_up",
		"1 if the name server answered GET_BROKER_CLUSTER_INFO (request 106) at the last discovery, else 0.", prometheus.GaugeValue, "namesrv")
	lockHeldDesc = brokerMetric("commitlog_lock_held_seconds",
		"How long the current holder has held the CommitLog put lock, 0 when free (runtime-info pageCacheLockTimeMills, instantaneous). The broker declares the page cache busy above osPageCacheBusyTimeOutMills.", prometheus.GaugeValue)
	putPercentileDesc = brokerMetric("put_latency_window_percentile_seconds",
		"Put latency percentile over the broker's last completed 60 s window: percentile=\"99\" from runtime-info putLatency99, \"99.9\" from putLatency999 (4.9.4+).", prometheus.GaugeValue, "percentile")
	putMaxDesc = brokerMetric("put_latency_max_seconds",
		"Longest whole put since broker start (runtime-info putMessageEntireTimeMax, high-water mark).", prometheus.GaugeValue)
	putMessagesDesc = brokerMetric("put_messages_total",
		"Messages stored since broker start (runtime-info putMessageTimesTotal).", prometheus.CounterValue)
	putBytesDesc = brokerMetric("put_bytes_total",
		"Message bytes stored since broker start (runtime-info putMessageSizeTotal).", prometheus.CounterValue)
	putFailuresDesc = brokerMetric("put_failures_total",
		"Failed puts since broker start (runtime-info putMessageFailedTimes; 4.9.3+).", prometheus.CounterValue)
	rateDesc = brokerMetric("messages_per_second",
		"Broker-computed message rate over the trailing window (runtime-info putTps, getFoundTps, getMissTps, getTotalTps, getTransferedTps/getTransferredTps).", prometheus.GaugeValue, "op", "window")
	sendQueueSizeDesc = brokerMetric("send_queue_size",
		"Send requests queued for the send thread pool (runtime-info sendThreadPoolQueueSize).", prometheus.GaugeValue)
	sendQueueCapDesc = brokerMetric("send_queue_capacity",
		"Capacity of the send thread pool queue (runtime-info sendThreadPoolQueueCapacity).", prometheus.GaugeValue)
	sendQueueWaitDesc = brokerMetric("send_queue_head_wait_seconds",
		"Age of the oldest queued send request (runtime-info sendThreadPoolQueueHeadWaitTimeMills). Fast failure rejects requests older than waitTimeMillsInSendQueue (200 ms).", prometheus.GaugeValue)
	pullQueueSizeDesc = brokerMetric("pull_queue_size",
		"Pull requests queued for the pull thread pool (runtime-info pullThreadPoolQueueSize).", prometheus.GaugeValue)
	pullQueueCapDesc = brokerMetric("pull_queue_capacity",
		"Capacity of the pull thread pool queue (runtime-info pullThreadPoolQueueCapacity).", prometheus.GaugeValue)
	pullQueueWaitDesc = brokerMetric("pull_queue_head_wait_seconds",
		"Age of the oldest queued pull request (runtime-info pullThreadPoolQueueHeadWaitTimeMills).", prometheus.GaugeValue)
	flushPendingDesc = brokerMetric("flush_pending_bytes",
		"CommitLog bytes written but not yet flushed to disk (runtime-info remainHowManyDataToFlush, a human-readable size rounded by the broker to 3 digits).", prometheus.GaugeValue)
	commitPendingDesc = brokerMetric("commit_pending_bytes",
		"Bytes in the transient store pool not yet committed to the file channel (runtime-info remainHowManyDataToCommit; only with transientStorePoolEnable).", prometheus.GaugeValue)
	transientPoolDesc = brokerMetric("transient_store_pool_enabled",
		"1 if the off-heap transient store pool is enabled, else 0 (runtime-info remainTransientStoreBufferNumbs is 2147483647 when it is disabled).", prometheus.GaugeValue)
	transientFreeDesc = brokerMetric("transient_store_buffers_available",
		"Free off-heap transient store buffers; at 0 sends are rejected (runtime-info remainTransientStoreBufferNumbs). Absent when the pool is disabled.", prometheus.GaugeValue)
	dispatchBehindDesc = brokerMetric("dispatch_behind_bytes",
		"CommitLog bytes not yet dispatched to consume queues and index (runtime-info dispatchBehindBytes).", prometheus.GaugeValue)
	diskRatioDesc = brokerMetric("commitlog_disk_ratio",
		"Used fraction of the CommitLog disk, 0–1 (runtime-info commitLogDiskRatio). Absent when the broker reports -1 (it could not read the disk).", prometheus.GaugeValue)
	keyErrorsDesc = brokerMetric("runtime_info_errors_total",
		"Runtime-info keys that were missing or unparsable, by key, since exporter start; each costs only its own metric. Also counted in stall_collector_parse_errors_total.", prometheus.CounterValue, "key")
	sampleErrorsDesc = brokerMetric("lock_samples_failed_total",
		"Background pageCacheLockTimeMills samples (--rocketmq.sample-interval) that failed since exporter start.", prometheus.CounterValue)
	configInfoDesc = brokerMetric("broker_config_info",
		"The broker settings that decide CommitLog stalls, as reported by GET_BROKER_CONFIG (request 26), refreshed every --rocketmq.config-interval (always 1; empty label: key not reported).",
		prometheus.GaugeValue, configLabels...)
	configBusyTimeoutDesc = brokerMetric("broker_config_page_cache_busy_timeout_seconds",
		"Lock hold above which the broker declares the page cache busy and fast-fails sends (config osPageCacheBusyTimeOutMills, default 1000 ms).", prometheus.GaugeValue)
	configSendWaitDesc = brokerMetric("broker_config_send_queue_wait_timeout_seconds",
		"Send-queue wait above which fast failure rejects a request with SYSTEM_BUSY (config waitTimeMillsInSendQueue, default 200 ms).", prometheus.GaugeValue)

	putLatencyName  = collector.Namespace + "_rocketmq_put_latency_seconds"
	lockSampledName = collector.Namespace + "_rocketmq_commitlog_lock_held_sampled_seconds"
	putLatencyDesc  = prometheus.NewDesc(putLatencyName,
		"Whole put latency (lock wait, append, and flush/replication wait in sync modes), cumulative over the broker's 60 s putMessageDistributeTime windows seen since exporter start (runtime-info putMessageDistributeTime; 13 broker buckets). _sum is NaN: the broker reports no total time.",
		brokerLabels, nil)
	lockSampledDesc = prometheus.NewDesc(lockSampledName,
		"pageCacheLockTimeMills sampled every --rocketmq.sample-interval between scrapes: how long the CommitLog put lock had been held at each sample.",
		brokerLabels, nil)
	// lockBounds: the broker's busy threshold is 1 s, the NOTIFYME log 0.5 s.
	lockBounds = []float64{0, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}
)

var configKeys = []string{"flushDiskType", "brokerRole", "transientStorePoolEnable", "warmMapedFileEnable",
	"transferMsgByHeap", "useReentrantLockWhenPutMessage", "brokerFastFailureEnable", "fastFailIfNoBufferInStorePool"}

var configLabels = []string{"flush_disk_type", "broker_role", "transient_store_pool_enable", "warm_maped_file_enable",
	"transfer_msg_by_heap", "use_reentrant_lock_when_put_message", "broker_fast_failure_enable", "fast_fail_if_no_buffer_in_store_pool"}

func init() {
	collector.Document(putLatencyName, "histogram", brokerLabels...)
	collector.Document(lockSampledName, "histogram", brokerLabels...)
}

// number is one runtime-info key exported as one metric.
type number struct {
	keys     []string // spellings, first present wins
	required bool     // missing counts as an error (present in every 4.9.x and 5.x)
	parse    func(string) (float64, error)
	metric   collector.Metric
}

var numbers = []number{
	{[]string{"pageCacheLockTimeMills"}, true, parseMillis, lockHeldDesc},
	{[]string{"putMessageEntireTimeMax"}, true, parseMillis, putMaxDesc},
	{[]string{"putMessageTimesTotal"}, true, parseFloat, putMessagesDesc},
	{[]string{"putMessageSizeTotal"}, true, parseFloat, putBytesDesc},
	{[]string{"putMessageFailedTimes"}, false, parseFloat, putFailuresDesc},
	{[]string{"sendThreadPoolQueueSize"}, true, parseFloat, sendQueueSizeDesc},
	{[]string{"sendThreadPoolQueueCapacity"}, true, parseFloat, sendQueueCapDesc},
	{[]string{"sendThreadPoolQueueHeadWaitTimeMills"}, true, parseMillis, sendQueueWaitDesc},
	{[]string{"pullThreadPoolQueueSize"}, true, parseFloat, pullQueueSizeDesc},
	{[]string{"pullThreadPoolQueueCapacity"}, true, parseFloat, pullQueueCapDesc},
	{[]string{"pullThreadPoolQueueHeadWaitTimeMills"}, true, parseMillis, pullQueueWaitDesc},
	{[]string{"remainHowManyDataToFlush"}, true, parseSize, flushPendingDesc},
	{[]string{"remainHowManyDataToCommit"}, false, parseSize, commitPendingDesc},
	{[]string{"dispatchBehindBytes"}, true, parseFloat, dispatchBehindDesc},
}

var rates = []struct {
	op   string
	keys []string
}{
	{"put", []string{"putTps"}},
	{"get_found", []string{"getFoundTps"}},
	{"get_miss", []string{"getMissTps"}},
	{"get_total", []string{"getTotalTps"}},
	{"get_transferred", []string{"getTransferredTps", "getTransferedTps"}},
}

var rateWindows = [3]string{"10s", "60s", "600s"}

// scraper scrapes a set of brokers and optionally follows the
// broker's logs.
type scraper struct {
	cfg  collector.Config
	opts options
	logs *logFollower
	now  func() time.Time

	mu            sync.Mutex
	brokers       map[string]*broker          // by address
	namesrvErr    map[string]error            // result of the last discovery per name server (nil: answered)
	nsClients     map[string]*remoting.Client // one reused connection per name server
	lastDiscovery time.Time                   // start of the last discovery round
	discovered    bool                        // some round got an answer
	discovering   chan struct{}               // closed when the running round ends; nil when none runs
	ready         chan struct{}               // closed at the running round's first answer or its end
	roundFailed   bool                        // no name server answered the last finished round
}

// broker is the state kept for one broker between scrapes.
type broker struct {
	addr   string
	client *remoting.Client
	direct bool // from --rocketmq.broker or /probe: labels come from its config

	mu           sync.Mutex
	labels       [3]string
	version      string
	put          putHistogram
	lockCounts   []uint64 // per lockBounds bucket, not cumulative; last is +Inf
	lockSum      float64
	lockN        uint64
	sampleErrors uint64
	nextSample   time.Time
	sampleFails  int
	keyErrors    map[string]uint64
	config       map[string]string
	configAt     time.Time
	down         bool // the last scrape's runtime-info request failed (logged once)
}

func newScraper(cfg collector.Config, opts options) *scraper {
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.ConfigInterval <= 0 {
		opts.ConfigInterval = 5 * time.Minute
	}
	if opts.DiscoveryInterval <= 0 {
		opts.DiscoveryInterval = 30 * time.Second
	}
	c := &scraper{cfg: cfg, opts: opts, now: time.Now,
		brokers: map[string]*broker{}, namesrvErr: map[string]error{}, nsClients: map[string]*remoting.Client{}}
	for _, ns := range opts.Namesrv {
		c.nsClients[ns] = remoting.NewClient(ns, remoting.Options{Timeout: opts.Timeout, MaxFrame: opts.MaxFrame})
	}
	for _, a := range opts.Brokers {
		c.brokers[a] = c.newBroker(a, true, [3]string{"", labelValue(a), ""})
	}
	if opts.LogDir != "" {
		c.logs = newLogFollower(cfg.Paths.Root(opts.LogDir), cfg.Problems, cfg.Logger)
	}
	return c
}

func (c *scraper) newBroker(addr string, direct bool, labels [3]string) *broker {
	return &broker{
		addr: addr, direct: direct, labels: labels,
		client: remoting.NewClient(addr, remoting.Options{Timeout: c.opts.Timeout, MaxFrame: c.opts.MaxFrame,
			Credentials: c.opts.Credentials}),
		lockCounts: make([]uint64, len(lockBounds)+1),
		keyErrors:  map[string]uint64{},
	}
}

func (c *scraper) remoteConfigured() bool {
	return len(c.opts.Namesrv) > 0 || len(c.opts.Brokers) > 0
}

// maxMargin is the most of the scrape's own time left unused at the end,
// so up=0 and the other series still reach the exporter before its timeout.
const maxMargin = 250 * time.Millisecond

// scrapeDeadline is when this scrape's requests must end: --rocketmq.timeout
// after start, or shortly before ctx's deadline when that is earlier.
func (c *scraper) scrapeDeadline(ctx context.Context, start time.Time) time.Time {
	deadline := start.Add(c.opts.Timeout)
	if d, ok := ctx.Deadline(); ok {
		margin := min(maxMargin, d.Sub(start)/10)
		if d = d.Add(-margin); d.Before(deadline) {
			deadline = d
		}
	}
	return deadline
}

// Update implements Collector. Every broker is asked concurrently, each
// under one budget for its whole scrape (see scrapeDeadline), so the scrape
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
	deadline := c.scrapeDeadline(ctx, start)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if done, wait := c.refreshTopology(); wait {
		// Wait for the name servers at most half the budget; after that
		// the last known brokers are scraped and the round finishes in the
		// background for the next scrape. No wait at all while the name
		// servers failed the last round: the scrape is not delayed for them
		// again and again.
		t := time.NewTimer(deadline.Sub(start) / 2)
		select {
		case <-done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	brokers := c.knownBrokers()
	errs := c.sendNamesrv(ch)
	berrs := make([]error, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			berrs[i] = c.scrapeBroker(ctx, b, ch)
		}()
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

// Run samples pageCacheLockTimeMills every --rocketmq.sample-interval and
// follows the broker logs, until ctx is done.
func (c *scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if c.logs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.logs.run(ctx, time.Second)
		}()
	}
	if c.remoteConfigured() && c.opts.SampleInterval > 0 {
		t := time.NewTicker(c.opts.SampleInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-t.C:
				c.sampleOnce(ctx)
			}
		}
	}
	wg.Wait()
}

// sampleOnce polls every known broker once, each bounded by the sample
// interval. A broker that fails is skipped for a backoff of 2^n intervals
// (up to 30 s) so a dead broker is not redialled every second.
func (c *scraper) sampleOnce(ctx context.Context) {
	c.refreshTopology()
	brokers := c.knownBrokers()
	interval := c.opts.SampleInterval
	if interval <= 0 {
		interval = time.Second
	}
	var wg sync.WaitGroup
	for _, b := range brokers {
		now := c.now()
		b.mu.Lock()
		skip := now.Before(b.nextSample)
		b.mu.Unlock()
		if skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, interval)
			defer cancel()
			kv, err := b.client.RuntimeInfo(sctx)
			now := c.now()
			b.mu.Lock()
			defer b.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, remoting.ErrMalformed) || errors.Is(err, remoting.ErrFrameTooLarge) {
					c.cfg.Problems.Add("rocketmq runtime info reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
				}
				b.sampleErrors++
				b.sampleFails++
				backoff := interval << min(b.sampleFails, 5)
				b.nextSample = now.Add(min(backoff, 30*time.Second))
				return
			}
			b.sampleFails, b.nextSample = 0, time.Time{}
			if v, ok := kv["pageCacheLockTimeMills"]; ok {
				if s, err := parseMillis(v); err == nil {
					b.observeLock(s)
				}
			}
			b.observeDistribution(kv, now)
		}()
	}
	wg.Wait()
}

func (b *broker) observeLock(s float64) {
	i := sort.SearchFloat64s(lockBounds, s) // first bound >= s
	b.lockCounts[i]++
	b.lockSum += s
	b.lockN++
}

// observeDistribution feeds putMessageDistributeTime into the cumulative
// histogram; b.mu must be held.
func (b *broker) observeDistribution(kv map[string]string, now time.Time) bool {
	v, ok := kv["putMessageDistributeTime"]
	if !ok {
		return false
	}
	dist, err := parseDistribution(v)
	if err != nil {
		return false // counted by the scrape that emits the metrics
	}
	b.put.observe(dist, reportsWindowInProgress(kv["brokerVersionDesc"]), now)
	return true
}

// refreshTopology starts a discovery round in the background when one is
// due (--rocketmq.discovery-interval after the last round, or at once while
// no name server has ever answered) and none is running. It returns a
// channel closed when the running round ends (nil when none runs), and
// whether a scrape should wait for it: not when every name server failed
// the last round. A round is bounded by --rocketmq.timeout and never by a
// scrape, so a silent name server delays no scrape by more than the wait
// Update chooses, and only until its first failure is known.
func (c *scraper) refreshTopology() (<-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.discovering != nil {
		return c.ready, !c.roundFailed
	}
	if len(c.opts.Namesrv) == 0 || c.discovered && c.now().Sub(c.lastDiscovery) < c.opts.DiscoveryInterval {
		return nil, false
	}
	done, ready := make(chan struct{}), make(chan struct{})
	c.discovering, c.ready = done, ready
	c.lastDiscovery = c.now()
	var once sync.Once
	markReady := func() { once.Do(func() { close(ready) }) }
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		c.discover(ctx, markReady)
		cancel()
		markReady()
		c.mu.Lock()
		c.discovering, c.ready = nil, nil
		c.mu.Unlock()
		close(done)
	}()
	return ready, !c.roundFailed
}

// knownBrokers returns the brokers to scrape, sorted by address.
func (c *scraper) knownBrokers() []*broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*broker, 0, len(c.brokers))
	for _, b := range c.brokers {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// discover asks every name server concurrently for the topology. Every
// name server knows every broker (each broker registers with all of them),
// so the brokers of an answer are added at once, and ready is called as
// soon as only name servers that failed the previous round are still
// pending; brokers that no answering name server lists are dropped when the
// round ends. When none answers, the last known brokers are kept. A name server
// going down is logged once at warn, its recovery at info.
func (c *scraper) discover(ctx context.Context, ready func()) {
	type result struct {
		ns      string
		brokers []remoting.BrokerAddr
		err     error
	}
	results := make([]result, len(c.opts.Namesrv))
	pending := map[string]bool{} // guarded by c.mu
	for _, ns := range c.opts.Namesrv {
		pending[ns] = true
	}
	answered := false // guarded by c.mu
	var wg sync.WaitGroup
	for i, ns := range c.opts.Namesrv {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs, err := c.nsClients[ns].ClusterInfo(ctx)
			results[i] = result{ns, bs, err}
			c.mu.Lock()
			delete(pending, ns)
			if err == nil {
				answered = true
				c.addBrokers(bs)
			}
			// Ready early when an answer came and every name server still
			// pending failed the previous round: a scrape does not wait
			// for name servers known to be down.
			early := answered && len(pending) > 0
			for p := range pending {
				if prev, seen := c.namesrvErr[p]; !seen || prev == nil {
					early = false
				}
			}
			c.mu.Unlock()
			if early {
				ready()
			}
		}()
	}
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	found := map[string]remoting.BrokerAddr{}
	failed := 0
	for _, r := range results {
		prev, seen := c.namesrvErr[r.ns]
		c.namesrvErr[r.ns] = r.err
		if r.err != nil {
			failed++
			if !seen || prev == nil {
				c.cfg.Logger.Warn("rocketmq name server not answering GET_BROKER_CLUSTER_INFO; the last known brokers are scraped (logged again when it recovers)",
					"namesrv", r.ns, "err", r.err)
			}
			var re *remoting.ResponseError
			if !errors.As(r.err, &re) && (errors.Is(r.err, remoting.ErrMalformed) || strings.Contains(r.err.Error(), "cluster info")) {
				c.cfg.Problems.Add("rocketmq cluster info", 1, r.err)
			}
			continue
		}
		if seen && prev != nil {
			c.cfg.Logger.Info("rocketmq name server answering again", "namesrv", r.ns)
		}
		for _, b := range r.brokers {
			found[b.Addr] = b
		}
	}
	c.roundFailed = failed == len(results)
	if c.roundFailed {
		return
	}
	c.discovered = true
	for addr, b := range c.brokers {
		if _, ok := found[addr]; !ok && !b.direct {
			b.client.Close()
			delete(c.brokers, addr)
		}
	}
	for _, r := range results {
		if r.err == nil {
			c.addBrokers(r.brokers)
		}
	}
}

// addBrokers adds discovered brokers and updates the labels of known ones
// (directly named brokers keep the labels from their config); c.mu must be
// held.
func (c *scraper) addBrokers(found []remoting.BrokerAddr) {
	for _, ba := range found {
		labels := [3]string{labelValue(ba.Cluster), labelValue(ba.Name), strconv.FormatInt(ba.ID, 10)}
		if b, ok := c.brokers[ba.Addr]; ok {
			b.mu.Lock()
			if !b.direct {
				b.labels = labels
			}
			b.mu.Unlock()
			continue
		}
		c.brokers[ba.Addr] = c.newBroker(ba.Addr, false, labels)
	}
}

// sendNamesrv sends stall_rocketmq_namesrv_up from the last finished
// discovery round and returns the errors of the name servers that failed it.
func (c *scraper) sendNamesrv(ch chan<- prometheus.Metric) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, ns := range c.opts.Namesrv {
		err, ok := c.namesrvErr[ns]
		if !ok {
			continue
		}
		namesrvUpDesc.Send(ch, b2f(err == nil), ns)
		if err != nil {
			errs = append(errs, fmt.Errorf("name server %s: %w", ns, err))
		}
	}
	return errs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// scrapeBroker reads one broker's runtime info and, when it answered and
// the config is due, its config, all before ctx's deadline (one budget for
// both); then it sends the broker's metrics. stall_rocketmq_up is the
// runtime-info request's result alone: a slow or failed config read keeps
// the last config and labels. The broker going down is logged once at warn,
// its recovery at info.
func (c *scraper) scrapeBroker(ctx context.Context, b *broker, ch chan<- prometheus.Metric) error {
	kv, err := b.client.RuntimeInfo(ctx)
	if err == nil {
		b.mu.Lock()
		configDue := b.config == nil || c.now().Sub(b.configAt) >= c.opts.ConfigInterval
		b.mu.Unlock()
		if configDue {
			c.readConfig(ctx, b)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lv := b.labels[:]
	if err != nil {
		if !b.down {
			c.cfg.Logger.Warn("rocketmq broker not answering GET_BROKER_RUNTIME_INFO; stall_rocketmq_up is 0 (logged again when it recovers)",
				"broker", b.addr, "err", err)
		}
		b.down = true
		if errors.Is(err, remoting.ErrMalformed) || errors.Is(err, remoting.ErrFrameTooLarge) || strings.HasPrefix(err.Error(), "runtime info body") {
			c.cfg.Problems.Add("rocketmq runtime info reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
		}
		upDesc.Send(ch, 0, lv...)
		b.sendState(ch)
		return fmt.Errorf("broker %s: %w", b.addr, err)
	}
	if b.down {
		c.cfg.Logger.Info("rocketmq broker answering again", "broker", b.addr)
		b.down = false
	}
	upDesc.Send(ch, 1, lv...)
	b.emitRuntime(ch, kv, c.now(), c.cfg.Problems)
	b.sendState(ch)
	return nil
}

// readConfig reads GET_BROKER_CONFIG; a failure keeps the last config and
// labels and is retried at the next scrape.
func (c *scraper) readConfig(ctx context.Context, b *broker) {
	cfg, bad, err := b.client.BrokerConfig(ctx)
	if bad > 0 {
		c.cfg.Problems.Add("rocketmq broker config line", bad, fmt.Errorf("broker %s: %d config lines without '='", b.addr, bad))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		c.cfg.Logger.Debug("GET_BROKER_CONFIG failed; keeping the last config", "broker", b.addr, "err", err)
		return
	}
	b.config, b.configAt = cfg, c.now()
	if b.direct {
		b.labels = labelsFromConfig(cfg, b.addr)
	}
}

// labelsFromConfig names a directly configured broker from its own
// config (brokerClusterName, brokerName, brokerId); the address stands in
// for a missing name.
func labelsFromConfig(cfg map[string]string, addr string) [3]string {
	l := [3]string{labelValue(cfg["brokerClusterName"]), labelValue(cfg["brokerName"]), labelValue(cfg["brokerId"])}
	if l[1] == "" {
		l[1] = labelValue(addr)
	}
	return l
}

// labelValue makes a broker- or name-server-supplied string safe as a label
// value: valid UTF-8 (client_golang refuses anything else) and at most 128
// bytes.
func labelValue(s string) string { return collector.LabelValue(s, 128) }

// keyError counts one missing or bad runtime-info key; b.mu must be held.
func (b *broker) keyError(problems *collector.Problems, key string, err error) {
	b.keyErrors[key]++
	problems.Add("rocketmq runtime-info key "+key, 1, fmt.Errorf("broker %s: %s: %w", b.addr, key, err))
}

var errMissing = errors.New("missing")

func lookup(kv map[string]string, keys []string) (string, string, bool) {
	for _, k := range keys {
		if v, ok := kv[k]; ok {
			return k, v, true
		}
	}
	return keys[0], "", false
}

// emitRuntime turns one runtime-info table into metrics; b.mu must be held.
func (b *broker) emitRuntime(ch chan<- prometheus.Metric, kv map[string]string, now time.Time, problems *collector.Problems) {
	lv := b.labels[:]
	b.version = labelValue(kv["brokerVersionDesc"])
	infoDesc.Send(ch, 1, append(lv[:3:3], b.version, labelValue(b.addr))...)

	for _, n := range numbers {
		key, raw, ok := lookup(kv, n.keys)
		if !ok {
			if n.required {
				b.keyError(problems, key, errMissing)
			}
			continue
		}
		v, err := n.parse(raw)
		if err != nil {
			b.keyError(problems, key, err)
			continue
		}
		n.metric.Send(ch, v, lv...)
	}

	for _, q := range []struct{ key, percentile string }{{"putLatency99", "99"}, {"putLatency999", "99.9"}} {
		raw, ok := kv[q.key]
		if !ok {
			continue // 4.9.4+ only
		}
		v, err := parseMillis(raw)
		if err != nil {
			b.keyError(problems, q.key, err)
			continue
		}
		putPercentileDesc.Send(ch, v, append(lv[:3:3], q.percentile)...)
	}

	for _, r := range rates {
		key, raw, ok := lookup(kv, r.keys)
		if !ok {
			if r.op == "put" {
				b.keyError(problems, key, errMissing)
			}
			continue
		}
		tps, err := parseTps(raw)
		if err != nil {
			b.keyError(problems, key, err)
			continue
		}
		for i, v := range tps {
			if !math.IsNaN(v) {
				rateDesc.Send(ch, v, append(lv[:3:3], r.op, rateWindows[i])...)
			}
		}
	}

	if raw, ok := kv["remainTransientStoreBufferNumbs"]; ok {
		v, err := parseFloat(raw)
		switch {
		case err != nil:
			b.keyError(problems, "remainTransientStoreBufferNumbs", err)
		case v == math.MaxInt32:
			transientPoolDesc.Send(ch, 0, lv...)
		default:
			transientPoolDesc.Send(ch, 1, lv...)
			transientFreeDesc.Send(ch, v, lv...)
		}
	} else {
		b.keyError(problems, "remainTransientStoreBufferNumbs", errMissing)
	}

	if raw, ok := kv["commitLogDiskRatio"]; ok {
		v, err := parseFloat(raw)
		switch {
		case err != nil:
			b.keyError(problems, "commitLogDiskRatio", err)
		case v < 0:
			// -1: the broker could not stat the disk; no value rather than a fake one.
		default:
			diskRatioDesc.Send(ch, v, lv...)
		}
	} else {
		b.keyError(problems, "commitLogDiskRatio", errMissing)
	}

	if raw, ok := kv["putMessageDistributeTime"]; ok {
		dist, err := parseDistribution(raw)
		switch {
		case errors.Is(err, errNull):
		case err != nil:
			b.keyError(problems, "putMessageDistributeTime", err)
		default:
			b.put.observe(dist, reportsWindowInProgress(b.version), now)
		}
	} else {
		b.keyError(problems, "putMessageDistributeTime", errMissing)
	}
}

// sendState sends what is kept between scrapes: the histograms, error
// counters and config; b.mu must be held.
func (b *broker) sendState(ch chan<- prometheus.Metric) {
	lv := b.labels[:]
	if b.put.have {
		buckets, count := b.put.buckets()
		ch <- prometheus.MustNewConstHistogram(putLatencyDesc, count, math.NaN(), buckets, lv...)
	}
	if b.lockN > 0 || b.sampleErrors > 0 {
		buckets := make(map[float64]uint64, len(lockBounds))
		var run uint64
		for i, bound := range lockBounds {
			run += b.lockCounts[i]
			buckets[bound] = run
		}
		ch <- prometheus.MustNewConstHistogram(lockSampledDesc, b.lockN, b.lockSum, buckets, lv...)
		sampleErrorsDesc.Send(ch, float64(b.sampleErrors), lv...)
	}
	for key, n := range b.keyErrors {
		keyErrorsDesc.Send(ch, float64(n), append(lv[:3:3], key)...)
	}
	if b.config != nil {
		vals := append([]string(nil), lv...)
		for _, k := range configKeys {
			vals = append(vals, labelValue(b.config[k]))
		}
		configInfoDesc.Send(ch, 1, vals...)
		for _, m := range []struct {
			key string
			m   collector.Metric
		}{{"osPageCacheBusyTimeOutMills", configBusyTimeoutDesc}, {"waitTimeMillsInSendQueue", configSendWaitDesc}} {
			if raw, ok := b.config[m.key]; ok {
				if v, err := parseMillis(raw); err == nil {
					m.m.Send(ch, v, lv...)
				}
			}
		}
	}
}

// /probe?module=rocketmq&target=host:port

var probes = struct {
	sync.Mutex
	byTarget map[string]*probeEntry
}{byTarget: map[string]*probeEntry{}}

type probeEntry struct {
	c    *scraper
	used time.Time
}

// probeCacheSize bounds the cached probe collectors (connections and
// put-latency histograms kept per target); the least recently used goes.
const probeCacheSize = 256

func probe(cfg collector.Config, target string) (collector.Collector, error) {
	if !probeAllowed(*probeAllowFlag, target) {
		return nil, fmt.Errorf("%w: %q is not in --rocketmq.probe.allowed-targets", collector.ErrTargetNotAllowed, target)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("target %q: want host:port: %w", target, err)
	}
	probes.Lock()
	defer probes.Unlock()
	if e, ok := probes.byTarget[target]; ok {
		e.used = time.Now()
		return e.c, nil
	}
	opts, err := optionsFromFlags()
	if err != nil {
		return nil, err
	}
	opts.Brokers = []string{target}
	if len(probes.byTarget) >= probeCacheSize {
		var oldest string
		var at time.Time
		for t, e := range probes.byTarget {
			if oldest == "" || e.used.Before(at) {
				oldest, at = t, e.used
			}
		}
		for _, b := range probes.byTarget[oldest].c.brokers {
			b.client.Close()
		}
		delete(probes.byTarget, oldest)
	}
	c := newScraper(cfg, opts)
	probes.byTarget[target] = &probeEntry{c: c, used: time.Now()}
	return c, nil
}

// probeAllowed reports whether target (host:port) matches an allowlist
// entry: "*", an exact host:port, a host (any port), or a CIDR containing
// the target's IP address. Host names are compared as written, never
// resolved.
func probeAllowed(allow []string, target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	ip, ipErr := netip.ParseAddr(host)
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "*", a == target, a == host:
			return true
		case strings.Contains(a, "/") && ipErr == nil:
			if p, err := netip.ParsePrefix(a); err == nil && p.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}
