#!/usr/bin/env bash
# Measures the exporter's resident memory the way the deploy/ resource requests were chosen:
# start the binary, scrape it N times from P concurrent scrapers (Prometheus HA pairs and /probe
# jobs scrape in parallel), then read VmRSS and VmHWM (the peak) from /proc/<pid>/status.
#   scripts/measure-rss.sh [N=400] [P=4] [extra exporter flags…]
# e.g. scripts/measure-rss.sh 400 4 --redis.addr=redis://127.0.0.1:6379 --rocketmq.namesrv=127.0.0.1:9876
set -euo pipefail
n=${1:-400}; p=${2:-4}; shift $(( $# >= 2 ? 2 : $# ))
bin=$(mktemp -d)/stall_exporter
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$bin" .
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" --web.listen-address="127.0.0.1:$port" --log.level=warn "$@" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$bin"' EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$port/"; do sleep 0.1; done
for _ in $(seq "$p"); do
  ( for _ in $(seq $(( n / p ))); do curl -sf -o /dev/null "http://127.0.0.1:$port/metrics"; done ) &
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
echo "after $n scrapes ($p concurrent): $(grep -E 'VmRSS|VmHWM' /proc/$pid/status | tr -s ' \n' ' ')"
