#!/usr/bin/env bash
# Compares the CPU and memory of stall_exporter with node_exporter's for the
# same signals, on this machine's /proc and on synthetic procfs trees with
# many disks. Prints, for one run:
#   - whole process: CPU per scrape of stall_exporter's host collectors
#     (vmstat, sysctl, zoneinfo, meminfo, pressure, diskstats) against
#     node_exporter v1.10.2's vmstat (all fields), meminfo, diskstats and
#     pressure, as the processes spend it;
#   - no-collector process: each exporter with every collector disabled (HTTP,
#     encoding, compression, Go and process self-metrics: the fixed cost);
#   - collectors only: whole process minus its no-collector twin;
#   - cost per exported series with 10, 100 and 1,000 synthetic whole disks
#     (the diskstats collector alone in each exporter), and how it grows;
#   - RSS of the default stall_exporter (every default collector, no Redis or
#     broker target) after more than 1,000 scrapes, and of the others.
#
# Method. Every process runs at once on loopback. The script scrapes them in
# ROUNDS rounds; in each round every process gets BATCH scrapes (DEV_BATCH for
# the synthetic-disk ones) over one keep-alive connection, with the headers
# Prometheus 2.x sends (Accept, Accept-Encoding: gzip, scrape timeout; set
# COMPRESS=0 to drop gzip), and the order of processes rotates from round to
# round, so load from elsewhere on the machine hits every process alike. A
# process's CPU is the sum of its threads' on-CPU time from
# /proc/<pid>/task/*/schedstat (nanoseconds; the scraper's own CPU is not
# counted). Ratios are computed per round; the script prints their median and
# the spread (min–max) over rounds.
#
# node_exporter is not part of the repository:
#   GOBIN=/tmp/nebin go install github.com/prometheus/node_exporter@v1.10.2
# (NODE_EXPORTER overrides the path). Environment: ROUNDS (default 9), BATCH
# (200), DEV_BATCH (30), DEVICES ("10 100 1000"; empty skips that part),
# COMPRESS (1), BASE_PORT (39190).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-9}
BATCH=${BATCH:-200}
DEV_BATCH=${DEV_BATCH:-30}
DEVICES=${DEVICES-10 100 1000}
COMPRESS=${COMPRESS:-1}
NODE_EXPORTER=${NODE_EXPORTER:-/tmp/nebin/node_exporter}
[ -x "$NODE_EXPORTER" ] || { echo "node_exporter not found at $NODE_EXPORTER (see the header of this script)" >&2; exit 1; }
make -s build >/dev/null

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

all=() others=()
for c in $(./stall_exporter --help 2>&1 | grep -o -- '--\[no-\]collector\.[a-z_]*' | sed 's/--\[no-\]collector\.//'); do
  all+=("--no-collector.$c")
  case "$c" in
    vmstat|sysctl|zoneinfo|meminfo|pressure|diskstats) ;;
    *) others+=("--no-collector.$c") ;;
  esac
done
only_diskstats=()
for a in "${all[@]}"; do [ "$a" = --no-collector.diskstats ] || only_diskstats+=("$a"); done

# Synthetic procfs trees: N whole disks in the 20-field (5.5+) layout; sysfs
# and udev data are empty directories, so neither exporter finds partitions
# or device attributes there.
synth() { # N → directory
  local n=$1 d=$work/dev$1 i name l=({a..z})
  mkdir -p "$d/proc" "$d/sys" "$d/udev"
  for ((i = 0; i < n; i++)); do
    name=sd${l[i / 676 % 26]}${l[i / 26 % 26]}${l[i % 26]}
    printf '%4d %7d %s %d 0 %d %d %d 0 %d %d 0 %d %d 0 0 0 0 %d %d\n' \
      $((8 + i / 256)) $((i % 256 * 16)) "$name" $((1000 + i)) $((8000 + i)) $((300 + i)) $((2000 + i)) \
      $((16000 + i)) $((900 + i)) $((700 + i)) $((1200 + i)) $((50 + i)) $((40 + i))
  done >"$d/proc/diskstats"
  echo "$d"
}

port=${BASE_PORT:-39190}
next_port() { # sets port to the next one nothing listens on
  port=$((port + 1))
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
}

# name, port, pid and batch of every process, in start order.
names=() ports=() batches=()
start() { # name batch cmd... (the command gets --web.listen-address)
  local name=$1 batch=$2
  shift 2
  next_port
  "$@" --web.listen-address="127.0.0.1:$port" --log.level=error 2>"$work/$name.log" &
  pids+=($!) names+=("$name") ports+=("$port") batches+=("$batch")
}
ne_off=(--collector.disable-defaults)
ne_host=("${ne_off[@]}" --collector.vmstat --collector.vmstat.fields='.*' --collector.meminfo --collector.diskstats --collector.pressure)
start stall_host "$BATCH" ./stall_exporter "${others[@]}"
start stall_none "$BATCH" ./stall_exporter "${all[@]}"
start node_host "$BATCH" "$NODE_EXPORTER" "${ne_host[@]}"
start node_none "$BATCH" "$NODE_EXPORTER" "${ne_off[@]}"
start stall_default "$BATCH" ./stall_exporter
for n in $DEVICES; do
  d=$(synth "$n")
  start "stall_dev$n" "$DEV_BATCH" ./stall_exporter "${only_diskstats[@]}" --path.procfs="$d/proc" --path.sysfs="$d/sys"
  start "node_dev$n" "$DEV_BATCH" "$NODE_EXPORTER" "${ne_off[@]}" --collector.diskstats \
    --path.procfs="$d/proc" --path.sysfs="$d/sys" --path.udev.data="$d/udev"
done
for ((k = 0; k < ${#ports[@]}; k++)); do # each process answers, or the script says why not
  for ((i = 0; i < 100; i++)); do curl -s -o /dev/null "http://127.0.0.1:${ports[$k]}/" && break; sleep 0.1; done
  if ! curl -s -o /dev/null "http://127.0.0.1:${ports[$k]}/"; then
    echo "${names[$k]} does not answer on port ${ports[$k]}; its log:" >&2
    cat "$work/${names[$k]}.log" >&2
    exit 1
  fi
done

hdr=(-H 'Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'
  -H 'X-Prometheus-Scrape-Timeout-Seconds: 10')
[ "$COMPRESS" = 1 ] && hdr+=(-H 'Accept-Encoding: gzip')
scrape() { # port count: count scrapes over one keep-alive connection
  local args=() i
  for ((i = 0; i < $2; i++)); do args+=(-o /dev/null "http://127.0.0.1:$1/metrics"); done
  curl -sSf "${hdr[@]}" "${args[@]}" || { echo "scraping port $1 failed" >&2; return 1; }
}
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }

P=${#names[@]}
for ((i = 0; i < P; i++)); do # warm-up, and the series each process exports
  scrape "${ports[$i]}" 20
  curl -s "http://127.0.0.1:${ports[$i]}/metrics" | grep -vc '^#' >"$work/${names[$i]}.series" || true
done
results=$work/results.tsv
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < P; k++)); do
    i=$(((r + k) % P))
    a=$(cpu_ns "${pids[$i]}")
    scrape "${ports[$i]}" "${batches[$i]}"
    b=$(cpu_ns "${pids[$i]}")
    printf '%d\t%s\t%d\t%s\t%s\n' "$r" "${names[$i]}" "${batches[$i]}" "$a" "$b" >>"$results"
  done
  printf '.' >&2
done
echo >&2

{
  for ((i = 0; i < P; i++)); do
    printf 'proc\t%s\t%s\t%s\t%s\n' "${names[$i]}" "$(cat "$work/${names[$i]}.series")" \
      "$(awk '/VmRSS/ {print $2}' "/proc/${pids[$i]}/status")" "$((20 + ROUNDS * ${batches[$i]}))"
  done
  cat "$results"
} | awk -F'\t' -v devices="$DEVICES" -v rounds="$ROUNDS" -v compress="$COMPRESS" '
function median(arr, n,   i, j, t, s) {
  for (i = 1; i <= n; i++) s[i] = arr[i]
  for (i = 2; i <= n; i++) { t = s[i]; for (j = i - 1; j >= 1 && s[j] > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
  return n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
}
function spread(arr, n,   i, lo, hi) {
  lo = hi = arr[1]
  for (i = 2; i <= n; i++) { if (arr[i] < lo) lo = arr[i]; if (arr[i] > hi) hi = arr[i] }
  return sprintf("%.2f", median(arr, n)) sprintf(" (%.2f–%.2f)", lo, hi)
}
function ms(name,   i, a) { for (i = 1; i <= rounds; i++) a[i] = cpu[name, i - 1]; return median(a, rounds) / 1e6 }
$1 == "proc" { series[$2] = $3; rss[$2] = $4; scrapes[$2] = $5; next }
{ cpu[$2, $1] = ($5 - $4) / $3 }
END {
  printf "%d rounds; CPU per scrape in ms, median over rounds; ratios as median (min–max over rounds)%s\n\n", rounds, compress == 1 ? "; gzip on" : "; no gzip"
  printf "%-38s %9s %8s\n", "process", "ms/scrape", "series"
  for (p in series) order[++np] = p
  for (i = 2; i <= np; i++) { t = order[i]; for (j = i - 1; j >= 1 && order[j] > t; j--) order[j + 1] = order[j]; order[j + 1] = t }
  n = split("stall_host stall_none node_host node_none stall_default", fixed, " ")
  for (i = 1; i <= n; i++) printf "%-38s %9.3f %8d\n", fixed[i], ms(fixed[i]), series[fixed[i]]
  for (r = 0; r < rounds; r++) {
    whole[r + 1] = cpu["stall_host", r] / cpu["node_host", r]
    none[r + 1] = cpu["stall_none", r] / cpu["node_none", r]
    coll[r + 1] = (cpu["stall_host", r] - cpu["stall_none", r]) / (cpu["node_host", r] - cpu["node_none", r])
  }
  printf "\nratio stall/node, whole process:          %s\n", spread(whole, rounds)
  printf "ratio stall/node, no-collector process:   %s\n", spread(none, rounds)
  printf "ratio stall/node, collectors only:        %s\n", spread(coll, rounds)
  printf "  (collectors: stall %.3f ms, node %.3f ms per scrape)\n", ms("stall_host") - ms("stall_none"), ms("node_host") - ms("node_none")
  nd = split(devices, dev, " ")
  if (nd > 0) {
    printf "\nper exported series, diskstats collector alone on N synthetic disks (CPU minus the no-collector process)\n"
    printf "%7s %14s %14s %14s %14s %s\n", "disks", "stall series", "stall µs/ser", "node series", "node µs/ser", "ratio"
    for (k = 1; k <= nd; k++) {
      s = "stall_dev" dev[k]; m = "node_dev" dev[k]
      ss = series[s] - series["stall_none"]; ns = series[m] - series["node_none"]
      for (r = 0; r < rounds; r++) {
        a[r + 1] = (cpu[s, r] - cpu["stall_none", r]) / ss
        b[r + 1] = (cpu[m, r] - cpu["node_none", r]) / ns
        q[r + 1] = a[r + 1] / b[r + 1]
      }
      printf "%7d %14d %14.2f %14d %14.2f %s\n", dev[k], ss, median(a, rounds) / 1e3, ns, median(b, rounds) / 1e3, spread(q, rounds)
    }
    if (nd > 1) {
      lo = dev[1]; hi = dev[nd]
      for (r = 0; r < rounds; r++) {
        a[r + 1] = (cpu["stall_dev" hi, r] - cpu["stall_dev" lo, r]) / (series["stall_dev" hi] - series["stall_dev" lo])
        b[r + 1] = (cpu["node_dev" hi, r] - cpu["node_dev" lo, r]) / (series["node_dev" hi] - series["node_dev" lo])
        q[r + 1] = a[r + 1] / b[r + 1]
      }
      printf "marginal cost per series from %d to %d disks: stall %.2f µs, node %.2f µs, ratio %s\n", lo, hi, median(a, rounds) / 1e3, median(b, rounds) / 1e3, spread(q, rounds)
    }
  }
  printf "\nRSS (VmRSS) after the run\n"
  for (i = 1; i <= np; i++) printf "  %-20s %6.1f MiB after %d scrapes\n", order[i], rss[order[i]] / 1024, scrapes[order[i]]
}'
