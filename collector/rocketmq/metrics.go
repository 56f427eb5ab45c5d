package rocketmq

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The per-broker metrics of the remoting API; runtimeKeys (runtime.go)
// declares those of one runtime-info key, log.go the log follower's.

// brokerLabels name the broker of every per-broker series.
var brokerLabels = []string{"rocketmq_cluster", "broker", "broker_id"}

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
	putPercentileDesc = brokerMetric("put_latency_window_percentile_seconds",
		"Put latency percentile over the broker's last 60 s window (runtime-info putLatency99 and putLatency999).", prometheus.GaugeValue, "percentile")
	rateDesc = brokerMetric("messages_per_second",
		"Broker-computed message rate over the trailing window (runtime-info putTps, getFoundTps, getMissTps, getTotalTps, getTransferedTps/getTransferredTps).", prometheus.GaugeValue, "op", "window")
	transientPoolDesc = brokerMetric("transient_store_pool_enabled",
		"1 if the off-heap transient store pool is enabled, else 0 (runtime-info remainTransientStoreBufferNumbs is 2147483647 when it is disabled).", prometheus.GaugeValue)
	transientFreeDesc = brokerMetric("transient_store_buffers_available",
		"Free off-heap transient store buffers; at 0 sends are rejected (runtime-info remainTransientStoreBufferNumbs). Absent when the pool is disabled.", prometheus.GaugeValue)
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

	// Both histograms are sent as constant histograms the collector
	// accumulates itself.
	putLatencyDesc = collector.DeclareHistogram("rocketmq_put_latency_seconds",
		"Whole put latency, cumulative over the broker's 60 s windows seen since exporter start (runtime-info putMessageDistributeTime).",
		nil, brokerLabels...).Desc()
	lockSampledDesc = collector.DeclareHistogram("rocketmq_commitlog_lock_held_sampled_seconds",
		"pageCacheLockTimeMills sampled every --rocketmq.sample-interval between scrapes: how long the CommitLog put lock had been held at each sample.",
		lockBounds, brokerLabels...).Desc()
	// lockBounds: the broker's busy threshold is 1 s, the NOTIFYME log 0.5 s.
	lockBounds = []float64{0, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}
)

// configMillis are the configured durations sent as their own series.
var configMillis = []struct {
	key string
	m   collector.Metric
}{
	{"osPageCacheBusyTimeOutMills", brokerMetric("broker_config_page_cache_busy_timeout_seconds",
		"Lock hold above which the broker declares the page cache busy and fast-fails sends (config osPageCacheBusyTimeOutMills, default 1000 ms).", prometheus.GaugeValue)},
	{"waitTimeMillsInSendQueue", brokerMetric("broker_config_send_queue_wait_timeout_seconds",
		"Send-queue wait above which fast failure rejects a request with SYSTEM_BUSY (config waitTimeMillsInSendQueue, default 200 ms).", prometheus.GaugeValue)},
}

var configKeys = []string{"flushDiskType", "brokerRole", "transientStorePoolEnable", "warmMapedFileEnable",
	"transferMsgByHeap", "useReentrantLockWhenPutMessage", "brokerFastFailureEnable", "fastFailIfNoBufferInStorePool"}

var configLabels = []string{"flush_disk_type", "broker_role", "transient_store_pool_enable", "warm_maped_file_enable",
	"transfer_msg_by_heap", "use_reentrant_lock_when_put_message", "broker_fast_failure_enable", "fast_fail_if_no_buffer_in_store_pool"}
