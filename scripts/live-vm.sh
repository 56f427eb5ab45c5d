#!/usr/bin/env bash
# The live dirty-page test (tools/alerts/live, TestDirtyPagesApproach) on a cgroup-v2-only kernel,
# in a virtual machine on this machine: for a host whose block controller is held by a cgroup v1
# hierarchy it cannot release (docs/alerts.md, "Measured on a live kernel"), which therefore runs
# only the test's v1 path.
#
# The VM boots Debian's kernel (linux-image-amd64, 6.1 in Debian 12) with cgroup_no_v1=all and a
# small initramfs whose busybox init loads the virtio, 9p and overlay modules, mounts this machine's
# / read-only over 9p under a tmpfs overlay (so the VM sees the repository, Go, Prometheus and
# Alertmanager as they are here, and its writes stay in its own memory), mounts /proc, /sys, /dev,
# /dev/shm, /tmp and cgroup2 at /sys/fs/cgroup (no v1 hierarchy), loads the loop module, and runs
# the test binary compiled here with STALL_TEST_STRICT=1 STALL_TEST_DISPOSABLE=1, so that a missing
# prerequisite fails it. The test builds the exporter itself with the Go toolchain it finds in the
# VM (the build cache, warmed here first, is read through the overlay). The init then powers off;
# the script prints the test's output and exits with its status.
#
#   scripts/live-vm.sh                # RUN: the test's -test.run (^TestDirtyPagesApproach$)
#   MEMORY_CGROUP=1 scripts/live-vm.sh
#                                     # also enable memory (and pids) in the root cgroup, as systemd
#                                     # does: the writer's cgroup then has a writeback of its own
#   PKG=collector/host TAGS=livevm RUN='^TestCgroupDirtyV2Throttle$' scripts/live-vm.sh
#                                     # another package's test (PKG: its directory, tools/… in the
#                                     # tools module), built with TAGS: a cgroup's own dirty limit
#
# Needs root and qemu-system-x86 linux-image-amd64 busybox-static (apt-get install). ACCEL is kvm
# where the CPU shows vmx or svm and /dev/kvm is there, tcg (emulation) otherwise: a /dev/kvm without
# them, as on a Firecracker VM whose KVM is PVM (kvm_pvm), runs only kernels built as PVM guests,
# and Debian's hangs in its decompressor. MEM (MiB, 4096) and CPUS (2) size the VM; KERNEL picks the
# kernel release under /boot (the newest by default). The VM is stopped after 30 minutes. Nothing
# on this machine is changed but the temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

[ "$(id -u)" = 0 ] || { echo "live-vm: run as root: QEMU serves this machine's / to the VM with its caller's rights" >&2; exit 2; }
accel=${ACCEL:-tcg} cpu=max
if [ -z "${ACCEL:-}" ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then accel=kvm; fi
[ "$accel" = kvm ] && cpu=host
kver=${KERNEL:-$(basename "$(ls -v /boot/vmlinuz-* | tail -n 1)" | sed 's/^vmlinuz-//')}
for f in /boot/vmlinuz-"$kver" /lib/modules/"$kver" /usr/bin/busybox /usr/bin/qemu-system-x86_64; do
	[ -e "$f" ] || { echo "live-vm: $f missing: apt-get install qemu-system-x86 linux-image-amd64 busybox-static" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/initrd/{bin,mods,proc,sys,dev,mnt,lower,upper,root} "$work/out"

pkg=${PKG:-tools/alerts/live}
echo "live-vm: compiling the test of $pkg; warming the build cache for the exporter the test builds in the VM" >&2
case $pkg in
tools/*) (cd tools && go test -c ${TAGS:+-tags "$TAGS"} -o "$work/out/live.test" ./"${pkg#tools/}") ;;
*) go test -c ${TAGS:+-tags "$TAGS"} -o "$work/out/live.test" ./"$pkg" ;;
esac
# The flags of internal/e2etest.Build: in the VM, go build finds everything cached but the link.
CGO_ENABLED=0 go build -ldflags "-s -w" -o /dev/null .

# The modules the init needs before it can see this machine's / (loop comes later, through the
# share), in the order modprobe would load them.
for m in virtio_pci 9pnet_virtio 9p overlay; do
	modprobe -S "$kver" --show-depends "$m"
done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
	cp "$ko" "$work/initrd/mods/"
	basename "$ko" >>"$work/initrd/mods/order"
done
cp /usr/bin/busybox "$work/initrd/bin/"

cat >"$work/initrd/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in \$(cat /mods/order); do insmod /mods/\$m; done
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=1048576,cache=loose host /lower
mount -t 9p -o trans=virtio,version=9p2000.L out /mnt
mount -t tmpfs -o size=2g upper /upper && mkdir -p /upper/up /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/up,workdir=/upper/work overlay /root
r=/root
mount -t proc proc \$r/proc; mount -t sysfs sys \$r/sys; mount -t devtmpfs dev \$r/dev
mkdir -p \$r/dev/shm; mount -t tmpfs shm \$r/dev/shm; mount -t tmpfs tmp \$r/tmp
mount -t cgroup2 cgroup2 \$r/sys/fs/cgroup
[ "${MEMORY_CGROUP:-}" = 1 ] && echo "+memory +pids" >\$r/sys/fs/cgroup/cgroup.subtree_control
ip link set lo up
mkdir -p \$r/run/out && mount --bind /mnt \$r/run/out
chroot \$r /sbin/modprobe loop
{
	echo "live-vm: kernel \$(uname -r), \$(nproc) CPUs; cgroup mounts:"; grep cgroup /proc/mounts
	echo "live-vm: cgroup2 controllers: \$(cat \$r/sys/fs/cgroup/cgroup.controllers); subtree_control: \$(cat \$r/sys/fs/cgroup/cgroup.subtree_control)"
} | tee /mnt/test.log
chroot \$r /usr/bin/env -i PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root GOTOOLCHAIN=local GOPROXY=off STALL_TEST_STRICT=1 STALL_TEST_DISPOSABLE=1 /bin/sh -c \
	'cd $repo/$pkg && /run/out/live.test -test.v -test.timeout=20m -test.run="${RUN:-^TestDirtyPagesApproach\$}" 2>&1; echo \$? >/run/out/rc' |
	tee -a /mnt/test.log
echo "live-vm: after the test, cgroup2 subtree_control: \$(cat \$r/sys/fs/cgroup/cgroup.subtree_control); child cgroups: \$(cd \$r/sys/fs/cgroup && find . -mindepth 1 -type d)" | tee -a /mnt/test.log
sync; umount \$r/run/out; umount /mnt
poweroff -f
EOF
chmod +x "$work/initrd/init"
(cd "$work/initrd" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

echo "live-vm: booting $kver ($accel, ${CPUS:-2} CPUs, ${MEM:-4096} MiB)" >&2
started=$(date +%s)
timeout 30m qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp "${CPUS:-2}" -m "${MEM:-4096}" -nographic -no-reboot -nic none \
	-kernel /boot/vmlinuz-"$kver" -initrd "$work/initrd.gz" \
	-append "console=ttyS0 cgroup_no_v1=all panic=-1 quiet" \
	-virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
	-virtfs local,path="$work/out",mount_tag=out,security_model=none \
	</dev/null >"$work/console.log" 2>&1 || { cat "$work/console.log"; echo "live-vm: qemu failed or timed out" >&2; exit 2; }
cat "$work/out/test.log" 2>/dev/null || { cat "$work/console.log"; echo "live-vm: the VM wrote no test output" >&2; exit 2; }
rc=$(cat "$work/out/rc" 2>/dev/null || echo 2)
echo "live-vm: the test exited $rc after $(($(date +%s) - started)) s in the VM"
exit "$rc"
