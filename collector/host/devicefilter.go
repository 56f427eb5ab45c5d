package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/stall-exporter/stall_exporter/collector"
)

// deviceSettings are the --diskstats.* flags: include (which, when set,
// makes exclude and the partition rule not apply), exclude, and whether
// partitions are exported.
type deviceSettings struct {
	include, exclude *regexp.Regexp // anchored; nil when the flag is empty
	partitions       bool
}

// filterKey names one device filter: its sysfs and its settings.
type filterKey struct {
	sysfs, include, exclude string
	partitions              bool
}

var filters sync.Map // filterKey → *deviceFilter

// deviceFilterFor returns the one filter of these paths and settings,
// shared by the diskstats collector, the sampler and the kernel log
// reader.
func deviceFilterFor(paths collector.Paths, s deviceSettings) *deviceFilter {
	k := filterKey{sysfs: paths.Sysfs, partitions: s.partitions}
	if s.include != nil {
		k.include = s.include.String()
	}
	if s.exclude != nil {
		k.exclude = s.exclude.String()
	}
	f, _ := filters.LoadOrStore(k, newDeviceFilter(paths, s))
	return f.(*deviceFilter)
}

// partitionName matches the common partition names, used only when sysfs
// cannot tell. A disk named with letters takes the partition number right
// after them (sda1, vdb2, xvda1, hdc3); a disk whose name ends in a digit
// takes "p" and the number (nvme0n1p1, mmcblk0p1, md0p1, loop0p1, nbd0p1,
// Synology's sata1p1, cciss/c0d0p1). dm devices are never partitions.
// Submatch 1 or 2 is the disk's name.
var partitionName = regexp.MustCompile(`^(?:((?:h|s|v|xv)d[a-z]+)\d+|(.*\d)p\d+)$`)

// deviceFilter decides which block devices are exported and which I/O
// errors are left out. By default: whole disks only, without ram, loop,
// zram, floppy, optical and nbd devices. Decisions are cached per name, so
// a long-running filter reads sysfs once per device and a decided name
// costs no allocation. Safe for concurrent use.
type deviceFilter struct {
	deviceSettings
	paths collector.Paths

	mu    sync.Mutex
	cache [3]map[string]bool // by decision: listedDevice, ioErrorDisk, ioErrorDevice
}

// The decisions a filter caches.
const (
	listedDevice  = iota // a /proc/diskstats line's device is not exported
	ioErrorDisk          // an I/O error on this whole disk is left out
	ioErrorDevice        // an I/O error on this device, perhaps a partition, is left out
)

func newDeviceFilter(paths collector.Paths, s deviceSettings) *deviceFilter {
	return &deviceFilter{deviceSettings: s, paths: paths}
}

// ignored reports whether the device of a /proc/diskstats line is not
// exported: left out by name (--diskstats.device-include or -exclude), or
// a partition without --diskstats.partitions. --diskstats.device-include
// selects partitions by name too.
func (f *deviceFilter) ignored(name []byte) bool { return f.decided(listedDevice, name) }

// excludesIOError reports whether an I/O error on the device the kernel
// names is left out (io_error_excluded): the device's disk, by name,
// against --diskstats.device-include or -exclude, so "Buffer I/O error on
// dev loop0p1" is left out with loop0. partition says the name may be a
// partition (the buffer cache's messages); the block layer's name a whole
// disk.
func (f *deviceFilter) excludesIOError(name []byte, partition bool) bool {
	if partition {
		return f.decided(ioErrorDevice, name)
	}
	return f.decided(ioErrorDisk, name)
}

func (f *deviceFilter) decided(kind int, name []byte) bool {
	f.mu.Lock()
	v, ok := f.cache[kind][string(name)] // no allocation for a map index
	f.mu.Unlock()
	if ok {
		return v
	}
	s := string(name)
	switch kind {
	case listedDevice:
		v = f.excludesName(s)
		if !v && f.include == nil && !f.partitions {
			_, v = diskOf(f.paths, s)
		}
	case ioErrorDisk:
		v = f.excludesName(s)
	case ioErrorDevice:
		disk, _ := diskOf(f.paths, s)
		v = f.excludesName(disk)
	}
	f.mu.Lock()
	if f.cache[kind] == nil || len(f.cache[kind]) >= 4096 { // device churn (loop devices in CI) must not grow memory forever
		f.cache[kind] = map[string]bool{}
	}
	f.cache[kind][s] = v
	f.mu.Unlock()
	return v
}

// excludesName reports whether the include or exclude regexp leaves the
// device out by its name alone.
func (f *deviceFilter) excludesName(name string) bool {
	if f.include != nil {
		return !f.include.MatchString(name)
	}
	return f.exclude != nil && f.exclude.MatchString(name)
}

// sysBlock is the sysfs directory of a block device; the kernel's "/" in a
// name (cciss/c0d0) is "!" in sysfs.
func sysBlock(paths collector.Paths, name string) string {
	return paths.Sys("class", "block", strings.ReplaceAll(name, "/", "!"))
}

// diskOf returns the whole disk a block device belongs to, by the kernel's
// name for it, and whether the device is a partition: the name itself for a
// disk (sda, nvme0n1, dm-3, loop0), the parent for a partition (sda1 → sda,
// nvme0n1p2 → nvme0n1, loop0p1 → loop0). sysfs tells: a partition has
// /sys/class/block/<name>/partition, and /sys/class/block/<name> links to
// …/<disk>/<name>. Where sysfs does not know the device (no host /sys in a
// container, a device gone since it logged), the common partition names
// decide.
func diskOf(paths collector.Paths, name string) (disk string, partition bool) {
	dir := sysBlock(paths, name)
	_, err := os.Stat(filepath.Join(dir, "partition"))
	switch {
	case err == nil:
		partition = true
		if target, err := filepath.EvalSymlinks(dir); err == nil {
			parent := filepath.Base(filepath.Dir(target))
			// Only a parent that is itself a block device: a copy of sysfs
			// without its links has class/block as the parent.
			if _, err := os.Stat(paths.Sys("class", "block", parent)); err == nil {
				return strings.ReplaceAll(parent, "!", "/"), true
			}
		}
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(dir); err == nil {
			return name, false // sysfs knows the device and says it is not a partition
		}
	}
	if m := partitionName.FindStringSubmatch(name); m != nil {
		return m[1] + m[2], true // one of them is empty
	}
	return name, partition
}
