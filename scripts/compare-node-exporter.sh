#!/usr/bin/env bash
# Compares the CPU of a stall_exporter host scrape (vmstat, sysctl, zoneinfo,
# meminfo, pressure, diskstats) with what node_exporter spends on its vmstat
# (all fields), meminfo, diskstats and pressure collectors, on this machine's
# real /proc.
#
# Method: four processes on loopback — each exporter with those collectors,
# and each with no collector at all (its fixed cost: HTTP, Go and process
# self-metrics). Each gets 20 warm-up scrapes, then N (default 1000)
# sequential scrapes with curl. CPU is the exporter process's own
# utime+stime from /proc/<pid>/stat (clock ticks, in ms) before and after the
# N scrapes, so the scraper's cost is not counted. "Collectors" is the full
# process minus its no-collector twin. RSS is stall_exporter's VmRSS after the
# scrapes. The node_exporter binary is not part of the repository:
#   GOBIN=/tmp/nebin go install github.com/prometheus/node_exporter@v1.10.2
# then run this script (NODE_EXPORTER overrides the path). Run it on an
# otherwise idle machine; repeat and take the median.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
NODE_EXPORTER=${NODE_EXPORTER:-/tmp/nebin/node_exporter}
[ -x "$NODE_EXPORTER" ] || { echo "node_exporter not found at $NODE_EXPORTER (see the header of this script)" >&2; exit 1; }
make -s build >/dev/null
hz=$(getconf CLK_TCK)

all=() others=()
for c in $(./stall_exporter --help 2>&1 | grep -o -- '--\[no-\]collector\.[a-z_]*' | sed 's/--\[no-\]collector\.//'); do
  all+=("--no-collector.$c")
  case "$c" in
    vmstat|sysctl|zoneinfo|meminfo|pressure|diskstats) ;;
    *) others+=("--no-collector.$c") ;;
  esac
done
# Four free loopback ports (nothing answers on them).
ports=() p=${BASE_PORT:-39190}
while [ ${#ports[@]} -lt 4 ]; do
  (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || ports+=("$p")
  p=$((p + 1))
done
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
./stall_exporter --web.listen-address=127.0.0.1:${ports[0]} "${others[@]}" --log.level=error & pids+=($!)
./stall_exporter --web.listen-address=127.0.0.1:${ports[1]} "${all[@]}" --log.level=error & pids+=($!)
"$NODE_EXPORTER" --web.listen-address=127.0.0.1:${ports[2]} --collector.disable-defaults \
  --collector.vmstat --collector.vmstat.fields='.*' --collector.meminfo --collector.diskstats \
  --collector.pressure --log.level=error 2>/dev/null & pids+=($!)
"$NODE_EXPORTER" --web.listen-address=127.0.0.1:${ports[3]} --collector.disable-defaults \
  --log.level=error 2>/dev/null & pids+=($!)
sleep 1

cpu_ms() { awk -v hz="$hz" '{print ($14+$15)*1000/hz}' "/proc/$1/stat"; }
run() { # index → CPU ms over N scrapes
  local port=${ports[$1]} pid=${pids[$1]} a b
  for ((i = 0; i < 20; i++)); do curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; done
  a=$(cpu_ms "$pid")
  for ((i = 0; i < N; i++)); do curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; done
  b=$(cpu_ms "$pid")
  echo "$b - $a" | bc
}
s_full=$(run 0); s_base=$(run 1); n_full=$(run 2); n_base=$(run 3)
rss=$(awk '/VmRSS/ {print $2}' "/proc/${pids[0]}/status")
awk -v sf="$s_full" -v sb="$s_base" -v nf="$n_full" -v nb="$n_base" -v n="$N" -v rss="$rss" 'BEGIN {
  printf "%d scrapes each; CPU in ms (ms per scrape)\n", n
  printf "%-44s %8s %8s\n", "", "process", "collectors"
  printf "%-44s %8.0f %8.0f  (%.3f ms/scrape)\n", "stall_exporter host collectors", sf, sf - sb, (sf - sb) / n
  printf "%-44s %8.0f %8.0f  (%.3f ms/scrape)\n", "node_exporter vmstat(all) meminfo diskstats pressure", nf, nf - nb, (nf - nb) / n
  printf "ratio stall/node: process %.2f, collectors %.2f\n", sf / nf, (nf - nb > 0 ? (sf - sb) / (nf - nb) : 0)
  printf "stall_exporter RSS after %d scrapes: %.1f MiB\n", n + 20, rss / 1024
}'
