#!/bin/sh
# After removing stall-exporter: the .deb's postrm ($1 = remove, purge, upgrade, …) and the .rpm's
# %postun ($1 = 0 on erase, 1 on upgrade). dpkg --purge deletes the configuration files
# (/etc/default/stall_exporter, /etc/stall_exporter/redis-password) itself; this script drops
# the service's enablement links, which outlive the unit file (systemctl disable removes them
# although the unit is gone, and says so). Then systemd forgets the removed unit, and an RPM
# upgrade restarts the service on the new binary.
set -e
if [ "$1" = purge ] && command -v systemctl >/dev/null; then
	systemctl disable stall_exporter.service 2>/dev/null || true
fi
[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload
case "$1" in
1)
	systemctl try-restart stall_exporter.service
	;;
esac
