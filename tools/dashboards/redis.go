package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

func init() { register("stall-redis.json", redisBoard) }

// target selects the chosen hosts and Redis targets.
const target = `{SEL,addr=~"$target"}`

// redisBoard is the Redis clients dashboard: who holds memory in output
// buffers, whether the network is the ceiling, the limits that would have
// stopped it, topology-refresh storms and big keys.
func redisBoard() *dashboard.DashboardBuilder {
	b := newBoard("stall-redis", "Stall / Redis clients",
		"Client output buffers and the memory they hold, who holds them, output bandwidth against the NIC's ceiling, output-buffer limits, CLUSTER NODES storms and big keys.",
		"stall_redis_up",
		subVar("target", "Target", "stall_redis_up", "addr"))

	b.WithRow(row("Client memory"))
	b.WithPanel(dashed(graph("Client memory against used memory and maxmemory",
		"Memory held by normal and replica clients (MEMORY STATS clients.normal / clients.slaves: mostly output buffers) next to used memory and maxmemory (dashed). Client memory counts in used memory, so growth here pushes the instance towards evictions or the OOM killer.",
		"bytes",
		q(`stall_redis_clients_memory_bytes`+target, "{{addr}} clients {{type}}"),
		alongside(`stall_redis_memory_used_bytes`+target, `stall_redis_clients_memory_bytes`+target, "job, instance, addr", "{{addr}} used memory"),
		alongside(`(stall_redis_memory_max_bytes`+target+` > 0)`, `stall_redis_clients_memory_bytes`+target, "job, instance, addr", "{{addr}} maxmemory"),
	), ".*maxmemory$"))
	b.WithPanel(graph("Output buffers: all clients and the largest",
		"Sum and maximum of the clients' output buffers from the last CLIENT LIST, and INFO's client_recent_max_output_buffer. Many clients with 5–7 MB each is large values read faster than the network can carry them.",
		"bytes",
		q(`stall_redis_client_output_buffer_bytes`+target, "{{addr}} all clients (CLIENT LIST)"),
		q(`stall_redis_client_max_output_buffer_bytes`+target, "{{addr}} largest client (CLIENT LIST)"),
		q(`stall_redis_client_recent_max_output_buffer_bytes`+target, "{{addr}} recent max (INFO)"),
	))
	b.WithPanel(graph("Output buffers against the Redis port's send queues",
		"Bytes waiting for the clients in two places: in Redis' output buffers (CLIENT LIST omem, all clients) and in the kernel's TCP send queues of the Redis port's established sockets (written, not yet acknowledged; the tcpqueues collector, on the Redis host). The send queues fill first: a reply moves to the socket until its buffer is full, the rest stays in Redis. Both high with a flat transmit rate below is the wire; both high for a few sockets only is those clients.",
		"bytes",
		q(`stall_redis_client_output_buffer_bytes`+target, "{{addr}} output buffers"),
		q(`stall_tcp_send_queue_bytes{SEL,service="redis"}`, "{{instance}} port {{port}} send queues"),
		q(`stall_tcp_send_queue_max_bytes{SEL,service="redis"}`, "{{instance}} port {{port}} largest send queue"),
	))
	b.WithPanel(graph("Clients with pending output",
		"Clients with replies still queued in Redis (CLIENT LIST oll or omem above 0) next to all connected clients. A large share pending means clients or the network cannot drain replies.",
		"short",
		q(`stall_redis_client_pending_output_clients`+target, "{{addr}} with pending output"),
		q(`stall_redis_clients_connected`+target, "{{addr}} connected"),
	))
	b.WithPanel(graph("Age of the CLIENT LIST aggregates",
		"Seconds since the exporter last ran CLIENT LIST on the target (--redis.client-list.mode). The buffer-by-group and by-command panels are this old.",
		"s",
		q(`time() - stall_redis_client_list_last_run_timestamp_seconds`+target, "{{addr}}"),
	))

	b.WithRow(row("Who holds the buffers"))
	b.WithPanel(graph("Output buffers by client group",
		"Output-buffer bytes of the top client groups (--redis.client-group-by: peer host by default, or client name, library, user), the rest summed as 'other'. The group at the top is the client to talk to.",
		"bytes",
		q(`stall_redis_client_group_output_buffer_bytes`+target, "{{addr}} {{group}}"),
	).Stacking(stacked()))
	b.WithPanel(graph("Output buffers by last command",
		"Output-buffer bytes by each client's last command (top commands plus 'other'). GET or HGETALL on top with a large buffer: big values; a pub/sub command: slow subscribers.",
		"bytes",
		q(`stall_redis_client_output_buffer_by_command_bytes`+target, "{{addr}} {{cmd}}"),
	).Stacking(stacked()))

	b.WithRow(row("The Redis host's egress"))
	b.WithPanel(graph("Transmit rate and its busiest seconds",
		"Bits per second each interface of the Redis host sent (rtnl_link_stats64, the egress collector) over the panel's interval, and the 99th percentile of the sampler's 1 s rates: a rate flat at a round number with the 1 s peaks on it is the instance's bandwidth allowance or the NIC's line rate. What the interval hides, the 1 s line shows.",
		"bps",
		q(`rate(stall_network_transmit_bytes_total{SEL}[$__rate_interval]) * 8`, "{{instance}} {{device}}"),
		q(`histogram_quantile(0.99, sum by (job, instance, device, le) (rate(stall_network_transmit_bytes_per_second_sampled_bucket{SEL}[$__rate_interval]))) * 8`, "{{instance}} {{device}} p99 of 1 s"),
	))
	b.WithPanel(graph("Root qdisc backlog",
		"Bytes queued in each interface's root qdisc (tc -s qdisc's backlog). A NIC that keeps up drains its queue between packets; a backlog that stays is an interface at its rate (a tbf shaper, a saturated NIC).",
		"bytes",
		q(`stall_qdisc_backlog_bytes{SEL}`, "{{instance}} {{device}} {{kind}}"),
	))
	b.WithPanel(graph("Packets held back: the cloud's allowance and the qdisc",
		"Outbound packets per second the cloud NIC shaped or dropped for the instance's bandwidth (bw_out) or packet-rate (pps) allowance (ENA's ethtool counters; other clouds' NICs have none), and those the root qdisc dropped. Above 0 for minutes is HostEgressAtLimit; next to growing output buffers it is incident 7's cause.",
		"pps",
		q(`rate(stall_network_allowance_exceeded_packets_total{SEL,reason=~"bw_out|pps"}[$__rate_interval])`, "{{instance}} {{device}} allowance {{reason}}"),
		q(`rate(stall_qdisc_dropped_total{SEL}[$__rate_interval])`, "{{instance}} {{device}} qdisc drops"),
	))
	b.WithPanel(graph("Redis sockets waiting on their peers",
		"Established sockets of the Redis port with bytes in their send queue, next to all established sockets of the port (tcpqueues). Most of them waiting at once, with a flat transmit rate, is the wire; a few is slow clients.",
		"short",
		q(`stall_tcp_send_queue_sockets{SEL,service="redis"}`, "{{instance}} port {{port}} waiting"),
		q(`stall_tcp_established_sockets{SEL,service="redis"}`, "{{instance}} port {{port}} established"),
	))

	b.WithRow(row("Network, limits and topology refreshes"))
	b.WithPanel(graph("Network bandwidth",
		"Bytes Redis wrote to and read from clients per second. Output flat at one value while buffers grow is the NIC's (or the instance type's) ceiling: replies are queuing in Redis' memory.",
		"Bps",
		q(`rate(stall_redis_output_bytes_total`+target+`[$__rate_interval])`, "{{addr}} output"),
		q(`rate(stall_redis_input_bytes_total`+target+`[$__rate_interval])`, "{{addr}} input"),
	))
	b.WithPanel(graph("CLUSTER NODES calls",
		"Calls per second of CLUSTER NODES (before Redis 7: all CLUSTER subcommands together). Clients refresh the cluster topology with it; hundreds per second is a refresh storm that costs every client O(nodes²) to parse.",
		"ops",
		q(`sum by (job, instance, addr) (rate(stall_redis_commands_total{SEL,addr=~"$target",cmd=~"cluster\\|nodes|cluster"}[$__rate_interval]))`, "{{addr}}"),
	))
	cgroupRatio, cgroupPaused := serviceCgroupDirty("Redis'", "redis")
	b.WithPanel(cgroupRatio)
	b.WithPanel(cgroupPaused)
	b.WithPanel(tablePanel("Output-buffer limits",
		"client-output-buffer-limit per client class (CONFIG GET). 'unlimited' (red) marks a limit set to 0: a class with both limits unlimited lets one slow client grow its buffer until the instance runs out of memory — the default for normal clients.",
		"bytes",
		tableQuery(`label_join(max by (addr, class, limit) (stall_redis_client_output_buffer_limit_bytes`+target+`), "target_class", " ", "addr", "class")`),
	).Transformations([]dashboard.DataTransformerConfig{
		transform("groupingToMatrix", map[string]any{"columnField": "limit", "rowField": "target_class", "valueField": "Value"}),
	}).Mappings(mark("0", "unlimited", "red")).
		OverrideByRegexp("hard|soft", []dashboard.DynamicConfigValue{colouredCells()}).
		Span(12))
	b.WithPanel(tablePanel("Big keys",
		"The largest keys of the last complete background scan (MEMORY USAGE; --redis.bigkeys.enable). Keys of several megabytes read by many clients fill output buffers and the NIC.",
		"bytes",
		tableQuery(`topk(20, max by (addr, db, key) (stall_redis_big_key_bytes`+target+`))`),
	).Transformations([]dashboard.DataTransformerConfig{hide("Time")}).
		SortBy(sortDesc("Value")).
		Span(12))
	return b
}
