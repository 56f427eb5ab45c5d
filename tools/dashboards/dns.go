package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

func init() { register("stall-dns.json", dnsBoard) }

// dnsQType selects the chosen hosts and query types.
const dnsQType = `{SEL,qtype=~"$qtype"}`

// ptrByProcess is the incident-4 series: PTR queries per second by process
// and cgroup (ebpf attribution with the egress program).
const ptrByProcess = `sum by (job, instance, comm, main, cgroup) (rate(stall_dns_process_queries_total{SEL,qtype="PTR"}[$__rate_interval]))`

// dnsBoard is the DNS dashboard (opt-in collector, docs/dns.md): which
// process sends reverse lookups, how lookups fare (types, resolvers,
// rcodes, timeouts, latency), and whether the capture can be trusted.
func dnsBoard() *dashboard.DashboardBuilder {
	b := newBoard("stall-dns", "Stall / DNS",
		"DNS lookups leaving each host (the opt-in dns collector): which process sends reverse (PTR) lookups — incident 4 — how lookups end and how long they take, and whether the capture and attribution can be trusted.",
		"stall_dns_capture_up",
		subVar("qtype", "Query type", "stall_dns_queries_total", "qtype"))

	b.WithRow(row("Reverse lookups by process (incident 4)"))
	b.WithPanel(graph("PTR queries per second by process",
		"Reverse (PTR) queries each process sends, by process name and cgroup (its systemd unit, container or pod). Hundreds per second from one JVM is incident 4: a reverse lookup per consumed message (a born-host name getter), which halved a consumer's throughput. A few per second from a client logging its peers is normal. Needs ebpf attribution (stall_dns_attribution_mode).",
		"ops",
		q(ptrByProcess, "{{instance}} {{comm}} {{main}} {{cgroup}}"),
	).Span(16))
	b.WithPanel(worst("Top processes sending PTR queries",
		"The processes sending the most reverse lookups now, worst first. Orange from 50/s, red from 200/s: the rate of a consumer resolving the sender of every message.",
		"ops",
		`sort_desc(topk($top, `+ptrByProcess+`))`, "{{instance}} {{comm}} {{main}} {{cgroup}}",
		steps("green", 50.0, "orange", 200.0, "red")))
	b.WithPanel(graph("Lookups by process (all types)",
		"connect() or sendmsg() calls to port 53 by process and cgroup: every lookup in ebpf mode, a lower bound in proc mode (it catches mostly lookups that wait for a timeout). A process on top here but not in the PTR panel looks up forward names; glibc sends A and AAAA on one socket, so one lookup can be two queries.",
		"ops",
		q(`sum by (job, instance, comm, main, cgroup) (rate(stall_dns_process_lookups_total{SEL}[$__rate_interval]))`, "{{instance}} {{comm}} {{main}} {{cgroup}}"),
	))
	b.WithPanel(graph("Reverse queries per second (host)",
		"Queries for names under in-addr.arpa or ip6.arpa captured on the host, whoever sent them. This is the incident-4 signal without attribution: a sustained rate in the hundreds means some process resolves addresses in a loop.",
		"ops",
		q(`rate(stall_dns_reverse_queries_total{SEL}[$__rate_interval])`, "{{instance}}"),
	))

	b.WithRow(row("Queries and answers"))
	b.WithPanel(graph("Queries by type",
		"Captured queries per second by question type, retransmissions included. PTR growing out of proportion to A/AAAA is the reverse-lookup storm; a flood of SRV or TXT usually is a service-discovery client in a retry loop.",
		"ops",
		q(`sum by (job, instance, qtype) (rate(stall_dns_queries_total`+dnsQType+`[$__rate_interval]))`, "{{instance}} {{qtype}}"),
	).Stacking(stacked()))
	b.WithPanel(graph("Queries by resolver",
		"Captured queries per second by the resolver they went to (the first --dns.max-resolvers addresses; the rest are other). 127.0.0.53 is systemd-resolved's stub: its upstream queries show under their own resolver too. A resolver that appears unexpectedly is a container or client with its own resolv.conf.",
		"ops",
		q(`sum by (job, instance, resolver) (rate(stall_dns_queries_total`+dnsQType+`[$__rate_interval]))`, "{{instance}} {{resolver}}"),
	))
	b.WithPanel(graph("Responses by rcode",
		"Captured responses per second by response code. NXDOMAIN for PTR means addresses without a reverse record, each a wasted round trip (and, on resolvers that forward them, a slow one); SERVFAIL or REFUSED mean the resolver itself is failing.",
		"ops",
		q(`sum by (job, instance, qtype, rcode) (rate(stall_dns_responses_total`+dnsQType+`[$__rate_interval]))`, "{{instance}} {{qtype}} {{rcode}}"),
	))
	b.WithPanel(bars(graph("Timeouts by type",
		"Queries without a response within --dns.timeout (5 s, the per-try timeout of glibc and the JDK). Each one holds the calling thread for the whole timeout: a few per second on a consumer's PTR lookups stalls its consumption completely.",
		"ops",
		q(`sum by (job, instance, qtype) (rate(stall_dns_timeouts_total`+dnsQType+`[$__rate_interval]))`, "{{instance}} {{qtype}}"),
	)))
	b.WithPanel(graph("Retransmits and truncated responses",
		"Queries sent again before their answer came (a slow or lossy path to the resolver; the caller waits through every retry), and responses with the TC bit (the answer did not fit in UDP: the client asks again over TCP, one more round trip).",
		"ops",
		q(`sum by (job, instance, qtype) (rate(stall_dns_retransmits_total`+dnsQType+`[$__rate_interval]))`, "{{instance}} {{qtype}} retransmits"),
		q(`sum by (job, instance, qtype) (rate(stall_dns_truncated_responses_total`+dnsQType+`[$__rate_interval]))`, "{{instance}} {{qtype}} truncated"),
	).Span(24))

	b.WithRow(row("Latency"))
	b.WithPanel(graph("Lookup latency p50 and p99",
		"Median and 99th percentile from query to response, by type (kernel capture timestamps). On a LAN a cached answer takes well under a millisecond; tens of milliseconds is the resolver asking upstream; a p99 at seconds means retries, and every such lookup is a caller waiting that long.",
		"s",
		q(`histogram_quantile(0.5, sum by (job, instance, qtype, le) (rate(stall_dns_lookup_duration_seconds_bucket`+dnsQType+`[$__rate_interval])))`, "{{instance}} {{qtype}} p50"),
		q(`histogram_quantile(0.99, sum by (job, instance, qtype, le) (rate(stall_dns_lookup_duration_seconds_bucket`+dnsQType+`[$__rate_interval])))`, "{{instance}} {{qtype}} p99"),
	))
	b.WithPanel(heat("Lookup latency",
		"Answered lookups of the selected hosts and types by latency (100 µs to 10 s buckets). A band below a millisecond is the resolver's cache; a second band at tens or hundreds of milliseconds is upstream lookups; cells at 1–5 s are retries (timeouts are counted separately).",
		"s",
		`sum by (le) (rate(stall_dns_lookup_duration_seconds_bucket`+dnsQType+`[$__rate_interval]))`))

	b.WithRow(row("Capture health"))
	b.WithPanel(count("Captures down",
		"Hosts whose DNS capture socket is not open (stall_dns_capture_up 0: no CAP_NET_RAW, a missing --dns.interface, a failed socket being retried). Above 0: the other panels miss those hosts' lookups.",
		`count(stall_dns_capture_up{SEL} == 0) or vector(0)`))
	b.WithPanel(tablePanel("Attribution mode",
		"How each host attributes lookups to processes: ebpf counts every lookup; proc samples /proc and catches mostly lookups that wait for a timeout; none attributes nothing (no eBPF, no cgroup v2, missing capabilities — the exporter's log says why). The per-process panels are only as good as this.",
		"none",
		tableQuery(`max by (instance, mode) (stall_dns_attribution_mode{SEL} == 1)`),
	).Transformations([]dashboard.DataTransformerConfig{hide("Time", "Value")}).
		OverrideByName("mode", []dashboard.DynamicConfigValue{
			{Id: "mappings", Value: mark("ebpf", "ebpf", "green", "proc", "proc", "orange", "none", "none", "red")}, colouredCells()}).
		Span(6))
	b.WithPanel(graph("Kernel drops and parse errors",
		"Packets the kernel dropped because the capture socket's buffer was full (raise --dns.socket-buffer), and malformed packets skipped (the log names each kind once). Any drop means the counts above are low; parse errors at a steady rate mean something non-DNS uses port 53.",
		"pps",
		q(`rate(stall_dns_capture_drops_total{SEL}[$__rate_interval])`, "{{instance}} kernel drops"),
		q(`rate(stall_collector_parse_errors_total{SEL,collector="dns"}[$__rate_interval])`, "{{instance}} parse errors"),
	).Span(12))
	b.WithPanel(graph("Pending queries",
		"Queries waiting for their response at the scrape, against --dns.max-pending (16,384 by default). A level that climbs towards the cap means responses are not being seen (capture on the wrong interface, asymmetric routing) or a resolver stopped answering.",
		"short",
		q(`stall_dns_pending_queries{SEL}`, "{{instance}}"),
	))
	b.WithPanel(graph("Unmatched, late and untracked",
		"Responses that matched no captured query (sent before the capture started or on an interface not captured), responses after their query timed out, queries not tracked because the pending table was full, and TCP segments skipped for lost framing. Small and steady is normal; a rate comparable to the queries means the latency and timeout figures are unreliable.",
		"ops",
		q(`rate(stall_dns_unmatched_responses_total{SEL}[$__rate_interval])`, "{{instance}} unmatched responses"),
		q(`rate(stall_dns_late_responses_total{SEL}[$__rate_interval])`, "{{instance}} late responses"),
		q(`rate(stall_dns_pending_overflows_total{SEL}[$__rate_interval])`, "{{instance}} pending overflows"),
		q(`rate(stall_dns_tcp_unsynced_segments_total{SEL}[$__rate_interval])`, "{{instance}} TCP segments skipped"),
	))
	return b
}
