#!/usr/bin/env bash
# What the dns collector costs at real packet rates: Debian's dnsperf floods a real resolver
# (Debian's unbound, answering NXDOMAIN for every name under in-addr.arpa) with PTR queries on a
# loopback address, while the exporter runs with only its dns collector (capture on every interface,
# eBPF attribution where the host allows it) on the same host. For each rate it prints:
#   - lookups/s dnsperf completed, and packets/s the capture saw (a query and a response each);
#   - the exporter's CPU, whole process (every thread, user + system, from
#     /proc/<pid>/task/*/schedstat), as % of one core and per captured packet, and how long its
#     threads waited on a run queue (ms per second: a CPU-starved exporter drops packets once it
#     cannot empty the ring, 0.25 s of packets at 80,000 a second with the default 4 MiB);
#   - unbound's CPU (% of one core), and dnsperf's;
#   - drops (stall_dns_capture_drops_total), and whether every count was exact: the captured PTR
#     queries equal the queries dnsperf sent, the captured NXDOMAIN responses the queries unbound
#     answered (its own statistics, which count what dnsperf may give up on), and the queries the
#     eBPF programs joined to comm="dnsperf" (stall_dns_process_queries_total) dnsperf's.
# unbound runs 2 threads, dnsperf 2 threads with 8 sockets and up to 2,000 queries outstanding;
# lookups/s is what dnsperf achieved, which on a small machine can be less than the rate asked. The
# exporter's CPU is taken over the seconds dnsperf sends, so its scrapes (one before, one
# after) are not counted; the kernel's share of capturing (the filter, the copy into the ring) runs
# in the senders' context and shows in dnsperf's and unbound's system time, not the exporter's.
#
# Needs root (AF_PACKET, eBPF) and `make test-deps` (unbound, dnsperf). Environment: RATES
# (queries/s, default "10000 30000 100000"), SECONDS_PER_RATE (10), ADDR (the loopback address
# unbound serves on, 127.0.0.53, which must be free), PORT (39153, the exporter's), RUNS (1),
# ARGS (more exporter flags, e.g. --dns.attribution=none).
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${RATES:-10000 30000 100000}
SECONDS_PER_RATE=${SECONDS_PER_RATE:-10}
ADDR=${ADDR:-127.0.0.53}
PORT=${PORT:-39153}
RUNS=${RUNS:-1}
ARGS=${ARGS:-}
[ "$(id -u)" -eq 0 ] || { echo "bench-dns.sh needs root (AF_PACKET capture, eBPF)" >&2; exit 1; }
for tool in unbound dnsperf curl; do
  command -v "$tool" >/dev/null || { echo "$tool not found: run make test-deps" >&2; exit 1; }
done
if ss -Hlun "src $ADDR:53" | grep -q .; then
  echo "$ADDR:53 is taken; set ADDR to a free loopback address" >&2; exit 1
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
make -s build >/dev/null
cp stall_exporter "$work/"

cat >"$work/unbound.conf" <<EOF
server:
  interface: $ADDR
  port: 53
  do-ip6: no
  do-tcp: no
  do-daemonize: no
  chroot: ""
  username: ""
  directory: "$work"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  num-threads: 2
  so-reuseport: yes
  so-rcvbuf: 4m
  so-sndbuf: 4m
  access-control: 127.0.0.0/8 allow
  local-zone: "in-addr.arpa." static
  statistics-cumulative: yes
remote-control:
  control-enable: yes
  control-interface: $work/unbound.ctl
  control-use-cert: no
EOF
unbound -d -c "$work/unbound.conf" >"$work/unbound.log" 2>&1 &
pids+=($!)
unbound_pid=$!

# 65,536 distinct reverse names, as a consumer resolving its producers' addresses would ask.
awk 'BEGIN { for (i = 0; i < 65536; i++) printf "%d.%d.0.10.in-addr.arpa PTR\n", i % 256, int(i / 256) }' >"$work/queries"

disable=()
for c in $("$work/stall_exporter" --help 2>&1 | grep -o -- '--\[no-\]collector\.[a-z_]*' | sed 's/--\[no-\]collector\.//'); do
  [ "$c" = dns ] || disable+=("--no-collector.$c")
done
# shellcheck disable=SC2086
"$work/stall_exporter" "${disable[@]}" --collector.dns --web.listen-address="127.0.0.1:$PORT" $ARGS \
  >"$work/exporter.log" 2>&1 &
pids+=($!)
exporter_pid=$!

metrics() { curl -sf "http://127.0.0.1:$PORT/metrics"; }
for _ in $(seq 300); do
  metrics 2>/dev/null | grep -q '^stall_dns_capture_up 1' && ss -Hlun "src $ADDR:53" | grep -q . && break
  sleep 0.1
done
metrics | grep -q '^stall_dns_capture_up 1' || { echo "the exporter's capture did not open:" >&2; cat "$work/exporter.log" >&2; exit 1; }
mode=$(metrics | awk '/^stall_dns_attribution_mode\{/ && $2 == 1 { sub(/.*mode="/, ""); sub(/".*/, ""); print }')

# answered: the queries unbound has answered so far (its own count).
answered() { unbound-control -c "$work/unbound.conf" stats_noreset | awk -F= '$1 == "total.num.queries" { print $2 }'; }
# cpu PID: nanoseconds on CPU of all the process's threads so far.
cpu() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
# waited PID: nanoseconds its threads have waited on a run queue so far.
waited() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $2 } END { printf "%.0f\n", s }'; }
# value NAME REGEX: the sum of the samples of NAME whose labels match REGEX.
value() { awk -v n="$1" -v re="$2" 'index($0, n) == 1 && substr($0, length(n) + 1, 1) ~ /[{ ]/ && $0 ~ re { s += $NF } END { printf "%.0f\n", s }' "$3"; }

echo "dns collector benchmark: $(nproc) cores, kernel $(uname -r), attribution $mode${ARGS:+, $ARGS}, load average $(cut -d" " -f1-3 /proc/loadavg) before"
printf '%-9s %-9s %-9s %-10s %-10s %-8s %-9s %-9s %-6s %s\n' \
  rate lookups/s packets/s "exporter%" "ns/packet" "wait/s" "unbound%" "dnsperf%" drops exact
for run in $(seq "$RUNS"); do
  for rate in $RATES; do
    metrics >"$work/before"
    a0=$(answered)
    e0=$(cpu "$exporter_pid") w0=$(waited "$exporter_pid") u0=$(cpu "$unbound_pid") t0=$(date +%s%N)
    ( TIMEFORMAT='%U %S'; time dnsperf -s "$ADDR" -d "$work/queries" -Q "$rate" -l "$SECONDS_PER_RATE" \
        -q 2000 -c 8 -T 2 -t 2 >"$work/dnsperf" 2>&1 ) 2>"$work/dnsperf.time"
    e1=$(cpu "$exporter_pid") w1=$(waited "$exporter_pid") u1=$(cpu "$unbound_pid") t1=$(date +%s%N)
    sleep 1 # the capture hands over what it holds within 0.1 s
    metrics >"$work/after"
    a1=$(answered)
    sent=$(awk '/Queries sent:/ { print $3 }' "$work/dnsperf")
    qps=$(awk '/Queries per second:/ { print $4 }' "$work/dnsperf")
    runtime=$(awk '/Run time \(s\):/ { print $4 }' "$work/dnsperf")
    delta() { echo $(( $(value "$1" "$2" "$work/after") - $(value "$1" "$2" "$work/before") )); }
    packets=$(delta stall_dns_captured_packets_total '')
    drops=$(delta stall_dns_capture_drops_total '')
    queries=$(delta stall_dns_queries_total "qtype=\"PTR\",resolver=\"$ADDR\"")
    nx=$(delta stall_dns_responses_total 'qtype="PTR",rcode="NXDOMAIN"')
    joined=$(delta stall_dns_process_queries_total 'comm="dnsperf".*qtype="PTR"')
    exact=yes
    [ "$queries" -eq "$sent" ] && [ "$nx" -eq $((a1 - a0)) ] || exact="no (captured $queries queries and $nx responses; dnsperf sent $sent, unbound answered $((a1 - a0)))"
    if [ "$mode" = ebpf ] && [ "$joined" -ne "$sent" ]; then exact="no (dnsperf's PTR queries joined: $joined of $sent)"; fi
    awk -v rate="$rate" -v qps="$qps" -v runtime="$runtime" -v pk="$packets" -v e=$((e1 - e0)) -v w=$((w1 - w0)) -v u=$((u1 - u0)) \
        -v d="$(awk '{ printf "%.0f", ($1 + $2) * 1e9 }' "$work/dnsperf.time")" -v ns=$((t1 - t0)) -v drops="$drops" -v exact="$exact" 'BEGIN {
      printf "%-9d %-9d %-9d %-10.2f %-10.0f %-8s %-9.1f %-9.1f %-6d %s\n", rate, qps, pk / runtime,
        100 * e / ns, (pk > 0 ? e / pk : 0), sprintf("%.0fms", 1e3 * w / ns), 100 * u / ns, 100 * d / ns, drops, exact }'
  done
done
