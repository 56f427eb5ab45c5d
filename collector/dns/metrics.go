package dns

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The collector's metrics. Every HELP names its source: the capture socket
// (AF_PACKET with a port-53 filter), its PACKET_STATISTICS, or the
// attribution (eBPF cgroup hooks or /proc sampling).
var (
	queriesDesc = collector.NewMetric("dns_queries_total",
		"DNS queries captured on port 53 (AF_PACKET, UDP and TCP), retransmissions included, by question type and resolver.",
		prometheus.CounterValue, "qtype", "resolver")
	responsesDesc = collector.NewMetric("dns_responses_total",
		"DNS responses captured, by the question type and the header RCODE (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, other).",
		prometheus.CounterValue, "qtype", "rcode")
	timeoutsDesc = collector.NewMetric("dns_timeouts_total",
		"Captured queries with no captured response within --dns.timeout (matched by addresses, ports, transport and DNS ID).",
		prometheus.CounterValue, "qtype")
	truncatedDesc = collector.NewMetric("dns_truncated_responses_total",
		"Captured responses with the TC (truncated) bit: the client retries over TCP.",
		prometheus.CounterValue, "qtype")
	retransmitsDesc = collector.NewMetric("dns_retransmits_total",
		"Captured queries repeating one still pending or just timed out (same addresses, ports, transport and ID).",
		prometheus.CounterValue, "qtype")
	reverseDesc = collector.NewMetric("dns_reverse_queries_total",
		"Captured queries whose name is under in-addr.arpa or ip6.arpa: reverse lookups of an address.",
		prometheus.CounterValue)
	lateDesc = collector.NewMetric("dns_late_responses_total",
		"Captured responses to queries already counted as timed out (arriving within a second --dns.timeout).",
		prometheus.CounterValue)
	unmatchedDesc = collector.NewMetric("dns_unmatched_responses_total",
		"Captured port-53 responses that match no captured query.",
		prometheus.CounterValue)
	overflowsDesc = collector.NewMetric("dns_pending_overflows_total",
		"Captured queries not tracked because --dns.max-pending queries were already waiting for a response (their responses count as unmatched).",
		prometheus.CounterValue)
	pendingDesc = collector.NewMetric("dns_pending_queries",
		"Captured queries waiting for a response (at most --dns.max-pending).",
		prometheus.GaugeValue)
	packetsDesc = collector.NewMetric("dns_captured_packets_total",
		"Packets the capture's kernel filter (UDP or TCP port 53, first fragments) passed to the exporter and the exporter read.",
		prometheus.CounterValue)
	dropsDesc = collector.NewMetric("dns_capture_drops_total",
		"Captured packets the kernel dropped because every block of the capture's ring was still waiting to be read (PACKET_STATISTICS tp_drops).",
		prometheus.CounterValue)
	tcpUnsyncedDesc = collector.NewMetric("dns_tcp_unsynced_segments_total",
		"TCP port-53 segments skipped because their DNS message boundaries are unknown (capture).",
		prometheus.CounterValue)
	captureUpDesc = collector.NewMetric("dns_capture_up",
		"1 while the AF_PACKET capture socket is open and reading, 0 while it cannot be opened or has failed.",
		prometheus.GaugeValue)
	modeDesc = collector.NewMetric("dns_attribution_mode",
		"1 for the active per-process attribution mode: ebpf (cgroup hooks), proc (/proc sampling) or none.",
		prometheus.GaugeValue, "mode")
	processLookupsDesc = collector.NewMetric("dns_process_lookups_total",
		"Lookups to port 53 by process name, a JVM's main class or jar (main, from its command line) and cgroup, from eBPF cgroup hooks or /proc sampling (stall_dns_attribution_mode).",
		prometheus.CounterValue, "comm", "main", "cgroup")
	processQueriesDesc = collector.NewMetric("dns_process_queries_total",
		"DNS queries sent over UDP by process name, a JVM's main class or jar (main), cgroup and question type, from an eBPF cgroup_skb egress program (ebpf mode only).",
		prometheus.CounterValue, "comm", "main", "cgroup", "qtype")
)

// lookupDuration is the lookup-time histogram; each tracker builds its own.
var lookupDuration = collector.DeclareHistogram("dns_lookup_duration_seconds",
	"Time from a captured query to its captured response, by question type (kernel capture timestamps; retransmissions measured from the first send).",
	durationBuckets, "qtype")

// durationBuckets span a LAN answer (100 µs) to the JDK's and glibc's
// resolver timeouts (5 s and beyond for retries).
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
