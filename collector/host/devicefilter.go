package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// deviceSettings are the --diskstats.* flags: include (which, when set,
// makes exclude and the partition rule not apply), exclude, and whether
// partitions are exported.
type deviceSettings struct {
	include, exclude *regexp.Regexp // anchored; nil when the flag is empty
	partitions       bool
}

// partitionName matches the common partition names, used only when sysfs
// cannot tell. A disk named with letters takes the partition number right
// after them (sda1, vdb2, xvda1, hdc3); a disk whose name ends in a digit
// takes "p" and the number (nvme0n1p1, mmcblk0p1, md0p1, loop0p1, nbd0p1,
// Synology's sata1p1, cciss/c0d0p1). dm devices are never partitions.
// Submatch 1 or 2 is the disk's name.
var partitionName = regexp.MustCompile(`^(?:((?:h|s|v|xv)d[a-z]+)\d+|(.*\d)p\d+)$`)

// DeviceFilter decides which block devices the diskstats collector and the
// sampler export. By default: whole disks only, without ram, loop, zram,
// floppy, optical and nbd devices. Decisions are cached per name, so a
// long-running filter reads sysfs once per device.
type DeviceFilter struct {
	deviceSettings
	paths collector.Paths
	cache map[string]bool
}

func newDeviceFilter(paths collector.Paths, s deviceSettings) *DeviceFilter {
	return &DeviceFilter{deviceSettings: s, paths: paths, cache: map[string]bool{}}
}

// Ignored reports whether device name is filtered out. Not safe for
// concurrent use: each collector keeps its own filter.
func (f *DeviceFilter) Ignored(name string) bool {
	if v, ok := f.cache[name]; ok {
		return v
	}
	return f.decideAndCache(name)
}

// ignoredBytes is Ignored for a name in a read buffer: no allocation once
// the name is cached.
func (f *DeviceFilter) ignoredBytes(name []byte) bool {
	if v, ok := f.cache[string(name)]; ok {
		return v
	}
	return f.decideAndCache(string(name))
}

func (f *DeviceFilter) decideAndCache(name string) bool {
	v := f.decide(name)
	if len(f.cache) > 4096 { // device churn (loop devices in CI) must not grow memory forever
		clear(f.cache)
	}
	f.cache[name] = v
	return v
}

func (f *DeviceFilter) decide(name string) bool {
	if f.ExcludesName(name) {
		return true
	}
	// --diskstats.device-include selects partitions by name too.
	return f.include == nil && !f.partitions && f.isPartition(name)
}

// ExcludesName reports whether --diskstats.device-include or -exclude leaves
// the device out by its name alone, without the partition rule: for a disk a
// kernel message names (an I/O error, see diskOf), not a /proc/diskstats
// line. Safe for concurrent use.
func (f *DeviceFilter) ExcludesName(name string) bool {
	if f.include != nil {
		return !f.include.MatchString(name)
	}
	return f.exclude != nil && f.exclude.MatchString(name)
}

func (f *DeviceFilter) isPartition(name string) bool {
	dir := sysBlock(f.paths, name)
	_, err := os.Stat(filepath.Join(dir, "partition"))
	if err == nil {
		return true
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(dir); derr == nil {
			return false // sysfs knows the device and says it is not a partition
		}
	}
	return partitionName.MatchString(name)
}

// sysBlock is the sysfs directory of a block device; the kernel's "/" in a
// name (cciss/c0d0) is "!" in sysfs.
func sysBlock(paths collector.Paths, name string) string {
	return paths.Sys("class", "block", strings.ReplaceAll(name, "/", "!"))
}

// diskOf returns the whole disk a block device belongs to, by the kernel's
// name for it: the name itself for a disk (sda, nvme0n1, dm-3, loop0), the
// parent for a partition (sda1 → sda, nvme0n1p2 → nvme0n1, loop0p1 → loop0).
// sysfs tells: a partition has /sys/class/block/<name>/partition, and
// /sys/class/block/<name> links to …/<disk>/<name>. Where sysfs does not know
// the device (no host /sys in a container, a device gone since it logged),
// the common partition names decide, as in isPartition; otherwise the name
// is the disk.
func diskOf(paths collector.Paths, name string) string {
	dir := sysBlock(paths, name)
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		if target, err := filepath.EvalSymlinks(dir); err == nil {
			parent := filepath.Base(filepath.Dir(target))
			// Only a parent that is itself a block device: a copy of sysfs
			// without its links has class/block as the parent.
			if _, err := os.Stat(paths.Sys("class", "block", parent)); err == nil {
				return strings.ReplaceAll(parent, "!", "/")
			}
		}
	} else if _, err := os.Stat(dir); err == nil {
		return name // sysfs knows the device and says it is not a partition
	}
	if m := partitionName.FindStringSubmatch(name); m != nil {
		return m[1] + m[2] // one of them is empty
	}
	return name
}
