package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// brokerLabels name the broker of every per-broker series.
var brokerLabels = []string{"cluster", "broker", "broker_id"}

// brokerMetric declares stall_rocketmq_<name> with the broker labels, then extra.
func brokerMetric(name, help string, typ prometheus.ValueType, extra ...string) collector.Metric {
	return collector.NewMetric("rocketmq_"+name, help, typ, append(append([]string(nil), brokerLabels...), extra...)...)
}

var (
	upDesc = brokerMetric("up",
		"1 if the broker answered GET_BROKER_RUNTIME_INFO (request 28) within the timeout in this scrape, else 0.", prometheus.GaugeValue)
	infoDesc = brokerMetric("broker_info",
		"Broker identity (always 1): version from runtime-info key brokerVersionDesc, address it is scraped at.", prometheus.GaugeValue, "version", "address")
	downReasonDesc = brokerMetric("down_reason",
		"Why the broker's last GET_BROKER_RUNTIME_INFO failed (always 1); absent while stall_rocketmq_up is 1.",
		prometheus.GaugeValue, "reason")
	namesrvUpDesc = collector.NewMetric("rocketmq_namesrv_up",
		"1 if the name server answered GET_BROKER_CLUSTER_INFO (request 106) at the last discovery, else 0.", prometheus.GaugeValue, "namesrv")
	lockHeldDesc = brokerMetric("commitlog_lock_held_seconds",
		"How long the current holder has held the CommitLog put lock, 0 when free (runtime-info pageCacheLockTimeMills).", prometheus.GaugeValue)
	putPercentileDesc = brokerMetric("put_latency_window_percentile_seconds",
		"Put latency percentile over the broker's last 60 s window (runtime-info putLatency99 and putLatency999).", prometheus.GaugeValue, "percentile")
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
		"Age of the oldest queued send request (runtime-info sendThreadPoolQueueHeadWaitTimeMills).", prometheus.GaugeValue)
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
		"Runtime-info keys that were missing, unparsable or impossible, by key, since exporter start.", prometheus.CounterValue, "key")
	sampleErrorsDesc = brokerMetric("lock_samples_failed_total",
		"Background pageCacheLockTimeMills samples (--rocketmq.sample-interval) that failed since exporter start.", prometheus.CounterValue)
	budgetRefusedDesc = brokerMetric("reply_budget_refusals_total",
		"Requests to the broker whose reply frame found no room in the exporter-wide budget of reply frames read at once before the deadline, since exporter start.",
		prometheus.CounterValue)
	configInfoDesc = brokerMetric("broker_config_info",
		"The broker settings that decide CommitLog stalls, from GET_BROKER_CONFIG (request 26), always 1.",
		prometheus.GaugeValue, configLabels...)
	configBusyTimeoutDesc = brokerMetric("broker_config_page_cache_busy_timeout_seconds",
		"Lock hold above which the broker declares the page cache busy and fast-fails sends (config osPageCacheBusyTimeOutMills, default 1000 ms).", prometheus.GaugeValue)
	configSendWaitDesc = brokerMetric("broker_config_send_queue_wait_timeout_seconds",
		"Send-queue wait above which fast failure rejects a request with SYSTEM_BUSY (config waitTimeMillsInSendQueue, default 200 ms).", prometheus.GaugeValue)

	putLatency = collector.DeclareHistogram("rocketmq_put_latency_seconds",
		"Whole put latency, cumulative over the broker's 60 s windows seen since exporter start (runtime-info putMessageDistributeTime).",
		nil, brokerLabels...)
	lockSampled = collector.DeclareHistogram("rocketmq_commitlog_lock_held_sampled_seconds",
		"pageCacheLockTimeMills sampled every --rocketmq.sample-interval between scrapes: how long the CommitLog put lock had been held at each sample.",
		lockBounds, brokerLabels...)
	// Both are sent as constant histograms the collector accumulates itself.
	putLatencyDesc  = putLatency.Desc()
	lockSampledDesc = lockSampled.Desc()
	// lockBounds: the broker's busy threshold is 1 s, the NOTIFYME log 0.5 s.
	lockBounds = []float64{0, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}
)

var configKeys = []string{"flushDiskType", "brokerRole", "transientStorePoolEnable", "warmMapedFileEnable",
	"transferMsgByHeap", "useReentrantLockWhenPutMessage", "brokerFastFailureEnable", "fastFailIfNoBufferInStorePool"}

var configLabels = []string{"flush_disk_type", "broker_role", "transient_store_pool_enable", "warm_maped_file_enable",
	"transfer_msg_by_heap", "use_reentrant_lock_when_put_message", "broker_fast_failure_enable", "fast_fail_if_no_buffer_in_store_pool"}

// runtimeKey is one runtime-info key and the series it becomes.
type runtimeKey struct {
	keys     []string // spellings, first present wins
	required bool     // missing counts as an error (present in every 4.9.x and 5.x)
	// emit converts the key's value and sends its series; an error is
	// counted against the key (keyError) and costs only its own series.
	emit func(e runtimeEmitter, raw string) error
}

// runtimeEmitter is what a runtimeKey's emit needs: the broker (b.mu
// held), its labels, the channel and the scrape's time.
type runtimeEmitter struct {
	b   *broker
	ch  chan<- prometheus.Metric
	lv  []string
	now time.Time
}

// runtimeKeys, in the order their series are sent. Durations go through
// parseMillis and counts, sizes and capacities through parseCount, which
// refuse what no broker can report (negative, a duration over a week).
// dispatchBehindBytes is a difference of two offsets the broker reads at
// different moments, so it is taken as it comes.
var runtimeKeys = []runtimeKey{
	{[]string{"pageCacheLockTimeMills"}, true, number(parseMillis, lockHeldDesc)},
	{[]string{"putMessageEntireTimeMax"}, true, number(parseMillis, putMaxDesc)},
	{[]string{"putMessageTimesTotal"}, true, number(parseCount, putMessagesDesc)},
	{[]string{"putMessageSizeTotal"}, true, number(parseCount, putBytesDesc)},
	{[]string{"putMessageFailedTimes"}, false, number(parseCount, putFailuresDesc)},
	{[]string{"sendThreadPoolQueueSize"}, true, number(parseCount, sendQueueSizeDesc)},
	{[]string{"sendThreadPoolQueueCapacity"}, true, number(parseCount, sendQueueCapDesc)},
	{[]string{"sendThreadPoolQueueHeadWaitTimeMills"}, true, number(parseMillis, sendQueueWaitDesc)},
	{[]string{"pullThreadPoolQueueSize"}, true, number(parseCount, pullQueueSizeDesc)},
	{[]string{"pullThreadPoolQueueCapacity"}, true, number(parseCount, pullQueueCapDesc)},
	{[]string{"pullThreadPoolQueueHeadWaitTimeMills"}, true, number(parseMillis, pullQueueWaitDesc)},
	{[]string{"remainHowManyDataToFlush"}, true, number(parseSize, flushPendingDesc)},
	{[]string{"remainHowManyDataToCommit"}, false, number(parseSize, commitPendingDesc)},
	{[]string{"dispatchBehindBytes"}, true, number(parseFloat, dispatchBehindDesc)},
	{[]string{"putLatency99"}, false, putPercentile("99")}, // 4.9.4+
	{[]string{"putLatency999"}, false, putPercentile("99.9")},
	{[]string{"putTps"}, true, rate("put")},
	{[]string{"getFoundTps"}, false, rate("get_found")},
	{[]string{"getMissTps"}, false, rate("get_miss")},
	{[]string{"getTotalTps"}, false, rate("get_total")},
	{[]string{"getTransferredTps", "getTransferedTps"}, false, rate("get_transferred")},
	{[]string{"remainTransientStoreBufferNumbs"}, true, transientPool},
	{[]string{"commitLogDiskRatio"}, true, diskRatio},
	{[]string{"putMessageDistributeTime"}, true, putDistribution},
}

// number sends the value, converted by parse, as metric.
func number(parse func(string) (float64, error), metric collector.Metric) func(runtimeEmitter, string) error {
	return func(e runtimeEmitter, raw string) error {
		v, err := parse(raw)
		if err == nil {
			metric.Send(e.ch, v, e.lv...)
		}
		return err
	}
}

// putPercentile sends a put-latency percentile, milliseconds.
func putPercentile(percentile string) func(runtimeEmitter, string) error {
	return func(e runtimeEmitter, raw string) error {
		v, err := parseMillis(raw)
		if err == nil {
			putPercentileDesc.Send(e.ch, v, append(e.lv[:3:3], percentile)...)
		}
		return err
	}
}

var rateWindows = [3]string{"10s", "60s", "600s"}

// rate sends a "10s 60s 600s" rate triple, each window whose rate the
// broker knows.
func rate(op string) func(runtimeEmitter, string) error {
	return func(e runtimeEmitter, raw string) error {
		tps, err := parseTps(raw)
		if err != nil {
			return err
		}
		for i, v := range tps {
			if !math.IsNaN(v) {
				rateDesc.Send(e.ch, v, append(e.lv[:3:3], op, rateWindows[i])...)
			}
		}
		return nil
	}
}

// transientPool: 2147483647 free buffers means the pool is disabled.
func transientPool(e runtimeEmitter, raw string) error {
	v, err := parseCount(raw)
	switch {
	case err != nil:
		return err
	case v == math.MaxInt32:
		transientPoolDesc.Send(e.ch, 0, e.lv...)
	default:
		transientPoolDesc.Send(e.ch, 1, e.lv...)
		transientFreeDesc.Send(e.ch, v, e.lv...)
	}
	return nil
}

// diskRatio: -1 means the broker could not stat the disk; no value rather
// than a fake one.
func diskRatio(e runtimeEmitter, raw string) error {
	v, err := parseFloat(raw)
	if err == nil && v >= 0 {
		diskRatioDesc.Send(e.ch, v, e.lv...)
	}
	return err
}

// putDistribution adds the 60 s put-latency window to the broker's
// histogram; "null" (no window yet) is not an error.
func putDistribution(e runtimeEmitter, raw string) error {
	dist, err := parseDistribution(raw)
	switch {
	case errors.Is(err, errNull):
		return nil
	case err != nil:
		return err
	}
	e.b.put.observe(dist, reportsWindowInProgress(e.b.version), e.now)
	return nil
}

// broker is the state kept for one broker between scrapes.
type broker struct {
	addr   string
	client *remoting.Client
	direct bool // from --rocketmq.broker or /probe: labels come from its config

	// unlistedSince is when the name servers stopped listing a discovered
	// broker (zero while they list it); guarded by the scraper's mu.
	unlistedSince time.Time

	mu           sync.Mutex
	labels       [3]string
	version      string
	put          putHistogram
	lockCounts   []uint64 // per lockBounds bucket, not cumulative; last is +Inf
	lockSum      float64
	lockN        uint64
	sampleErrors uint64
	// budgetRefused counts requests that failed with remote.ErrBudget
	// (its client's OnBudget); shown once non-zero.
	budgetRefused atomic.Uint64
	nextSample    time.Time
	sampleFails   int
	keyErrors     map[string]uint64
	config        map[string]string
	configAt      time.Time
	// state logs the broker going down (its runtime info failing) and
	// answering again; configState its ACL refusing GET_BROKER_CONFIG.
	state, configState *collector.StateLog
}

func (b *broker) observeLock(s float64) {
	i := sort.SearchFloat64s(lockBounds, s) // first bound >= s
	b.lockCounts[i]++
	b.lockSum += s
	b.lockN++
}

// observeDistribution feeds putMessageDistributeTime into the cumulative
// histogram; b.mu must be held. A bad value is counted by the scrape that
// emits the metrics.
func (b *broker) observeDistribution(kv map[string]string, now time.Time) {
	if dist, err := parseDistribution(kv["putMessageDistributeTime"]); err == nil {
		b.put.observe(dist, reportsWindowInProgress(kv["brokerVersionDesc"]), now)
	}
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
		configDue := b.config == nil || time.Now().Sub(b.configAt) >= c.opts.ConfigInterval
		b.mu.Unlock()
		if configDue {
			c.readConfig(ctx, b)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lv := b.labels[:]
	if err != nil {
		reason := downReason(err)
		b.state.Failed(downMessages[reason]+"; stall_rocketmq_up is 0", reason, err)
		if remoting.IsBadReply(err) {
			c.cfg.Problems.Add("rocketmq_runtime_info_reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
		}
		upDesc.Send(ch, 0, lv...)
		downReasonDesc.Send(ch, 1, append(lv[:3:3], reason)...)
		b.sendState(ch)
		return fmt.Errorf("broker %s: %s: %w", b.addr, reason, err)
	}
	b.state.OK("rocketmq broker answering again")
	// The broker answers again: the sampler's backoff (sampleOnce) ends now,
	// not when its up to 30 s run out.
	b.sampleFails, b.nextSample = 0, time.Time{}
	upDesc.Send(ch, 1, lv...)
	b.emitRuntime(ch, kv, time.Now(), c.cfg.Problems)
	b.sendState(ch)
	return nil
}

// readConfig reads GET_BROKER_CONFIG; a failure keeps the last config and
// labels and is retried at the next scrape. A bad reply is also counted as
// bad input.
func (c *scraper) readConfig(ctx context.Context, b *broker) {
	cfg, bad, err := b.client.BrokerConfig(ctx)
	if bad > 0 {
		c.cfg.Problems.Add("rocketmq_config_line", bad, fmt.Errorf("broker %s: %d config lines without '='", b.addr, bad))
	}
	if remoting.IsBadReply(err) {
		c.cfg.Problems.Add("rocketmq_config_reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var re *remoting.ResponseError
	if errors.As(err, &re) && responseReason(re) == reasonPermission {
		// The account may read runtime info but not the config: the
		// config series and incident 3's alert are missing, so say so.
		b.configState.Failed("rocketmq broker refused GET_BROKER_CONFIG: access denied (ACL); stall_rocketmq_broker_config_* are absent until the account may read the config",
			reasonPermission, err)
		return
	}
	if err != nil {
		c.cfg.Logger.Debug("GET_BROKER_CONFIG failed; keeping the last config", "broker", b.addr, "err", err)
		return
	}
	b.configState.OK("rocketmq broker answers GET_BROKER_CONFIG again")
	b.config, b.configAt = cfg, time.Now()
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
// value: valid UTF-8 (client_golang refuses anything else) and at most
// collector.MaxLabelBytes.
func labelValue(s string) string { return collector.LabelValue(s, collector.MaxLabelBytes) }

// keyError counts one missing or bad runtime-info key; b.mu must be held.
func (b *broker) keyError(problems *collector.Problems, key string, err error) {
	b.keyErrors[key]++
	problems.Add("rocketmq_runtime_info_key_"+key, 1, fmt.Errorf("broker %s: %s: %w", b.addr, key, err))
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

// emitRuntime turns one runtime-info table into metrics (runtimeKeys);
// b.mu must be held.
func (b *broker) emitRuntime(ch chan<- prometheus.Metric, kv map[string]string, now time.Time, problems *collector.Problems) {
	b.version = labelValue(kv["brokerVersionDesc"])
	infoDesc.Send(ch, 1, append(b.labels[:3:3], b.version, labelValue(b.addr))...)
	e := runtimeEmitter{b: b, ch: ch, lv: b.labels[:], now: now}
	for _, k := range runtimeKeys {
		key, raw, ok := lookup(kv, k.keys)
		if !ok {
			if k.required {
				b.keyError(problems, key, errMissing)
			}
			continue
		}
		if err := k.emit(e, raw); err != nil {
			b.keyError(problems, key, err)
		}
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
		buckets, count := cumulativeBuckets(b.lockCounts, lockBounds)
		ch <- prometheus.MustNewConstHistogram(lockSampledDesc, count, b.lockSum, buckets, lv...)
		sampleErrorsDesc.Send(ch, float64(b.sampleErrors), lv...)
	}
	if n := b.budgetRefused.Load(); n > 0 {
		budgetRefusedDesc.Send(ch, float64(n), lv...)
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
				if v, err := parseConfigMillis(raw); err == nil {
					m.m.Send(ch, v, lv...)
				}
			}
		}
	}
}
