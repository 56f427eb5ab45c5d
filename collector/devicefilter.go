package collector

import (
	"errors"
	"io/fs"
	"os"
	"regexp"

	"github.com/alecthomas/kingpin/v2"
)

var (
	deviceInclude = kingpin.Flag("diskstats.device-include",
		"Regexp of block devices to include (anchored). When set, only matching devices are exported, partitions and loop devices too.").
		Default("").String()
	deviceExclude = kingpin.Flag("diskstats.device-exclude",
		"Regexp of block devices to exclude (anchored). Ignored when --diskstats.device-include is set.").
		Default(`(ram|loop|zram|fd|sr|nbd)\d+`).String()
	devicePartitions = kingpin.Flag("diskstats.partitions",
		"Also export partitions (detected by /sys/class/block/<dev>/partition, or by name when sysfs is not mounted).").
		Default("false").Bool()
)

// partitionName matches the common partition names, used only when sysfs
// cannot tell: sda1, vdb2, xvda1, nvme0n1p1, mmcblk0p1, md0p1, dm devices are
// never partitions.
var partitionName = regexp.MustCompile(`^((h|s|v|xv)d[a-z]+\d+|(nvme\d+n\d+|mmcblk\d+|md\d+|loop\d+)p\d+)$`)

// DeviceFilter decides which block devices the diskstats collector and the
// sampler export. By default: whole disks only, without ram, loop, zram,
// floppy, optical and nbd devices. Decisions are cached per name, so a
// long-running filter reads sysfs once per device.
type DeviceFilter struct {
	include, exclude *regexp.Regexp
	partitions       bool
	paths            Paths
	cache            map[string]bool
}

// NewDeviceFilter builds the filter from the --diskstats.* flags.
func NewDeviceFilter(paths Paths) (*DeviceFilter, error) {
	return newDeviceFilter(paths, *deviceInclude, *deviceExclude, *devicePartitions)
}

func newDeviceFilter(paths Paths, include, exclude string, partitions bool) (*DeviceFilter, error) {
	f := &DeviceFilter{partitions: partitions, paths: paths, cache: map[string]bool{}}
	var err error
	if include != "" {
		if f.include, err = regexp.Compile("^(?:" + include + ")$"); err != nil {
			return nil, errors.New("--diskstats.device-include: " + err.Error())
		}
	} else if exclude != "" {
		if f.exclude, err = regexp.Compile("^(?:" + exclude + ")$"); err != nil {
			return nil, errors.New("--diskstats.device-exclude: " + err.Error())
		}
	}
	return f, nil
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
	if f.include != nil {
		return !f.include.MatchString(name)
	}
	if f.exclude != nil && f.exclude.MatchString(name) {
		return true
	}
	if !f.partitions && f.isPartition(name) {
		return true
	}
	return false
}

func (f *DeviceFilter) isPartition(name string) bool {
	_, err := os.Stat(f.paths.Sys("class", "block", name, "partition"))
	if err == nil {
		return true
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(f.paths.Sys("class", "block", name)); derr == nil {
			return false // sysfs knows the device and says it is not a partition
		}
	}
	return partitionName.MatchString(name)
}
