package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

func init() { register("stall-rocketmq.json", rocketmqBoard) }

// broker selects the chosen hosts and brokers. The store.log and
// watermark.log series have no broker label: they come from the broker
// whose log directory the exporter follows on its host.
const broker = `{SEL,broker=~"$broker"}`

// brokerBy is the label set a per-broker aggregation keeps.
const brokerBy = "job, instance, rocketmq_cluster, broker, broker_id"

// rocketmqBoard is the RocketMQ broker dashboard: CommitLog lock holds,
// put latency, the send queue against the fast-failure line, flush
// backlog, risky settings and the broker's own log warnings.
func rocketmqBoard() *dashboard.DashboardBuilder {
	b := newBoard("stall-rocketmq", "Stall / RocketMQ broker",
		"CommitLog lock holds sampled every second, put latency, the send queue against the fast-failure line, flush backlog, the risky storage settings and the broker's store.log and watermark.log warnings.",
		"stall_rocketmq_up",
		subVar("broker", "Broker", "stall_rocketmq_up", "broker"))

	b.WithRow(row("CommitLog lock"))
	b.WithPanel(heat("CommitLog lock held (1 s samples)",
		"pageCacheLockTimeMills sampled every --rocketmq.sample-interval (1 s): how long the current holder of the CommitLog put lock has held it. Cells at 1 s and above are holds past osPageCacheBusyTimeOutMills, when the broker rejects sends with '[PC_SYNCHRONIZED]broker busy'; holds of 0.5 s are the early warning.",
		"s",
		`sum by (le) (rate(stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket`+broker+`[$__rate_interval]))`))
	b.WithPanel(dashed(withLine(graph("Lock held against the page-cache busy timeout",
		"The lock hold at each scrape and the 99th percentile of the 1 s samples, against the broker's own osPageCacheBusyTimeOutMills (dashed) and the 1 s default (red line). Crossing it is 'broker busy' for every producer of the broker.",
		"s",
		q(`stall_rocketmq_commitlog_lock_held_seconds`+broker, "{{instance}} {{broker}}/{{broker_id}} at scrape"),
		q(`histogram_quantile(0.99, sum by (`+brokerBy+`, le) (rate(stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket`+broker+`[$__rate_interval])))`, "{{instance}} {{broker}}/{{broker_id}} p99 of 1 s samples"),
		alongside(`stall_rocketmq_broker_config_page_cache_busy_timeout_seconds`+broker, `stall_rocketmq_commitlog_lock_held_seconds`+broker, brokerBy, "{{instance}} {{broker}}/{{broker_id}} osPageCacheBusyTimeOutMills"),
	), 1.0), ".*TimeOutMills$"))

	b.WithRow(row("Put latency and send queue"))
	b.WithPanel(heat("Put latency (putMessageDistributeTime)",
		"The broker's own put-latency distribution (13 buckets from 0 to over 10 s), rolled every 60 s, so cells change once a minute. Puts in the 500 ms and higher rows are producer timeouts in the making.",
		"s",
		`sum by (le) (rate(stall_rocketmq_put_latency_seconds_bucket`+broker+`[$__rate_interval]))`))
	b.WithPanel(graph("Put latency percentiles (last 60 s window)",
		"The broker's putLatency99 and putLatency999 (4.9.4+) of its last 60 s window. P99 of a few milliseconds is healthy; seconds means the lock or the page cache is stalling puts.",
		"s",
		q(`stall_rocketmq_put_latency_window_percentile_seconds`+broker, "{{instance}} {{broker}}/{{broker_id}} p{{percentile}}"),
	))
	b.WithPanel(dashed(withLine(graph("Send-queue head wait against the fast-failure line",
		"How long the oldest request in the send queue has waited, against the broker's waitTimeMillsInSendQueue (dashed) and the 200 ms default (red line). Past it the broker drops queued sends with '[TIMEOUT_CLEAN_QUEUE]broker busy'.",
		"s",
		q(`stall_rocketmq_send_queue_head_wait_seconds`+broker, "{{instance}} {{broker}}/{{broker_id}} head wait"),
		alongside(`stall_rocketmq_broker_config_send_queue_wait_timeout_seconds`+broker, `stall_rocketmq_send_queue_head_wait_seconds`+broker, brokerBy, "{{instance}} {{broker}}/{{broker_id}} waitTimeMillsInSendQueue"),
	), 0.2), ".*waitTimeMillsInSendQueue$"))
	b.WithPanel(graph("Send queue fill",
		"Requests in the send thread pool's queue as a share of its capacity. A queue that fills while the lock is held means producers are waiting on the CommitLog.",
		"percentunit",
		q(`stall_rocketmq_send_queue_size`+broker+` / stall_rocketmq_send_queue_capacity`+broker, "{{instance}} {{broker}}/{{broker_id}}"),
	))
	b.WithPanel(graph("Puts and failed puts",
		"Messages the broker stored per second and puts that failed (4.9.3+). Failures rising with the lock or head wait are sends the broker refused.",
		"ops",
		q(`rate(stall_rocketmq_put_messages_total`+broker+`[$__rate_interval])`, "{{instance}} {{broker}}/{{broker_id}} puts"),
		q(`rate(stall_rocketmq_put_failures_total`+broker+`[$__rate_interval])`, "{{instance}} {{broker}}/{{broker_id}} failed"),
	))

	b.WithRow(row("Flush and storage"))
	b.WithPanel(graph("Flush and commit backlog",
		"CommitLog bytes not yet flushed to disk (remainHowManyDataToFlush) and, with the transient store pool, not yet committed to the file channel. A backlog that keeps growing means the disk cannot keep up with puts.",
		"bytes",
		q(`stall_rocketmq_flush_pending_bytes`+broker, "{{instance}} {{broker}}/{{broker_id}} flush"),
		q(`stall_rocketmq_commit_pending_bytes`+broker, "{{instance}} {{broker}}/{{broker_id}} commit"),
	).Span(8))
	b.WithPanel(graph("Transient store pool buffers available",
		"Free buffers of the transient store pool (transientStorePoolEnable=true only). At 0 the broker rejects puts, or falls back to the page cache with fastFailIfNoBufferInStorePool=false.",
		"short",
		q(`stall_rocketmq_transient_store_buffers_available`+broker, "{{instance}} {{broker}}/{{broker_id}}"),
	).Span(8))
	b.WithPanel(graph("CommitLog disk usage",
		"Fill of the disk holding the CommitLog (commitLogDiskRatio). At diskMaxUsedSpaceRatio (75 % by default) the broker starts deleting the oldest CommitLog files; at rocketmq.broker.diskSpaceWarningLevelRatio (90 % by default) it reports the disk full and rejects puts.",
		"percentunit",
		q(`stall_rocketmq_commitlog_disk_ratio`+broker, "{{instance}} {{broker}}/{{broker_id}}"),
	).Max(1).Span(8))
	cgroupRatio, cgroupPaused := serviceCgroupDirty("The broker's", "rocketmq_broker")
	b.WithPanel(cgroupRatio)
	b.WithPanel(cgroupPaused)
	b.WithPanel(tablePanel("Risky settings",
		"The storage settings behind the incidents, per broker (GET_BROKER_CONFIG). Red cells are the risky values: warmMapedFileEnable=true and transferMsgByHeap=false have caused send timeouts under load; ASYNC_FLUSH without the transient store pool lets dirty pages reach the kernel's throttle point with the put lock held.",
		"none",
		tableQuery(`max by (rocketmq_cluster, broker, broker_id, flush_disk_type, broker_role, transient_store_pool_enable, warm_maped_file_enable, transfer_msg_by_heap, use_reentrant_lock_when_put_message, broker_fast_failure_enable, fast_fail_if_no_buffer_in_store_pool) (stall_rocketmq_broker_config_info`+broker+`)`),
	).Transformations([]dashboard.DataTransformerConfig{hide("Time", "Value")}).
		OverrideByName("warm_maped_file_enable", []dashboard.DynamicConfigValue{
			{Id: "mappings", Value: mark("true", "true", "red", "false", "false", "green")}, colouredCells()}).
		OverrideByName("transfer_msg_by_heap", []dashboard.DynamicConfigValue{
			{Id: "mappings", Value: mark("false", "false", "red", "true", "true", "green")}, colouredCells()}).
		OverrideByName("broker_fast_failure_enable", []dashboard.DynamicConfigValue{
			{Id: "mappings", Value: mark("false", "false", "orange", "true", "true", "green")}, colouredCells()}))

	b.WithRow(row("store.log and watermark.log"))
	b.WithPanel(bars(graph("store.log warnings",
		"Warnings the broker wrote to store.log per $__rate_interval (--rocketmq.log-dir): lock holds over 500 ms (lock_slow), slow puts, slow mapped-file creation, an exhausted transient store pool, and the once-a-minute put-latency lines (pagecache_rt).",
		"short",
		q(`sum by (job, instance, event) (increase(stall_rocketmq_log_events_total{SEL}[$__rate_interval]))`, "{{instance}} {{event}}"),
	)))
	b.WithPanel(withLine(graph("Queue head wait from watermark.log",
		"99th percentile of the once-a-second queue head waits watermark.log reports per thread pool, against the 200 ms send fast-failure line. It sees every second, also between scrapes.",
		"s",
		q(`histogram_quantile(0.99, sum by (job, instance, pool, le) (rate(stall_rocketmq_log_queue_head_wait_seconds_bucket{SEL}[$__rate_interval])))`, "{{instance}} {{pool}}"),
	), 0.2))
	b.WithPanel(graph("Age of the newest log line",
		"Seconds since the newest timestamped line of store.log and watermark.log. watermark.log writes every second: an age of minutes means the broker stopped logging or the exporter follows the wrong directory.",
		"s",
		q(`time() - stall_rocketmq_log_last_line_timestamp_seconds{SEL}`, "{{instance}} {{file}}"),
	))
	return b
}
