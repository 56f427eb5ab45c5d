#!/bin/sh
# After installing or upgrading stall-exporter: the .deb's postinst ($1 = configure, $2 = the
# version configured before, empty on a first install or after a purge) and the .rpm's %post
# ($1 = 1 on install, 2 on upgrade). systemctl runs only when systemd does (not in a chroot or an
# image build). Each distribution's policy, as debhelper's and Fedora's systemd macros apply it:
# Debian enables and starts a service on its first install and, on upgrade or reinstall,
# restarts it if it is enabled; RPM distributions apply the preset (disabled unless the
# administrator's presets enable it) and restart it on upgrade in %postun.
set -e
[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload
case "$1" in
configure)
	if [ -z "$2" ]; then
		systemctl enable --now stall_exporter.service
	elif systemctl --quiet is-enabled stall_exporter.service; then
		systemctl restart stall_exporter.service
	fi
	;;
1)
	systemctl preset stall_exporter.service
	;;
esac
