#!/usr/bin/env bash
# Installs the real components the tests run against, when missing:
# redis-server, prometheus (the server for the end-to-end test, and promtool),
# prometheus-alertmanager (amtool), iproute2 (network namespaces), libc-bin (getent, for the dns
# tests), util-linux's setsid, unshare and setpriv (the supervision tests), systemd
# (systemd-analyze verifies and rates the units in deploy/systemd), and unbound, dnsperf and curl
# (the dns collector's benchmark, scripts/bench-dns.sh), buildah and rpm (make release builds the image
# with buildah; the release test reads the .rpm with rpm and installs the .deb with dpkg).
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v promtool     >/dev/null 2>&1 || need+=(prometheus)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools) # tools/series-budget opens idle clients with it
command -v amtool       >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v ip           >/dev/null 2>&1 || need+=(iproute2)
command -v getent       >/dev/null 2>&1 || need+=(libc-bin)   # the dns tests run `getent hosts <ip>`
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v unbound      >/dev/null 2>&1 || need+=(unbound)
command -v dnsperf      >/dev/null 2>&1 || need+=(dnsperf)
command -v curl         >/dev/null 2>&1 || need+=(curl)       # scripts/bench-dns.sh scrapes with it
command -v buildah      >/dev/null 2>&1 || need+=(buildah)
command -v rpm          >/dev/null 2>&1 || need+=(rpm)
for tool in setsid unshare setpriv; do
  command -v "$tool" >/dev/null 2>&1 || { need+=(util-linux); break; }
done
command -v prometheus   >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing ${need[*]}: run as root or install them (apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The Debian packages start their daemons; the tests start their own instances.
for svc in redis-server prometheus prometheus-alertmanager unbound; do
  systemctl stop "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
done
