package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func init() { register("stall-capacity.json", capacity) }

// The row keys of the ranked tables: what one row is.
const (
	byHost   = "job, instance"
	byDevice = "job, instance, device"
	byRedis  = "job, instance, addr"
	byBroker = "rocketmq_cluster, broker, broker_id" // every exporter that reads a broker reports it
	byComm   = "job, instance, comm, main, cgroup"
)

// rollup is one series of alerts/capacity.yml as a table column or a
// ranking: its worst value over the dashboard's range per key, where worst
// is the largest (max) or the smallest (min).
type rollup struct {
	name, key, worst string
}

func hi(name, key string) rollup { return rollup{name, key, "max"} }
func lo(name, key string) rollup { return rollup{name, key, "min"} }

// sel is the roll-up's selector with the job and instance matchers:
// name{SEL} or, for a name given with matchers, name{SEL,matchers}.
func (r rollup) sel() string {
	if name, m, ok := strings.Cut(r.name, "{"); ok {
		return name + "{SEL," + m
	}
	return r.name + "{SEL}"
}

// overRange is the worst value of each key over the range.
func (r rollup) overRange() string {
	return fmt.Sprintf("%[1]s by (%[2]s) (%[1]s_over_time(%[3]s[$__range]))", r.worst, r.key, r.sel())
}

// perHour is each series' value in the hour before each step of a
// subquery (an hourly roll-up has one sample in it). It aggregates nothing:
// an aggregation at each of the 720 steps of 30 days costs several times
// the stepping itself, so the subqueries compare series with a worst value
// computed once and aggregate their result.
func (r rollup) perHour() string {
	return fmt.Sprintf("%s_over_time(%s[1h])", r.worst, r.sel())
}

// when is the time of the worst value in milliseconds: the last 3-hour
// step at which the worst of the 3 hours before it equals the range's worst
// (the @ end() side is evaluated once per query). That sample covers an
// hour, so the worst value lies in the 4 hours before the step: when is
// their middle, within 2 hours. Steps of 3 hours cost a third of hourly
// ones (the stepping is the dearest part of the dashboard: 1,000 hosts
// with two disks are 2,000 series x 720 hourly steps over 30 days).
func (r rollup) when() string {
	cmp := ">="
	if r.worst == "min" {
		cmp = "<="
	}
	worstAtEnd := strings.Replace(r.overRange(), "[$__range]", "[$__range] @ end()", 1)
	return fmt.Sprintf("(max by (%s) (max_over_time(timestamp(%s_over_time(%s[3h]) %s on (%s) group_left %s)[$__range:3h])) - 7200) * 1000",
		r.key, r.worst, r.sel(), cmp, r.key, worstAtEnd)
}

// hoursOver counts the hours of the range in which the key's value passed
// threshold (an alert's threshold: how often it came near paging).
func (r rollup) hoursOver(threshold string) string {
	return fmt.Sprintf("max by (%s) (count_over_time((%s %s)[$__range:1h]))", r.key, r.perHour(), threshold)
}

// total sums an hourly increase over the range.
func (r rollup) total() string {
	return fmt.Sprintf("sum by (%s) (sum_over_time(%s[$__range]))", r.key, r.sel())
}

// daysUntil is the forecast: days until the straight line fitted through
// the daily peaks of the range reaches limit (0 when it is already there);
// no value when the trend is flat or falling.
func daysUntil(daily, key, limit string) string {
	fit := fmt.Sprintf("predict_linear(%s{SEL}[$__range], 0)", daily)
	slope := fmt.Sprintf("deriv(%s{SEL}[$__range])", daily)
	return fmt.Sprintf("min by (%s) (clamp_min((%s - %s) / (%s * 86400), 0) and %s > 0)", key, limit, fit, slope, slope)
}

// growth is the trend: the value of the line fitted through a roll-up at
// the end of the range over its value at the start (2 = doubled).
func growth(rollup, key string) string {
	return fmt.Sprintf("max by (%[1]s) (predict_linear(%[2]s{SEL}[$__range], 0) / (predict_linear(%[2]s{SEL}[$__range], -$__range_s) > 0))", key, rollup)
}

// column is one column of a ranked table. A count of hours (unit "h")
// shows 0, not an empty cell, for the rows it found no hour for.
type column struct {
	title, unit, expr string
}

// whenColumn is the column that says when a ranking's worst value was.
func whenColumn(r rollup) column {
	return column{"When (±2 h)", "time:YYYY-MM-DD HH:mm", r.when()}
}

var refIDs = "ABCDEFGHIJ"

// ranked is a table of the $top worst keys of rank over the range, worst
// first, with further columns for the same rows (each query restricted to
// the ranked keys, the rows merged on their labels).
func ranked(title, description, key string, rank column, direction string, more ...column) *table.PanelBuilder {
	top := fmt.Sprintf("%s($top, %s)", direction, rank.expr)
	p := tablePanel(title, description, rank.unit,
		tableQuery(top).RefId("A")).Span(12).Height(9)
	rename := map[string]any{"Value #A": rank.title}
	for i, c := range more {
		id := refIDs[i+1 : i+2]
		expr := fmt.Sprintf("%s and on (%s) %s", c.expr, key, top)
		if c.unit == "h" {
			expr = fmt.Sprintf("(%s) or 0 * %s", expr, top)
		}
		p.WithTarget(tableQuery(expr).RefId(id))
		rename["Value #"+id] = c.title
		p.OverrideByName(c.title, []dashboard.DynamicConfigValue{{Id: "unit", Value: c.unit}})
	}
	sortBy := common.NewTableSortByFieldStateBuilder().DisplayName(rank.title).Desc(direction == "topk")
	return p.Transformations([]dashboard.DataTransformerConfig{
		transform("merge", map[string]any{}),
		transform("organize", map[string]any{"excludeByName": map[string]any{"Time": true}, "renameByName": rename}),
	}).SortBy([]cog.Builder[common.TableSortByFieldState]{sortBy})
}

// crossed is one series of a per-day bar chart: the keys (counted per
// $group) whose hourly roll-up passed an alert's threshold that day.
func crossed(r rollup, threshold, legend string) *prometheus.DataqueryBuilder {
	return q(fmt.Sprintf("count by ($group) (%[1]s by ($group, %[2]s) (%[1]s_over_time(%[3]s[$__interval])) %[4]s)",
		r.worst, r.key, r.sel(), threshold), "{{$group}} "+legend)
}

// perDay is a bar chart with one bar per day (the panel's minimum
// interval): counts of hosts, devices, instances or brokers.
func perDay(title, description string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	for i, q := range queries {
		q.RefId(refIDs[i : i+1])
	}
	return bars(graph(title, description+" Each bar counts the 24 hours (UTC) before its date; per $group.", "short", queries...)).
		Interval("1d").Span(12).Height(9)
}

// capacity is the capacity-review dashboard: over the last 30 days, which
// hosts, disks, Redis instances and brokers came closest to their limits,
// how often the fleet crossed each alert's threshold, and where the trend
// leads. It reads only the roll-ups of alerts/capacity.yml (and the vm.*
// tunables at the end of the range).
func capacity() *dashboard.DashboardBuilder {
	b := newBoard("stall-capacity", "Stall / Capacity review",
		"Once a month, over the whole fleet: who came closest to a limit, how often the fleet crossed each alert's threshold, which trends lead to a limit, which tunables differ. Reads the hourly and daily roll-ups of alerts/capacity.yml (docs/capacity.md): install them first, and expect data from the first full hour on.",
		"instance:stall_vm_dirty_throttle_ratio:max1h",
		customVar("group", "Group by", "job", "job", "cluster", "role")).
		Time("now-30d", "now").
		Refresh("")

	pageCacheCapacity(b)
	diskCapacity(b)
	memoryCapacity(b)
	redisCapacity(b)
	rocketmqCapacity(b)
	dnsCapacity(b)
	tunables(b)
	return b
}

func pageCacheCapacity(b *dashboard.DashboardBuilder) {
	ratio := hi("instance:stall_vm_dirty_throttle_ratio:max1h", byHost)
	throttled := hi("instance:stall_vm_dirty_throttled_seconds:increase1h", byHost)
	b.WithRow(row("Page cache"))
	b.WithPanel(ranked("Hosts closest to the dirty throttle point",
		"Peak dirty throttle ratio over the range ((dirty + writeback) / the point where balance_dirty_pages() throttles writers: at 100 % every writer sleeps), worst first; the time writers were throttled (1 s sampler) and the hours in which they were; and, from the daily peaks, the days until the fitted trend reaches the throttle point (empty: flat or falling).",
		byHost, column{"Peak throttle ratio", "percentunit", ratio.overRange()}, "topk",
		whenColumn(ratio),
		column{"Time throttled", "s", throttled.total()},
		column{"Hours throttled", "h", throttled.hoursOver("> 0")},
		column{"Days to throttle point", "d", daysUntil("instance:stall_vm_dirty_throttle_ratio:max1d", byHost, "1")},
	))
	b.WithPanel(perDay("Hosts that crossed a page-cache threshold, per day",
		"Hosts whose dirty pages went past DirtyPagesNearThrottle's threshold (half-way from background writeback to the throttle point), past the throttle point itself, or that were throttled 5 % of a minute (WritersThrottledOnDirtyPages). The alerts also need their for: duration: this is how often the fleet came near paging.",
		crossed(hi("instance:stall_vm_dirty_writeback_band:mean1m_max1h", byHost), "> 0.5", "DirtyPagesNearThrottle"),
		crossed(ratio, ">= 1", "at the throttle point"),
		crossed(hi("instance:stall_vm_dirty_throttled_seconds:rate1m_max1h", byHost), "> 0.05", "WritersThrottledOnDirtyPages"),
	))
	b.WithPanel(bars(graph("Time writers were throttled per day, worst hosts",
		"Seconds per day in which the 1 s sampler saw the throttle ratio at or above 1, for the $top hosts of each day. Each bar covers the 24 hours (UTC) before its date.",
		"s",
		q(`topk($top, sum by (job, instance) (sum_over_time(instance:stall_vm_dirty_throttled_seconds:increase1h{SEL}[$__interval])) > 0)`, "{{instance}}"),
	)).Interval("1d").Span(24))
}

func diskCapacity(b *dashboard.DashboardBuilder) {
	p99 := hi("instance_device:stall_disk_await_seconds:p99_1h", byDevice)
	util := hi("instance_device:stall_disk_utilization_ratio:max1h", byDevice)
	median := hi("instance_device:stall_disk_await_seconds:p50_1m_max1h", byDevice)
	b.WithRow(row("Disks (1 s sampler)"))
	b.WithPanel(ranked("Devices with the slowest hour",
		"The worst hourly 99th percentile of each device's per-second await over the range (the sampler's histogram, not scrape averages), worst first; the peak per-second utilisation (to the histogram's bucket: 90, 99 or 100 %); the hours in which the median await passed DiskAwaitHigh's 100 ms.",
		byDevice, column{"Worst hourly p99 await", "s", p99.overRange()}, "topk",
		whenColumn(p99),
		column{"Peak utilisation", "percentunit", util.overRange()},
		column{"Hours median > 100 ms", "h", median.hoursOver("> 0.1")},
	))
	b.WithPanel(ranked("Devices whose await grows fastest",
		"The trend of each device's hourly p99 await: the straight line fitted through every hour of the range, its value at the end over its value at the start (2 = doubled over the range), fastest first, with the fitted p99 now. Every hour counts, so one slow hour (a backup) hardly moves it; a disk whose latency keeps growing at a steady load is wearing out or filling up.",
		byDevice, column{"Growth over the range", "suffix:×", growth(p99.name, byDevice)}, "topk",
		column{"Hourly p99 now (fitted)", "s", fmt.Sprintf("max by (%s) (predict_linear(%s{SEL}[$__range], 0))", byDevice, p99.name)},
		column{"Worst hourly p99 await", "s", p99.overRange()},
	))
	b.WithPanel(perDay("Devices that crossed a disk threshold, per day",
		"Devices whose median one-second await over a minute passed DiskAwaitHigh's 100 ms, and devices that spent a whole sampled second fully busy.",
		crossed(median, "> 0.1", "DiskAwaitHigh"),
		crossed(util, ">= 1", "100 % busy"),
	).Span(24))
}

func memoryCapacity(b *dashboard.DashboardBuilder) {
	stalls := hi("instance:stall_vm_allocation_stalls:increase1h", byHost)
	rate := hi("instance:stall_vm_allocation_stalls:rate2m_max1h", byHost)
	psi := "instance_resource:stall_pressure_full_stalled_seconds:rate2m_max1h"
	psiMem := hi(psi+`{resource="memory"}`, byHost)
	zone := lo("instance:stall_vm_zone_free_over_low_watermark:min1h", byHost)
	b.WithRow(row("Memory and reclaim"))
	b.WithPanel(ranked("Hosts with the most allocation stalls",
		"Allocations that had to reclaim memory themselves (direct reclaim) over the range, most first; the peak rate over 2 minutes (DirectReclaimStalls pages above 1/s) and when; the peak share of 2 minutes with every task stalled on memory or on I/O (PSI full).",
		byHost, column{"Allocation stalls", "short", stalls.total()}, "topk",
		column{"Peak stalls/s (2 m)", "ops", rate.overRange()},
		whenColumn(rate),
		column{"Peak PSI memory full", "percentunit", psiMem.overRange()},
		column{"Peak PSI io full", "percentunit", hi(psi+`{resource="io"}`, byHost).overRange()},
	))
	b.WithPanel(ranked("Hosts with the most memory pressure",
		"Peak share of 2 minutes in which every non-idle task was stalled on memory (PSI memory full; MemoryPressureFull warns above 1 %), worst first, when, and the hours above 1 %.",
		byHost, column{"Peak PSI memory full", "percentunit", psiMem.overRange()}, "topk",
		whenColumn(psiMem),
		column{"Hours above 1 %", "h", psiMem.hoursOver("> 0.01")},
		column{"Memory full stalled", "s", hi(`instance_resource:stall_pressure_full_stalled_seconds:increase1h{resource="memory"}`, byHost).total()},
	))
	b.WithPanel(ranked("Hosts with the least free memory above the low watermark",
		"Lowest free memory of any zone of the host over the range against that zone's low watermark, lowest first: below 1 kswapd is reclaiming; near the min watermark (usually 0.8 of low) allocations stall in direct reclaim. Raise vm.min_free_kbytes or vm.watermark_scale_factor where a busy host lives near 1; the page-cache dashboard shows which zone.",
		byHost, column{"Lowest free / low watermark", "suffix:×", zone.overRange()}, "bottomk",
		whenColumn(zone),
		column{"Hours below the low watermark", "h", zone.hoursOver("< 1")},
	))
	b.WithPanel(perDay("Hosts that crossed a memory threshold, per day",
		"Hosts with allocation stalls above DirectReclaimStalls' 1/s, with PSI memory full above MemoryPressureFull's 1 %, and with a zone below its low watermark.",
		crossed(rate, "> 1", "DirectReclaimStalls"),
		crossed(psiMem, "> 0.01", "MemoryPressureFull"),
		crossed(zone, "< 1", "zone below low watermark"),
	))
}

func redisCapacity(b *dashboard.DashboardBuilder) {
	used := hi("addr:stall_redis_memory_used_over_max:max1h", byRedis)
	clients := hi("addr:stall_redis_clients_memory_over_max:max1h", byRedis)
	pending := hi("addr:stall_redis_client_pending_output_clients:max1h", byRedis)
	nodes := hi("addr:stall_redis_commands_cluster_nodes:rate5m_max1h", byRedis)
	b.WithRow(row("Redis"))
	b.WithPanel(ranked("Redis instances closest to maxmemory",
		"Peak used memory against maxmemory over the range (instances with a limit), worst first; the share of it held by normal clients (output buffers count towards used memory); and the days until the trend of the daily peaks reaches maxmemory (evictions or, without an eviction policy, errors on writes).",
		byRedis, column{"Peak used / maxmemory", "percentunit", used.overRange()}, "topk",
		whenColumn(used),
		column{"Peak clients / maxmemory", "percentunit", clients.overRange()},
		column{"Days to maxmemory", "d", daysUntil("addr:stall_redis_memory_used_over_max:max1d", byRedis, "1")},
	))
	b.WithPanel(ranked("Redis instances with the most client memory",
		"Peak memory of normal clients (mostly replies queued in output buffers) against maxmemory, worst first; the peak number of clients with replies waiting (RedisClientsWaitingOnOutput above 20) and the days until the daily peaks reach maxmemory at their trend.",
		byRedis, column{"Peak clients / maxmemory", "percentunit", clients.overRange()}, "topk",
		whenColumn(clients),
		column{"Peak clients with pending output", "short", pending.overRange()},
		column{"Peak clients memory", "bytes", hi("addr_type:stall_redis_clients_memory_bytes:max1h", byRedis).overRange()},
		column{"Days to maxmemory", "d", daysUntil("addr:stall_redis_clients_memory_over_max:max1d", byRedis, "1")},
	))
	b.WithPanel(ranked("Redis instances with the most CLUSTER NODES calls",
		"Peak CLUSTER NODES calls per second over 5 minutes, worst first, when, and the hours above RedisClusterNodesStorm's 10/s: clients refreshing the topology far too often.",
		byRedis, column{"Peak CLUSTER NODES/s", "ops", nodes.overRange()}, "topk",
		whenColumn(nodes),
		column{"Hours above 10/s", "h", nodes.hoursOver("> 10")},
	))
	b.WithPanel(perDay("Redis instances that crossed a threshold, per day",
		"Instances whose normal clients held more than RedisClientOutputBuffersGrowing's 256 MiB, with more than RedisClientsWaitingOnOutput's 20 clients waiting, or with more than RedisClusterNodesStorm's 10 CLUSTER NODES calls a second.",
		crossed(hi("addr_type:stall_redis_clients_memory_bytes:max1h", byRedis), "> 256 * 2^20", "RedisClientOutputBuffersGrowing"),
		crossed(pending, "> 20", "RedisClientsWaitingOnOutput"),
		crossed(nodes, "> 10", "RedisClusterNodesStorm"),
	))
}

func rocketmqCapacity(b *dashboard.DashboardBuilder) {
	lock := hi("broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h", byBroker)
	over := hi("broker:stall_rocketmq_commitlog_lock_held_over_0_5s:increase1m_max1h", byBroker)
	wait := hi("broker:stall_rocketmq_send_queue_head_wait_seconds:max1h", byBroker)
	put := hi("broker:stall_rocketmq_put_latency_seconds:p99_5m_max1h", byBroker)
	b.WithRow(row("RocketMQ"))
	b.WithPanel(ranked("Brokers with the longest CommitLog lock holds",
		"The worst hourly 99th percentile of the CommitLog put lock's hold time (sampled every second), worst first; the peak send-queue head wait (fast failure at waitTimeMillsInSendQueue, 200 ms by default), the peak put latency P99, the hours with more than 2 holds over 0.5 s a minute (RocketMQCommitLogLockHeldLong), and the days until the daily peaks reach osPageCacheBusyTimeOutMills (1 s), past which sends fail with 'page cache busy'.",
		byBroker, column{"Worst hourly lock p99", "s", lock.overRange()}, "topk",
		whenColumn(lock),
		column{"Peak send-queue head wait", "s", wait.overRange()},
		column{"Peak put latency p99", "s", put.overRange()},
		column{"Hours with holds > 0.5 s", "h", over.hoursOver("> 2")},
		column{"Days to 1 s", "d", daysUntil("broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h_max1d", byBroker, "1")},
	).Span(24))
	b.WithPanel(perDay("Brokers that crossed a threshold, per day",
		"Brokers with more than 2 lock holds over 0.5 s in a minute (RocketMQCommitLogLockHeldLong), a send-queue head wait over 100 ms (RocketMQSendQueueWaitHigh with the default waitTimeMillsInSendQueue), or a put P99 over 0.5 s (RocketMQPutLatencyHigh).",
		crossed(over, "> 2", "RocketMQCommitLogLockHeldLong"),
		crossed(wait, "> 0.1", "RocketMQSendQueueWaitHigh"),
		crossed(put, "> 0.5", "RocketMQPutLatencyHigh"),
	).Span(24))
}

func dnsCapacity(b *dashboard.DashboardBuilder) {
	host := hi("instance:stall_dns_ptr_queries:rate1m_max1h", byHost)
	comm := hi("instance_process:stall_dns_ptr_queries:rate1m_max1h", byComm)
	b.WithRow(row("DNS (opt-in collector)"))
	b.WithPanel(ranked("Hosts sending the most PTR lookups",
		"Peak reverse (PTR) queries per second over 5 minutes leaving each host, worst first, when, and the hours above DNSReverseLookupStorm's 100/s: a consumer resolving the sender of every message (incident 4).",
		byHost, column{"Peak PTR/s", "ops", host.overRange()}, "topk",
		whenColumn(host),
		column{"Hours above 100/s", "h", host.hoursOver("> 100")},
	))
	b.WithPanel(ranked("Processes sending the most PTR lookups",
		"Peak PTR queries per second over 5 minutes by process and cgroup (ebpf attribution), worst first: the one at the top of a storm is the one to fix.",
		byComm, column{"Peak PTR/s", "ops", comm.overRange()}, "topk",
		whenColumn(comm),
		column{"Hours above 100/s", "h", comm.hoursOver("> 100")},
	))
	b.WithPanel(perDay("Hosts that crossed DNSReverseLookupStorm's threshold, per day",
		"Hosts sending more than 100 PTR queries a second, from one process or from the whole host.",
		q(`count by ($group) (max by ($group, job, instance) (max_over_time(instance:stall_dns_ptr_queries:rate1m_max1h{SEL}[$__interval]) > 100 or max by ($group, job, instance) (max_over_time(instance_process:stall_dns_ptr_queries:rate1m_max1h{SEL}[$__interval])) > 100))`, "{{$group}} DNSReverseLookupStorm"),
	).Span(24))
}

// tunables compares the vm.* settings of the fleet at the end of the range:
// the incidents' fixes were tunables, and a host left out of a change is a
// host with the old risk.
func tunables(b *dashboard.DashboardBuilder) {
	const values = `count_values by (name) ("value", last_over_time(instance:stall_vm_sysctl:last1h{SEL}[1h]))`
	b.WithRow(row("vm.* tunables"))
	b.WithPanel(tablePanel("vm.* tunables across the fleet",
		"Each vm.* setting with each value it has on the selected hosts and the number of hosts with that value, at the end of the range; settings with more than one value first (red). The fixes of the incidents were tunables (vm.dirty_background_ratio 10 → 5 and vm.dirty_ratio 20 → 40 in incident 5): a host left out of such a change keeps the old risk.",
		"short",
		tableQuery(values).RefId("A"),
		tableQuery(`count by (name) (`+values+`)`).RefId("B"),
	).Transformations([]dashboard.DataTransformerConfig{
		transform("merge", map[string]any{}),
		transform("organize", map[string]any{"excludeByName": map[string]any{"Time": true},
			"renameByName": map[string]any{"Value #A": "Hosts", "Value #B": "Values in the fleet"}}),
	}).SortBy([]cog.Builder[common.TableSortByFieldState]{
		common.NewTableSortByFieldStateBuilder().DisplayName("Values in the fleet").Desc(true),
	}).OverrideByName("Values in the fleet", []dashboard.DynamicConfigValue{
		{Id: "thresholds", Value: map[string]any{"mode": "absolute", "steps": []map[string]any{{"color": "green", "value": nil}, {"color": "red", "value": 2}}}},
		{Id: "custom.cellOptions", Value: map[string]any{"type": "color-background", "mode": "basic"}},
	}).Span(12).Height(9))
	b.WithPanel(tablePanel("Hosts whose tunables differ from most of the fleet",
		"The hosts whose value of a vm.* setting is not the one most hosts have, with their value, at the end of the range: the hosts to bring in line, or to explain. Empty when every setting has one value across the fleet.",
		"none",
		tableQuery(`count_values by (job, instance, name) ("value", last_over_time(instance:stall_vm_sysctl:last1h{SEL}[1h])) unless on (name, value) topk by (name) (1, `+values+`)`).RefId("A"),
	).Transformations([]dashboard.DataTransformerConfig{hide("Time", "Value")}).Span(12).Height(9))
}
