package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func init() { register("stall-page-cache.json", pageCache) }

// dirtyWriteback is what the kernel compares with its dirty thresholds.
const dirtyWriteback = `stall_vm_dirty_bytes{SEL} + stall_vm_writeback_bytes{SEL}`

// disk selects the chosen hosts and devices.
const disk = `{SEL,device=~"$device"}`

// pageCache is the page cache, reclaim and disk dashboard: dirty pages
// against the kernel's thresholds, the sampler's await and utilisation
// histograms, reclaim and allocation stalls, zone headroom, PSI and the
// vm.* tunables.
func pageCache() *dashboard.DashboardBuilder {
	b := newBoard("stall-page-cache", "Stall / Page cache and disks",
		"Dirty pages against the kernel's thresholds, disk latency from the 1 s sampler, reclaim and allocation stalls, zone headroom, pressure and the vm.* tunables behind them.",
		"stall_vm_dirty_bytes",
		subVar("device", "Device", "stall_disk_io_time_seconds_total", "device"))

	b.WithRow(row("Dirty pages and writeback"))
	b.WithPanel(dashed(graph("Dirty + writeback against the kernel thresholds",
		"Dirty plus writeback bytes against the kernel's own limits (/proc/vmstat nr_dirty_background_threshold and nr_dirty_threshold). Above the background threshold the flusher threads write back; above the midpoint of the two (dashed, 'throttling starts') balance_dirty_pages() makes every writer sleep; at the dirty threshold writers wait the longest.",
		"bytes",
		q(dirtyWriteback, "{{instance}} dirty + writeback"),
		alongside(`stall_vm_dirty_background_threshold_bytes{SEL}`, dirtyWriteback, "job, instance", "{{instance}} background threshold"),
		alongside(`(stall_vm_dirty_threshold_bytes{SEL} + stall_vm_dirty_background_threshold_bytes{SEL}) / 2`, dirtyWriteback, "job, instance", "{{instance}} throttling starts"),
		alongside(`stall_vm_dirty_threshold_bytes{SEL}`, dirtyWriteback, "job, instance", "{{instance}} dirty threshold"),
	), ".*(threshold|throttling starts)$"))
	b.WithPanel(withLine(graph("Dirty throttle ratio",
		"(dirty + writeback) / the point where throttling starts, at each scrape and as the 99th percentile of the sampler's 1 s samples. Above the red line at 100 % (1.0) the kernel is throttling writers: a broker appending to its CommitLog or a Redis AOF rewrite sleeps in write().",
		"percentunit",
		q(`stall_vm_dirty_throttle_ratio{SEL}`, "{{instance}} at scrape"),
		q(`histogram_quantile(0.99, sum by (job, instance, le) (rate(stall_vm_dirty_throttle_ratio_sampled_bucket{SEL}[$__rate_interval])))`, "{{instance}} p99 of 1 s samples"),
	), 1.0))
	b.WithPanel(graph("Time writers were throttled",
		"Share of each second in which the sampled throttle ratio was at or above 1, so a 2 s excursion between two scrapes still shows. Above 0: writers were being throttled.",
		"percentunit",
		q(`rate(stall_vm_dirty_throttled_seconds_total{SEL}[$__rate_interval])`, "{{instance}}"),
	).Max(1))
	b.WithPanel(graph("Memory: page cache and available",
		"Page cache (Cached) and MemAvailable against MemTotal. A page cache that fills most of memory with little available means every new mapped file or allocation goes through reclaim first.",
		"bytes",
		q(`stall_memory_total_bytes{SEL}`, "{{instance}} total"),
		q(`stall_memory_cached_bytes{SEL}`, "{{instance}} page cache"),
		q(`stall_memory_available_bytes{SEL}`, "{{instance}} available"),
	))

	b.WithRow(row("Dirty pages per cgroup: containers and units"))
	b.WithPanel(withLine(graph("Dirty throttle ratio: watched cgroups beside the host",
		"Each watched service's memory cgroup (the broker's, name server's and Redis' container, pod or unit: stall_cgroup_watched) against its own throttle point, and the host against its own. With cgroup writeback (cgroup v2, memory and io controllers) the kernel pauses a writer at the stricter of the two, and a cgroup's limits are vm.dirty_* applied to the page cache its memory limit leaves it: a pod can sit at 100 % while the host reads a few percent (CgroupDirtyPagesNearThrottle). cgroup v2 only; empty on v1 hosts, which throttle by the host alone.",
		"percentunit",
		q(`stall_cgroup_dirty_throttle_ratio{SEL} and on (job, instance, cgroup) stall_cgroup_watched{SEL}`, "{{instance}} {{cgroup}}"),
		q(`stall_vm_dirty_throttle_ratio{SEL}`, "{{instance}} host"),
	), 1.0))
	b.WithPanel(graph("Time watched cgroups' writers were throttled",
		"Share of each second in which the sampler saw a watched cgroup at or above its own throttle point (stall_cgroup_dirty_throttled_seconds_total), beside the host's. Above 0: the service's writers were paused by its own cgroup's limit.",
		"percentunit",
		q(`rate(stall_cgroup_dirty_throttled_seconds_total{SEL}[$__rate_interval])`, "{{instance}} {{cgroup}}"),
		q(`rate(stall_vm_dirty_throttled_seconds_total{SEL}[$__rate_interval])`, "{{instance}} host"),
	).Max(1))
	b.WithPanel(dashed(graph("Top cgroups by dirty pages",
		"memory.stat file_dirty (v1: total_dirty) of the cgroups with the most dirty pages (the exporter keeps the top --cgroup-dirty.top and the watched ones, the rest summed as 'other'), and the throttle point of the watched ones (dashed): where the kernel starts pausing that cgroup's writers.",
		"bytes",
		q(`stall_cgroup_dirty_bytes{SEL,cgroup!="other"}`, "{{instance}} {{cgroup}}"),
		alongside(`(stall_cgroup_dirty_threshold_bytes{SEL} + stall_cgroup_dirty_background_threshold_bytes{SEL}) / 2`, `stall_cgroup_dirty_bytes{SEL,cgroup!="other"}`, "job, instance, cgroup", "{{instance}} {{cgroup}} throttling starts"),
	), ".*throttling starts$"))
	b.WithPanel(graph("Who dirties: bytes dirtied by process",
		"Bytes each process dirtied per second (/proc/<pid>/io write_bytes, counted when the page is dirtied, mmap writes included), read only while the host's or the process's cgroup's dirty pages are past the background threshold: the writers that fill the cache when it matters.",
		"Bps",
		q(`sum by (job, instance, comm, main, cgroup) (rate(stall_process_dirtied_bytes_total{SEL}[$__rate_interval]))`, "{{instance}} {{comm}} {{main}} {{cgroup}}"),
	))
	b.WithPanel(graph("Who is paused: time in balance_dirty_pages() by process",
		"Seconds per second each process's threads slept in balance_dirty_pages() (the writeback:balance_dirty_pages tracepoint, counted in the kernel; eBPF): the victims of the throttling, named by comm, JVM main class and cgroup. Above 1 when several threads sleep at once. Empty where eBPF is not allowed: then the host's and cgroups' throttled time above and io pressure remain.",
		"short",
		q(`sum by (job, instance, comm, main, cgroup) (rate(stall_dirty_throttle_pause_seconds_total{SEL}[$__rate_interval]))`, "{{instance}} {{comm}} {{main}} {{cgroup}}"),
	))

	b.WithRow(row("Disks (1 s sampler)"))
	b.WithPanel(heat("Disk await (1 s samples)",
		"Each second's average I/O wait of the selected devices, one sample per second. Cells high up are seconds in which the average request waited that long; on a healthy SSD they stay below 10 ms.",
		"s",
		`sum by (le) (rate(stall_disk_await_seconds_bucket`+disk+`[$__rate_interval]))`))
	b.WithPanel(heat("Disk utilisation (1 s samples)",
		"Each second's busy time of the selected devices. A band at 100 % means the device had I/O in flight all the time: requests queue and await climbs.",
		"percentunit",
		`sum by (le) (rate(stall_disk_utilization_ratio_bucket`+disk+`[$__rate_interval]))`))
	b.WithPanel(graph("Disk await p99 by device",
		"99th percentile of the 1 s await samples per device. Hundreds of milliseconds is the signature of writeback saturating the disk.",
		"s",
		q(`histogram_quantile(0.99, sum by (job, instance, device, le) (rate(stall_disk_await_seconds_bucket`+disk+`[$__rate_interval])))`, "{{instance}} {{device}}"),
	))
	b.WithPanel(graph("Disk utilisation by device",
		"Share of time the device had I/O in flight, from the diskstats io_ticks counter. At 100 % the device is saturated (for SSDs and RAID, 100 % may still leave parallel capacity: check await).",
		"percentunit",
		q(`rate(stall_disk_io_time_seconds_total`+disk+`[$__rate_interval])`, "{{instance}} {{device}}"),
	).Max(1))
	b.WithPanel(graph("Disk throughput",
		"Bytes read and written per second. A write rate flat at the device's limit while dirty pages grow means writeback cannot keep up.",
		"Bps",
		q(`rate(stall_disk_read_bytes_total`+disk+`[$__rate_interval])`, "{{instance}} {{device}} read"),
		q(`rate(stall_disk_written_bytes_total`+disk+`[$__rate_interval])`, "{{instance}} {{device}} written"),
	))
	b.WithPanel(graph("Disk queue depth",
		"Average number of requests in flight (weighted io_ticks). A deep queue with rising await means the device is the bottleneck.",
		"short",
		q(`rate(stall_disk_io_time_weighted_seconds_total`+disk+`[$__rate_interval])`, "{{instance}} {{device}}"),
	))

	b.WithRow(row("Reclaim and allocation"))
	b.WithPanel(graph("Allocation and compaction stalls",
		"Allocations that reclaimed memory themselves (allocation stalls) and that compacted memory to find contiguous pages (compaction stalls). Each is a latency spike in the allocating process; any sustained rate precedes the kernel's 'page allocation failure'.",
		"ops",
		q(`rate(stall_vm_allocation_stalls_total{SEL}[$__rate_interval])`, "{{instance}} allocation stalls"),
		q(`rate(stall_vm_compaction_stalls_total{SEL}[$__rate_interval])`, "{{instance}} compaction stalls"),
	))
	b.WithPanel(graph("Pages scanned and reclaimed",
		"Pages per second scanned by processes in direct reclaim, pages they reclaimed, and pages scanned by kswapd. Direct reclaim above 0 means applications are doing the kernel's work; kswapd alone is normal background reclaim.",
		"short",
		q(`rate(stall_vm_direct_reclaim_scanned_pages_total{SEL}[$__rate_interval])`, "{{instance}} direct scanned"),
		q(`rate(stall_vm_direct_reclaim_reclaimed_pages_total{SEL}[$__rate_interval])`, "{{instance}} direct reclaimed"),
		q(`rate(stall_vm_kswapd_scanned_pages_total{SEL}[$__rate_interval])`, "{{instance}} kswapd scanned"),
	))
	b.WithPanel(graph("Major faults and refaults",
		"Page faults that had to read from disk, and pages read back soon after being evicted (workingset refaults). A burst when a broker maps a new CommitLog file, or a steady refault rate, means the page cache is too small for the working set.",
		"ops",
		q(`rate(stall_vm_major_faults_total{SEL}[$__rate_interval])`, "{{instance}} major faults"),
		q(`rate(stall_vm_refaults_total{SEL}[$__rate_interval])`, "{{instance}} refaults"),
	))
	b.WithPanel(dashed(graph("Zone free memory against watermarks",
		"Free memory of the zones with the least of it ($top) against their min and low watermarks (dashed). Below low, kswapd wakes; below min, allocations reclaim directly and stall. A zone hovering just above low is one burst away from allocation stalls.",
		"bytes",
		q(`bottomk($top, stall_vm_zone_free_bytes{SEL})`, "{{instance}} node {{node}} {{zone}} free"),
		q(`stall_vm_zone_watermark_bytes{SEL,level=~"min|low"} and on (job, instance, node, zone) bottomk($top, stall_vm_zone_free_bytes{SEL})`, "{{instance}} node {{node}} {{zone}} {{level}} watermark"),
	), ".*watermark$"))
	b.WithPanel(graph("Pressure stall information (PSI)",
		"Share of time some (at least one) or all (full) non-idle tasks were stalled on cpu, memory, io or irq. Memory or io 'full' above a few percent means the host is stalling its applications.",
		"percentunit",
		q(`rate(stall_pressure_stalled_seconds_total{SEL}[$__rate_interval])`, "{{instance}} {{resource}} {{scope}}"),
	))
	b.WithPanel(bars(graph("Kernel log events",
		"Kernel log records per $__rate_interval: page allocation failures by order (order 0: no free page at all, the host out of reserve; 1 and up: memory too fragmented for 2^order contiguous pages), hung tasks, OOM kills (oom_kill: the host out of memory; oom_kill_cgroup: a cgroup at its limit), I/O errors (io_error_excluded: on devices the exporter leaves out), soft lockups, and OOM kills counted by /proc/vmstat. Lower bounds: the kernel prints at most one allocation failure report per 10 s and kernel.hung_task_warnings hung-task reports per boot.",
		"short",
		q(`sum by (job, instance, event) (increase(stall_kernel_log_events_total{SEL,event!="page_allocation_failure"}[$__rate_interval]))`, "{{instance}} {{event}}"),
		q(`sum by (job, instance, order) (increase(stall_kernel_page_allocation_failures_total{SEL}[$__rate_interval]))`, "{{instance}} page allocation failure order {{order}}"),
		q(`increase(stall_vm_oom_kills_total{SEL}[$__rate_interval])`, "{{instance}} oom kills (vmstat)"),
	)))

	b.WithRow(row("Tunables"))
	b.WithPanel(tablePanel("vm.* and hung-task settings",
		"The vm.* tunables behind the thresholds above, and the hung-task detector's settings, one row per host. Ratios are percent, *_centisecs hundredths of a second, *_bytes bytes, min_free_kbytes KiB. vm.dirty_ratio and vm.dirty_background_ratio set the thresholds (unless the *_bytes variants are non-zero); kernel.hung_task_warnings at 0 means the kernel no longer reports hung tasks.",
		"none",
		tableQuery(`max by (instance, name) (stall_vm_sysctl{SEL})`),
		tableQuery(`label_replace(max by (instance) (stall_kernel_hung_task_warnings_remaining{SEL}), "name", "kernel.hung_task_warnings", "", "")`),
		tableQuery(`label_replace(max by (instance) (stall_kernel_hung_task_timeout_seconds{SEL}), "name", "kernel.hung_task_timeout_secs", "", "")`),
	).Transformations([]dashboard.DataTransformerConfig{
		transform("merge", map[string]any{}),
		transform("groupingToMatrix", map[string]any{"columnField": "name", "rowField": "instance", "valueField": "Value"}),
	}))
	return b
}

// serviceCgroupDirty is the dirty-page state of a watched service's cgroups (service as
// stall_cgroup_watched has it: rocketmq_broker, redis; whose names it in titles: "The broker's"),
// for that service's dashboard: each cgroup against its own throttle point beside its host's, and
// the time the processes in it slept in balance_dirty_pages(). Both read the exporter of the
// service's own host: a broker or Redis read remotely (/probe, --rocketmq.namesrv) shows here only
// where that host's exporter is selected.
func serviceCgroupDirty(whose, service string) (ratio, paused *timeseries.PanelBuilder) {
	watched := `stall_cgroup_watched{SEL,service="` + service + `"}`
	ratio = withLine(graph(whose+" cgroup against its own dirty throttle point",
		"The dirty throttle ratio of "+whose+" memory cgroup (its container, pod or unit: stall_cgroup_watched), beside its host's. With cgroup writeback (cgroup v2, memory and io controllers) the kernel pauses a writer at the stricter of the two, and a cgroup's limits are vm.dirty_* applied to the page cache its memory limit leaves it: at 100 % (red line) every thread of it that dirties a page sleeps, while the host may read a few percent (CgroupDirtyPagesNearThrottle). cgroup v2 only.",
		"percentunit",
		q(`stall_cgroup_dirty_throttle_ratio{SEL} and on (job, instance, cgroup) `+watched, "{{instance}} {{cgroup}}"),
		// The selected hosts' own, whether or not a watched cgroup of the service runs there now.
		q(`stall_vm_dirty_throttle_ratio{SEL}`, "{{instance}} host"),
	), 1.0)
	paused = graph(whose+" threads paused in balance_dirty_pages()",
		"Seconds per second the processes in "+whose+" cgroup slept in balance_dirty_pages() (the writeback collector's eBPF counts, opt-in), by process; above 1 when several threads sleep at once. A broker's CommitLog put lock holder paused here is 'page cache busy' for its producers.",
		"short",
		q(`sum by (job, instance, comm, main, cgroup) (rate(stall_dirty_throttle_pause_seconds_total{SEL}[$__rate_interval]) and on (job, instance, cgroup) `+watched+`)`, "{{instance}} {{comm}} {{main}} {{cgroup}}"),
	)
	return ratio, paused
}
