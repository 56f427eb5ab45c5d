package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

func init() { register("stall-overview.json", overview) }

// overview answers "is any host near a stall right now?": one row per
// subsystem, each panel a bar gauge of the worst instances first.
func overview() *dashboard.DashboardBuilder {
	b := newBoard("stall-overview", "Stall / Overview",
		"Is any host near a stall right now? Each panel lists the worst instances first; the subsystem dashboards (links, top right) show why.",
		"stall_scrape_collector_success")

	b.WithRow(row("Page cache, disks and kernel"))
	b.WithPanel(worst("Dirty throttle ratio",
		"(dirty + writeback) / the point where balance_dirty_pages() starts throttling writers. At 100 % every process writing to the page cache sleeps in write(); the bar's empty part is the headroom left. Worst hosts first.",
		"percentunit",
		`sort_desc(topk($top, max by (job, instance) (stall_vm_dirty_throttle_ratio{SEL})))`, "{{instance}}",
		steps("green", 0.8, "orange", 1.0, "red")).Max(1.2).Span(6))
	b.WithPanel(worst("Disk await p99 (1 s samples)",
		"99th percentile of each second's average I/O wait, from the sampler's histogram over the last $__rate_interval. Hundreds of milliseconds here is what blocks the thread holding a broker's CommitLog lock. Worst devices first.",
		"s",
		`sort_desc(topk($top, histogram_quantile(0.99, sum by (job, instance, device, le) (rate(stall_disk_await_seconds_bucket{SEL}[$__rate_interval])))))`, "{{instance}} {{device}}",
		steps("green", 0.05, "orange", 0.2, "red")).Span(6))
	b.WithPanel(worst("Allocation stalls per second",
		"Allocations that had to reclaim memory themselves (direct reclaim) before they could proceed. Any value above 0 means a latency spike for the process that allocated. Worst hosts first.",
		"ops",
		`sort_desc(topk($top, sum by (job, instance) (rate(stall_vm_allocation_stalls_total{SEL}[$__rate_interval]))))`, "{{instance}}",
		steps("green", 0.001, "orange", 1.0, "red")).Span(6))
	b.WithPanel(worst("Memory and I/O pressure (PSI full)",
		"Share of time in which every non-idle task was stalled on memory or on I/O (PSI 'full'). Above a few percent the host is stalling its applications. Worst first.",
		"percentunit",
		`sort_desc(topk($top, sum by (job, instance, resource) (rate(stall_pressure_stalled_seconds_total{SEL,scope="full",resource=~"memory|io"}[$__rate_interval]))))`, "{{instance}} {{resource}}",
		steps("green", 0.01, "orange", 0.1, "red")).Span(6))
	b.WithPanel(worst("Kernel log events in the time range",
		"Page allocation failures, hung tasks, OOM kills, I/O errors and soft lockups the kernel logged in the dashboard's time range (lower bounds: the kernel rate-limits these reports); I/O errors on devices the exporter leaves out (floppy, CD, loop …) are not in the sum. Any value above 0 deserves a look at the host's dmesg.",
		"short",
		`sort_desc(topk($top, sum by (job, instance) (increase(stall_kernel_log_events_total{SEL,event!="io_error_excluded"}[$__range]))))`, "{{instance}}",
		steps("green", 1.0, "red")).Span(9))
	b.WithPanel(worst("Failing collectors",
		"Collectors that failed or timed out in the last scrape, per exporter: a blind spot, not a stall. 0 is healthy; the exporter's log names the failure.",
		"short",
		`sort_desc(topk($top, sum by (job, instance) (1 - stall_scrape_collector_success{SEL})))`, "{{instance}}",
		steps("green", 1.0, "red")).Span(9))
	b.WithPanel(count("Scrape targets down",
		"stall_exporter targets (hosts and /probe targets of the selected jobs) Prometheus could not scrape at its last attempt. Above 0: every panel here is missing those hosts.",
		`count(up{SEL} == 0) or vector(0)`))

	b.WithRow(row("Redis"))
	b.WithPanel(worst("Redis client memory / maxmemory",
		"Memory of normal clients (mostly output buffers) as a share of maxmemory. Output buffers count towards used memory, so a growing bar eats the dataset's room and ends in evictions or an OOM kill. Targets without maxmemory are not listed. Worst first.",
		"percentunit",
		`sort_desc(topk($top, sum by (job, instance, addr) (stall_redis_clients_memory_bytes{SEL,type="normal"}) / on (job, instance, addr) (stall_redis_memory_max_bytes{SEL} > 0)))`, "{{instance}} {{addr}}",
		steps("green", 0.1, "orange", 0.3, "red")).Span(6))
	b.WithPanel(worst("Redis clients with pending output",
		"Clients whose replies are queued in Redis because they or the network cannot take them fast enough (CLIENT LIST oll or omem above 0). Dozens of them with a flat output bandwidth means the NIC is the ceiling. Worst first.",
		"short",
		`sort_desc(topk($top, max by (job, instance, addr) (stall_redis_client_pending_output_clients{SEL})))`, "{{instance}} {{addr}}",
		steps("green", 10.0, "orange", 50.0, "red")).Span(6))
	b.WithPanel(worst("Redis CLUSTER NODES calls per second",
		"Topology refreshes by clients. A few per minute is normal; hundreds per second after a client upgrade is a refresh storm whose cost grows with the number of nodes squared. Worst first.",
		"ops",
		`sort_desc(topk($top, sum by (job, instance, addr) (rate(stall_redis_commands_total{SEL,cmd=~"cluster\\|nodes|cluster"}[$__rate_interval]))))`, "{{instance}} {{addr}}",
		steps("green", 1.0, "orange", 10.0, "red")).Span(6))
	b.WithPanel(count("Redis targets not answering",
		"Redis targets whose INFO did not answer within --redis.timeout in the last scrape. Above 0: the other Redis panels miss those targets.",
		`count(stall_redis_up{SEL} == 0) or vector(0)`))

	b.WithRow(row("Network egress"))
	b.WithPanel(worst("Egress at its limit: allowance exceeded",
		"Outbound packets per second the cloud NIC shaped or dropped because the instance exceeded its bandwidth or packet-rate allowance (ENA's bw_out and pps counters). Any value above 0 is a host at its egress limit: replies queue in its services' memory (incident 7). Worst first.",
		"pps",
		`sort_desc(topk($top, sum by (job, instance, device) (rate(stall_network_allowance_exceeded_packets_total{SEL,reason=~"bw_out|pps"}[$__rate_interval]))))`, "{{instance}} {{device}}",
		steps("green", 0.01, "orange", 10.0, "red")).Span(6))
	b.WithPanel(worst("Root qdisc drops per second",
		"Packets each interface's root qdisc dropped: the host offered more than the interface sends (a shaper at its rate, a saturated NIC). Worst first.",
		"pps",
		`sort_desc(topk($top, sum by (job, instance, device) (rate(stall_qdisc_dropped_total{SEL}[$__rate_interval]))))`, "{{instance}} {{device}}",
		steps("green", 1.0, "orange", 100.0, "red")).Span(6))
	b.WithPanel(worst("Busiest seconds of transmit",
		"99th percentile of each interface's 1 s transmit rate (the sampler) over the last $__rate_interval, in bits per second: the hosts that run nearest their wire or allowance, for the capacity review. Compare with the instance type's bandwidth. Busiest first.",
		"bps",
		`sort_desc(topk($top, histogram_quantile(0.99, sum by (job, instance, device, le) (rate(stall_network_transmit_bytes_per_second_sampled_bucket{SEL}[$__rate_interval]))) * 8))`, "{{instance}} {{device}}",
		steps("green")).Span(6))
	b.WithPanel(worst("TCP send queues of the watched ports",
		"Bytes written by Redis, the broker or a --tcpqueues.port service and not yet acknowledged by their peers, summed over the port's established sockets. Megabytes that stay mean the peers or the wire do not take what the service writes. Worst first.",
		"bytes",
		`sort_desc(topk($top, max by (job, instance, service, port) (stall_tcp_send_queue_bytes{SEL})))`, "{{instance}} {{service}}:{{port}}",
		steps("green", 16.0*(1<<20), "orange", 256.0*(1<<20), "red")).Span(6))

	b.WithRow(row("RocketMQ"))
	b.WithPanel(worst("CommitLog lock held p99 (1 s samples)",
		"99th percentile of the broker's pageCacheLockTimeMills sampled every second over the last $__rate_interval. Past osPageCacheBusyTimeOutMills (1 s by default) the broker rejects sends with 'broker busy'. Worst brokers first.",
		"s",
		`sort_desc(topk($top, histogram_quantile(0.99, sum by (job, instance, rocketmq_cluster, broker, broker_id, le) (rate(stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{SEL}[$__rate_interval])))))`, "{{instance}} {{broker}}/{{broker_id}}",
		steps("green", 0.5, "orange", 1.0, "red")).Span(6))
	b.WithPanel(worst("Send-queue head wait",
		"Highest wait of the oldest request in the broker's send queue over the last $__rate_interval. At waitTimeMillsInSendQueue (200 ms by default) the broker fails sends fast with 'TIMEOUT_CLEAN_QUEUE'. Worst brokers first.",
		"s",
		`sort_desc(topk($top, max by (job, instance, rocketmq_cluster, broker, broker_id) (max_over_time(stall_rocketmq_send_queue_head_wait_seconds{SEL}[$__rate_interval]))))`, "{{instance}} {{broker}}/{{broker_id}}",
		steps("green", 0.1, "orange", 0.2, "red")).Span(6))
	b.WithPanel(worst("Flush backlog",
		"Bytes appended to the CommitLog but not yet flushed to disk. A backlog that keeps growing means the disk cannot keep up and dirty pages pile up towards the kernel's throttle point. Worst brokers first.",
		"bytes",
		`sort_desc(topk($top, max by (job, instance, rocketmq_cluster, broker, broker_id) (stall_rocketmq_flush_pending_bytes{SEL})))`, "{{instance}} {{broker}}/{{broker_id}}",
		steps("green", 256.0*(1<<20), "orange", 1024.0*(1<<20), "red")).Span(6))
	b.WithPanel(count("RocketMQ brokers not answering",
		"Brokers whose runtime info did not answer within --rocketmq.timeout in the last scrape. Above 0: the broker is down or unreachable, and the other RocketMQ panels miss it.",
		`count(stall_rocketmq_up{SEL} == 0) or vector(0)`))

	b.WithRow(row("DNS"))
	b.WithPanel(worst("PTR queries per second",
		"Reverse (PTR) lookups leaving each host (the opt-in dns collector). A few per second is normal; hundreds per second is incident 4 — a consumer resolving the sender of every message, which halved its throughput. The DNS dashboard names the process. Worst hosts first.",
		"ops",
		`sort_desc(topk($top, sum by (job, instance) (rate(stall_dns_queries_total{SEL,qtype="PTR"}[$__rate_interval]))))`, "{{instance}}",
		steps("green", 50.0, "orange", 200.0, "red")))
	b.WithPanel(worst("PTR queries per second by process",
		"The processes sending the most reverse lookups, with their cgroup (service, container or pod): the one at the top of a storm is the one to fix. Needs the collector's ebpf attribution. Worst first.",
		"ops",
		`sort_desc(topk($top, sum by (job, instance, comm, main, cgroup) (rate(stall_dns_process_queries_total{SEL,qtype="PTR"}[$__rate_interval]))))`, "{{instance}} {{comm}} {{main}} {{cgroup}}",
		steps("green", 50.0, "orange", 200.0, "red")))
	b.WithPanel(worst("DNS timeouts per second",
		"Lookups that got no answer within --dns.timeout (5 s). Each one stalls its caller for the whole timeout; above 0 means some resolver or some reverse zone is not answering. Worst hosts first.",
		"ops",
		`sort_desc(topk($top, sum by (job, instance) (rate(stall_dns_timeouts_total{SEL}[$__rate_interval]))))`, "{{instance}}",
		steps("green", 0.01, "orange", 1.0, "red")))
	return b
}
