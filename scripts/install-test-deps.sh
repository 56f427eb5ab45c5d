#!/usr/bin/env bash
# Installs the real components the tests run against, when missing (the README lists them):
# redis-server and redis-tools (redis-benchmark opens idle clients for tools/series-budget),
# prometheus (the server for the end-to-end test, and promtool), prometheus-alertmanager (amtool),
# iproute2 (network namespaces), libc-bin (getent, for the dns tests), util-linux's setsid, unshare
# and setpriv (the supervision tests), systemd (systemd-analyze verifies and rates the units in
# deploy/systemd), unbound, dnsperf and curl (the dns collector's benchmark, scripts/bench-dns.sh),
# and buildah and rpm (make release builds the image with buildah; the release test reads and
# installs the .rpm with rpm and the .deb with dpkg).
#
# Safe on a machine in use: it never stops, starts, restarts or reconfigures a service. Debian's
# packages start their daemons when installed (redis-server, prometheus, prometheus-alertmanager,
# unbound); the tests start instances of their own on free ports and need none of them, so during the
# install only, a policy-rc.d answering 101 ("action forbidden", Debian's invoke-rc.d policy
# interface, which deb-systemd-invoke honours too) keeps every service from starting. It is removed
# afterwards, even when the install fails or is interrupted. A policy-rc.d that is already there
# belongs to the machine's owner and is left alone (their policy decides).
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || need+=(prometheus)
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
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing ${need[*]}: run as root or install them (apt-get install -y ${need[*]})" >&2
  exit 1
fi

# POLICY_RC_D moves the file for the check of this script with stubbed apt-get and systemctl
# (tools/e2e/testdeps_test.go); apt's tools read only /usr/sbin/policy-rc.d.
policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
marker="written by stall_exporter's scripts/install-test-deps.sh for the length of its apt-get install"
if [ -e "$policy" ] || [ -L "$policy" ]; then
  echo "$policy exists: it decides which of the installed packages' services start" >&2
else
  printf '#!/bin/sh\n# %s\nexit 101\n' "$marker" >"$policy"
  chmod 0755 "$policy"
  # Removed on every way out: success, a failed install (set -e), a signal (bash runs EXIT traps then).
  trap 'if grep -qF "$marker" "$policy" 2>/dev/null; then rm -f "$policy"; fi' EXIT
fi
echo "installing ${need[*]} (their services are not started)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
