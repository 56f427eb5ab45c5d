package host

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/collector"
)

// flagValues are the host collectors' flags as kingpin parsed them:
// settings() validates them. registerFlags declares them on an
// application, so tests parse their own command lines instead of mutating
// the process-wide flags.
type flagValues struct {
	parsed                       settings // the flags that need no compiling
	deviceInclude, deviceExclude string
}

// flags are the process's flags, parsed by main; only the factories read
// them (register).
var flags = registerFlags(kingpin.CommandLine)

func registerFlags(app *kingpin.Application) *flagValues {
	f := &flagValues{}
	app.Flag("diskstats.device-include",
		"Regexp of block devices to include (anchored). When set, only matching devices are exported, partitions and loop devices too.").
		Default("").StringVar(&f.deviceInclude)
	app.Flag("diskstats.device-exclude",
		"Regexp of block devices to exclude (anchored). Ignored when --diskstats.device-include is set.").
		Default(`(ram|loop|zram|fd|sr|nbd)\d+`).StringVar(&f.deviceExclude)
	app.Flag("diskstats.partitions",
		"Also export partitions (detected by /sys/class/block/<dev>/partition, or by name when sysfs is not mounted).").
		Default("false").BoolVar(&f.parsed.devices.partitions)
	app.Flag("kmsg.from-boot",
		"Also count the kernel log records already in the kernel's buffer at start (from boot, as far as the buffer reaches); by default only records logged after the exporter started are counted.").
		Default("false").BoolVar(&f.parsed.kmsgFromBoot)
	app.Flag("vmstat.page-size",
		"Kernel page size in bytes used to convert /proc/vmstat and /proc/zoneinfo page counts; 0 means the running kernel's (getpagesize). Set it only to read fixtures of another architecture.").
		Default("0").Uint64Var(&f.parsed.pageSize)
	app.Flag("sampler.interval",
		"Interval of the sub-scrape sampler (100ms–10s): each interval's disk await, disk utilization and dirty throttle ratio become one histogram observation.").
		Default("1s").DurationVar(&f.parsed.samplerInterval)
	app.Flag("supervision.scan-interval",
		"How often the supervision collector rescans /proc for the watched processes (RocketMQ broker and name server JVMs, redis-server); scrapes in between reuse the last scan. Minimum 10s.").
		Default("30s").DurationVar(&f.parsed.supervisionInterval)
	app.Flag("cgroup-dirty.top",
		"How many memory cgroups with the most dirty and writeback pages get series of their own in the cgroup_dirty collector, besides the watched services' cgroups; the rest are summed as cgroup=\"other\".").
		Default("10").IntVar(&f.parsed.cgroupTop)
	app.Flag("cgroup-dirty.max-reads",
		"At most this many memory.stat files and cgroup directories are read per scrape to find the top cgroups (best first: always the cgroup with the most dirty pages is opened next); bounds the cost on hosts with thousands of cgroups.").
		Default("200").IntVar(&f.parsed.cgroupMaxReads)
	app.Flag("sysctl.refresh-interval",
		"How long the vm.* tunables read from /proc/sys/vm are reused before being read again (0 = every scrape). Reading them costs ~50 small file reads; the kernel's resulting dirty thresholds are read live from /proc/vmstat every scrape.").
		Default("1m").DurationVar(&f.parsed.sysctlRefresh)
	return f
}

// The bounds of --sampler.interval and --supervision.scan-interval.
const (
	samplerMinInterval = 100 * time.Millisecond
	samplerMaxInterval = 10 * time.Second
	// minSupervisionInterval bounds the scan rate. A scan costs one open,
	// read and close of /proc/<pid>/comm per process, about 15 µs of CPU
	// each on a loaded 2-vCPU VM (docs/benchmarks.md): every 10 s on a host
	// with 5,000 processes that is under 1 % of a core. The state it
	// reports lasts as long as the operator's session, minutes to days, so
	// scanning faster gains nothing.
	minSupervisionInterval = 10 * time.Second
)

// settings is everything the host collectors' flags decide, validated.
type settings struct {
	devices             deviceSettings
	kmsgFromBoot        bool
	pageSize            uint64 // bytes per page of /proc/vmstat and /proc/zoneinfo counts
	samplerInterval     time.Duration
	supervisionInterval time.Duration
	sysctlRefresh       time.Duration // 0: read every scrape
	cgroupTop           int           // --cgroup-dirty.top
	cgroupMaxReads      int           // --cgroup-dirty.max-reads
}

// settings validates the flag values. Every refusal names its flag, so a
// bad command line stops the exporter at start with a clear message.
func (f *flagValues) settings() (settings, error) {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	s := f.parsed
	anchored := func(flag, expr string) *regexp.Regexp {
		if expr == "" {
			return nil
		}
		re, err := regexp.Compile("^(?:" + expr + ")$")
		check(err != nil, "--%s: %v", flag, err)
		return re
	}
	if s.devices.include = anchored("diskstats.device-include", f.deviceInclude); s.devices.include == nil {
		s.devices.exclude = anchored("diskstats.device-exclude", f.deviceExclude)
	}
	// 0 is the running kernel's; else a power of two from 4 KiB to 1 MiB.
	p := s.pageSize
	check(p != 0 && (p < 4096 || p > 1<<20 || p&(p-1) != 0),
		"--vmstat.page-size=%d: want 0 or a power of two from 4096 to 1048576", p)
	if p == 0 {
		s.pageSize = uint64(os.Getpagesize())
	}
	check(s.samplerInterval < samplerMinInterval || s.samplerInterval > samplerMaxInterval,
		"--sampler.interval=%s is outside %s–%s", s.samplerInterval, samplerMinInterval, samplerMaxInterval)
	check(s.supervisionInterval < minSupervisionInterval,
		"--supervision.scan-interval=%s is below the minimum of %s", s.supervisionInterval, minSupervisionInterval)
	check(s.cgroupTop < 0 || s.cgroupTop > 1000, "--cgroup-dirty.top=%d: want 0–1000", s.cgroupTop)
	check(s.cgroupMaxReads < 2, "--cgroup-dirty.max-reads=%d: want at least 2 (the root and its top level)", s.cgroupMaxReads)
	check(s.sysctlRefresh < 0, "--sysctl.refresh-interval=%s must be 0 (every scrape) or positive", s.sysctlRefresh)
	return s, errors.Join(errs...)
}

// register makes a host collector known (every one is enabled by
// default). Its constructor gets the validated flags and cannot fail: a
// missing file is a state of the collector, not a reason not to start.
func register[C collector.Collector](name, description string, build func(collector.Config, settings) C) {
	collector.Register(name, description, true, func(cfg collector.Config) (collector.Collector, error) {
		s, err := flags.settings()
		if err != nil {
			return nil, err
		}
		return build(cfg, s), nil
	})
}
