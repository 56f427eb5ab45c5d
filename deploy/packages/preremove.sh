#!/bin/sh
# Before removing stall-exporter: the .deb's prerm ($1 = remove, or upgrade) and the .rpm's
# %preun ($1 = 0 on erase, 1 on upgrade). Removal stops the service: dpkg keeps it enabled until
# a purge (so a reinstall brings it back), rpm -e disables it too. An upgrade leaves it running
# for the new version's scripts to restart.
set -e
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove)
	systemctl stop stall_exporter.service
	;;
0)
	systemctl disable --now stall_exporter.service
	;;
esac
