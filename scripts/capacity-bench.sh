#!/usr/bin/env bash
# The fleet benchmark of the capacity-review dashboard (docs/benchmarks.md, "Capacity review at
# fleet scale"): generate HOSTS hosts x DAYS days of the roll-ups of alerts/capacity.yml
# (tools/dashboards/fleet, planted worst hosts included), build TSDB blocks with promtool, serve them with
# a real Prometheus and evaluate every panel query of dashboards/stall-capacity.json over the
# dashboard's default range, RUNS times; prints each query's best and worst wall time and the
# server's CPU time for it (its threads' schedstat: what other load on the machine does not inflate).
#
#   make bench-capacity                      # 1,000 hosts, 30 days (about 3 GB of text, removed after)
#   HOSTS=200 DAYS=10 scripts/capacity-bench.sh
#   VM=1 scripts/capacity-bench.sh           # also against VictoriaMetrics' single binary (victoria-metrics
#                                            # on PATH, or VM_BIN=...; `go install
#                                            # github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0`)
#
# Needs prometheus, promtool and curl (scripts/install-test-deps.sh). All data lives in a temporary
# directory, removed at the end; the peak use is printed. It is under TMPDIR if set, else in
# /dev/shm when that has 4 GiB free (the text is written and read once: memory spares the disk
# minutes of I/O), else /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."

hosts=${HOSTS:-1000} days=${DAYS:-30} runs=${RUNS:-3}
where=${TMPDIR:-}
if [ -z "$where" ]; then
	where=/tmp
	if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt $((4 << 20)) ]; then where=/dev/shm; fi
fi
tmp=$(mktemp -d -p "$where" capacity-bench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { # a port nothing listens on
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }
wait_ready() { # url what
	for _ in $(seq 1 600); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.5; done
	echo "timed out waiting for $2 ($1)" >&2; exit 1
}

(cd tools && go build -o "$tmp/fleetgen" ./dashboards/fleet/fleetgen && go build -o "$tmp/fleetbench" ./dashboards/fleet/fleetbench)
# The last hour of data: fixed, as the fleet test's (testEnd), so that a run does not depend on the
# hour it starts (END=<Unix time> moves it); Prometheus and VictoriaMetrics keep 100 years.
end=${END:-1773154800} # 2026-03-10T15:00:00Z
end=$(( end / 3600 * 3600 ))
# fleetgen records each hour 17 minutes past it, the daily roll-ups 30 minutes later (fleet.DailyLag):
# the dashboard is evaluated at the last of them (fleet.Config.Last).
last=$((end + 17 * 60 + 30 * 60))

echo "== generating $hosts hosts x $days days"
t0=$(date +%s.%N)
"$tmp/fleetgen" -hosts "$hosts" -days "$days" -end "$end" > "$tmp/fleet.om"
took=$(elapsed "$t0")
samples=$(grep -vc '^#' "$tmp/fleet.om")
series=$(awk '!/^#/ {sub(/ [^ ]+ [^ ]+$/, ""); if (!($0 in s)) {s[$0]; n++}} END {print n}' "$tmp/fleet.om")
echo "   $series series, $samples samples, $(du -h "$tmp/fleet.om" | cut -f1) of OpenMetrics in $took s (in $where)"

echo "== promtool tsdb create-blocks-from openmetrics"
t0=$(date +%s.%N)
promtool tsdb create-blocks-from openmetrics -q --max-block-duration=768h "$tmp/fleet.om" "$tmp/data" > /dev/null
took=$(elapsed "$t0")
peak=$(du -sh "$tmp" | cut -f1)
rm "$tmp/fleet.om"
echo "   blocks: $(du -sh "$tmp/data" | cut -f1) in $took s (peak use of the run: $peak)"

port=$(free_port)
printf 'global: {}\n' > "$tmp/prometheus.yml"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" --storage.tsdb.retention.time=100y \
	--web.listen-address="127.0.0.1:$port" --log.level=warn > "$tmp/prometheus.log" 2>&1 &
pids+=($!)
wait_ready "http://127.0.0.1:$port/-/ready" Prometheus
echo "== Prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}'): every capacity panel query over $days days, $runs runs"
echo "   load average before the queries: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/fleetbench" -url "http://127.0.0.1:$port" -end "$last" -days "$days" -runs "$runs" -planted "$hosts" -pid "${pids[0]}"
echo "   Prometheus RSS after the queries: $(ps -o rss= -p "${pids[0]}" | awk '{printf "%.0f MiB", $1/1024}')"

if [ "${VM:-}" = 1 ]; then
	vm=${VM_BIN:-$(command -v victoria-metrics || true)}
	if [ -z "$vm" ]; then echo "VM=1: no victoria-metrics on PATH and no VM_BIN" >&2; exit 1; fi
	vport=$(free_port)
	"$vm" -storageDataPath="$tmp/vm" -retentionPeriod=100y -httpListenAddr="127.0.0.1:$vport" -search.disableCache \
		-loggerLevel=ERROR > "$tmp/vm.log" 2>&1 &
	pids+=($!)
	wait_ready "http://127.0.0.1:$vport/health" VictoriaMetrics
	version=$(go version -m "$vm" 2>/dev/null | awk '$1 == "mod" {print $3}') # go install stamps no app version
	echo "== importing into VictoriaMetrics $version"
	t0=$(date +%s.%N)
	# Streamed (chunked) from the generator: no copy of the text on disk or in curl's memory.
	"$tmp/fleetgen" -hosts "$hosts" -days "$days" -end "$end" -millis |
		curl -fsS -X POST -T - "http://127.0.0.1:$vport/api/v1/import/prometheus"
	curl -fsS "http://127.0.0.1:$vport/internal/force_flush"
	echo "   imported in $(elapsed "$t0") s"
	echo "== VictoriaMetrics: every capacity panel query over $days days, $runs runs"
	echo "   load average before the queries: $(cut -d' ' -f1-3 /proc/loadavg)"
	"$tmp/fleetbench" -url "http://127.0.0.1:$vport" -end "$last" -days "$days" -runs "$runs" -nocache -planted "$hosts" -pid "${pids[1]}"
	echo "   VictoriaMetrics RSS after the queries: $(ps -o rss= -p "${pids[1]}" | awk '{printf "%.0f MiB", $1/1024}')"
fi
