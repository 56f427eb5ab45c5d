package redis

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The redis collector's metrics, each declared once (docs/metrics.md lists
// them, TestMetricsDoc checks it). Every series carries addr, the target's
// label (spec.go).
var (
	upDesc = collector.NewMetric("redis_up",
		"1 if the last scrape of the Redis target answered INFO within --redis.timeout, else 0 (stall_redis_down_reason says why).", prometheus.GaugeValue, "addr")
	downReasonDesc = collector.NewMetric("redis_down_reason",
		"1 for why the last scrape of a target that is down failed (connection, AUTH or reply); absent while it is up.",
		prometheus.GaugeValue, "addr", "reason")
	refusedDesc = collector.NewMetric("redis_command_refused",
		"1 if the target answered the last CLIENT LIST, CONFIG GET or MEMORY STATS with an error reply, or MEMORY STATS with a reply over 1 MiB; 0 if it answered.",
		prometheus.GaugeValue, "addr", "cmd")
	oversizedDesc = collector.NewMetric("redis_oversized_replies_total",
		"Replies refused because the size their RESP header announced exceeded its limit (--redis.max-reply-bytes for CLIENT LIST).", prometheus.CounterValue, "addr")
	budgetRefusedDesc = collector.NewMetric("redis_reply_budget_refusals_total",
		"Replies over 64 KiB dropped because the exporter-wide reply memory budget (8 MiB) stayed full until the deadline.", prometheus.CounterValue, "addr")
	scrapeSecondsDesc = collector.NewMetric("redis_scrape_duration_seconds",
		"Wall time of this target's last scrape (all commands, parsing included), as measured by the exporter.", prometheus.GaugeValue, "addr")
	infoDesc = collector.NewMetric("redis_server_info",
		"Redis server version and replication role (INFO server redis_version, INFO replication role); always 1.", prometheus.GaugeValue, "addr", "version", "role")
	clientsMemDesc = collector.NewMetric("redis_clients_memory_bytes",
		"Memory used by client connections, buffers included, by type (MEMORY STATS clients.*, or INFO mem_clients_* before 4.0).",
		prometheus.GaugeValue, "addr", "type")
	memMaxDesc = collector.NewMetric("redis_memory_max_bytes",
		"The maxmemory setting; 0 means no limit (INFO maxmemory, CONFIG GET maxmemory before 3.2).", prometheus.GaugeValue, "addr")
	datasetRatioDesc = collector.NewMetric("redis_memory_dataset_ratio",
		"Share of net memory used by the dataset, 0–1 (MEMORY STATS dataset.percentage / 100; INFO used_memory_dataset_perc).", prometheus.GaugeValue, "addr")

	obLimitDesc = collector.NewMetric("redis_client_output_buffer_limit_bytes",
		"client-output-buffer-limit per class (normal|replica|pubsub) and limit (hard|soft); 0 means no limit (CONFIG GET client-output-buffer-limit, cached).",
		prometheus.GaugeValue, "addr", "class", "limit")
	obLimitSecondsDesc = collector.NewMetric("redis_client_output_buffer_limit_soft_seconds",
		"Seconds a client may stay above the soft output-buffer limit (CONFIG GET client-output-buffer-limit, cached).",
		prometheus.GaugeValue, "addr", "class")
	obUnlimitedDesc = collector.NewMetric("redis_client_output_buffer_limit_unlimited",
		"1 if neither the hard nor the soft limit bounds the class's output buffers (both 0 in CONFIG GET client-output-buffer-limit), else 0.",
		prometheus.GaugeValue, "addr", "class")

	cmdCallsDesc = collector.NewMetric("redis_commands_total",
		"Calls per command since start or CONFIG RESETSTAT (INFO commandstats calls); 7.0+ names subcommands as container|sub, e.g. cluster|nodes.",
		prometheus.CounterValue, "addr", "cmd")
	cmdSecondsDesc = collector.NewMetric("redis_command_duration_seconds_total",
		"Time spent executing each command on Redis' main thread (INFO commandstats usec / 1e6).", prometheus.CounterValue, "addr", "cmd")

	clClientsDesc = collector.NewMetric("redis_client_list_clients",
		"Clients in the last CLIENT LIST, replica connections excluded as in INFO connected_clients.", prometheus.GaugeValue, "addr")
	clOmemDesc = collector.NewMetric("redis_client_output_buffer_bytes",
		"Sum of every client's output buffer list (CLIENT LIST omem, last run).", prometheus.GaugeValue, "addr")
	clMaxOmemDesc = collector.NewMetric("redis_client_max_output_buffer_bytes",
		"The largest single client output buffer list (CLIENT LIST omem, last run).", prometheus.GaugeValue, "addr")
	clTotMemDesc = collector.NewMetric("redis_client_memory_bytes",
		"Sum of all memory used by clients (CLIENT LIST tot-mem, 6.0.9+, last run).", prometheus.GaugeValue, "addr")
	clPendingDesc = collector.NewMetric("redis_client_pending_output_clients",
		"Clients with replies waiting to be written: oll > 0 or omem > 0 (CLIENT LIST, last run).", prometheus.GaugeValue, "addr")
	clOllDesc = collector.NewMetric("redis_client_output_list_blocks",
		"Sum of reply-list blocks queued for clients (CLIENT LIST oll, last run).", prometheus.GaugeValue, "addr")
	clGroupOmemDesc = collector.NewMetric("redis_client_group_output_buffer_bytes",
		"Output buffer bytes of the top client groups with non-zero omem, the rest as group=\"other\" (CLIENT LIST omem).",
		prometheus.GaugeValue, "addr", "group")
	clGroupClientsDesc = collector.NewMetric("redis_client_group_clients",
		"Clients in each exported client group; group=\"other\" counts the rest (CLIENT LIST, last run).", prometheus.GaugeValue, "addr", "group")
	clCmdOmemDesc = collector.NewMetric("redis_client_output_buffer_by_command_bytes",
		"Output buffer bytes by the client's last command (CLIENT LIST cmd; top K with non-zero omem, cmd=\"other\" the rest, cmd=\"none\" for NULL).",
		prometheus.GaugeValue, "addr", "cmd")
	clLastRunDesc = collector.NewMetric("redis_client_list_last_run_timestamp_seconds",
		"Unix time of the last CLIENT LIST the exporter ran on this target (the age of the redis_client_* aggregates).", prometheus.GaugeValue, "addr")
	clDurationDesc = collector.NewMetric("redis_client_list_duration_seconds",
		"Time from sending the last CLIENT LIST to the end of its reply, which is aggregated as it arrives.", prometheus.GaugeValue, "addr")
	clReplyBytesDesc = collector.NewMetric("redis_client_list_reply_bytes",
		"Size of the last CLIENT LIST reply.", prometheus.GaugeValue, "addr")
	clRunsDesc = collector.NewMetric("redis_client_list_runs_total",
		"CLIENT LIST commands the exporter sent to this target since it started.", prometheus.CounterValue, "addr")
)

// infoMetrics are the INFO fields exported as they are: a new field is
// one more entry. A field the server does not print (another
// version: docs/redis.md, Signals and versions) is not exported; one that
// is not a number is counted as bad input (redis_info_value). Fields with
// a second source (MEMORY STATS, CONFIG GET) are sent by sendInfo.
var infoMetrics = []struct {
	field  string
	metric collector.Metric
}{
	{"uptime_in_seconds", collector.NewMetric("redis_uptime_seconds",
		"Seconds since the Redis server started (INFO uptime_in_seconds); a drop is a restart.", prometheus.GaugeValue, "addr")},
	{"connected_clients", collector.NewMetric("redis_clients_connected",
		"Client connections, replicas excluded (INFO connected_clients).", prometheus.GaugeValue, "addr")},
	{"client_recent_max_output_buffer", collector.NewMetric("redis_client_recent_max_output_buffer_bytes",
		"Largest output buffer of any client over the last seconds (INFO client_recent_max_output_buffer, 5.0+; absent before).", prometheus.GaugeValue, "addr")},
	{"client_recent_max_input_buffer", collector.NewMetric("redis_client_recent_max_input_buffer_bytes",
		"Largest query buffer of any client over the last seconds (INFO client_recent_max_input_buffer, 5.0+).", prometheus.GaugeValue, "addr")},
	{"total_net_output_bytes", collector.NewMetric("redis_output_bytes_total",
		"Bytes Redis wrote to the network, replication included (INFO total_net_output_bytes).", prometheus.CounterValue, "addr")},
	{"total_net_input_bytes", collector.NewMetric("redis_input_bytes_total",
		"Bytes Redis read from the network (INFO total_net_input_bytes).", prometheus.CounterValue, "addr")},
	{"used_memory", collector.NewMetric("redis_memory_used_bytes",
		"Memory allocated by Redis (INFO used_memory).", prometheus.GaugeValue, "addr")},
	{"evicted_keys", collector.NewMetric("redis_evicted_keys_total",
		"Keys evicted because of maxmemory (INFO evicted_keys).", prometheus.CounterValue, "addr")},
	{"evicted_clients", collector.NewMetric("redis_evicted_clients_total",
		"Clients evicted because of maxmemory-clients (INFO evicted_clients, 7.0+).", prometheus.CounterValue, "addr")},
	{"client_output_buffer_limit_disconnections", collector.NewMetric("redis_client_output_buffer_limit_disconnections_total",
		"Clients closed for exceeding client-output-buffer-limit (INFO client_output_buffer_limit_disconnections, 7.4+).", prometheus.CounterValue, "addr")},
	{"rejected_connections", collector.NewMetric("redis_rejected_connections_total",
		"Connections refused because of maxclients (INFO rejected_connections).", prometheus.CounterValue, "addr")},
	{"total_connections_received", collector.NewMetric("redis_connections_received_total",
		"Connections accepted (INFO total_connections_received).", prometheus.CounterValue, "addr")},
}
