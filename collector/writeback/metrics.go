package writeback

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The collector's metrics. Every HELP names its source: the eBPF program
// on writeback:balance_dirty_pages, or /proc/<pid>/io.
var (
	pauseSecondsDesc = collector.NewMetric("dirty_throttle_pause_seconds_total",
		"Time tasks slept in balance_dirty_pages() because dirty pages were past the throttle point, by process name, a JVM's main class or jar (main) and cgroup: the pause of each sleeping call of the writeback:balance_dirty_pages tracepoint (planned sleep, ms), counted by an eBPF program.",
		prometheus.CounterValue, "comm", "main", "cgroup")
	pausesDesc = collector.NewMetric("dirty_throttle_pauses_total",
		"Sleeps in balance_dirty_pages() (writeback:balance_dirty_pages with pause > 0), by process name, main and cgroup, counted by an eBPF program.",
		prometheus.CounterValue, "comm", "main", "cgroup")
	dirtiedDesc = collector.NewMetric("process_dirtied_bytes_total",
		"Bytes of page-cache pages each process dirtied (/proc/<pid>/io write_bytes: write(2) and stores through a shared mmap) while the host's dirty and writeback pages were past the background threshold or tasks were paused in balance_dirty_pages(); the top --writeback.max-processes of each read by name, main and cgroup, the rest \"other\".",
		prometheus.CounterValue, "comm", "main", "cgroup")
	pauseSourceUpDesc = collector.NewMetric("dirty_throttle_pause_source_up",
		"1 while the eBPF program on writeback:balance_dirty_pages counts pauses; 0 where it could not be loaded (no CAP_BPF/CAP_PERFMON, no tracepoint, an unknown event layout: the log says which), and stall_dirty_throttle_pause_* are not exported.",
		prometheus.GaugeValue)
	dirtiersActiveDesc = collector.NewMetric("process_dirtied_scan_active",
		"1 when this scrape read every process's /proc/<pid>/io because the host's dirty and writeback pages were past the background threshold (nr_dirty + nr_writeback > nr_dirty_background_threshold in /proc/vmstat) or the eBPF program counted pauses since the last scrape, 0 otherwise.",
		prometheus.GaugeValue)
)
