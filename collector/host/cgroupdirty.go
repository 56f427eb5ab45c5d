package host

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// The cgroup_dirty collector: each memory cgroup's dirty and writeback
// pages (memory.stat) and, on cgroup v2, the cgroup's own dirty throttle
// point as balance_dirty_pages() computes it for its memcg domain
// (cgroupdirty_limits.go). Exported for the watched cgroups (the cgroups
// of the processes supervision identifies) and the --cgroup-dirty.top
// cgroups with the most dirty and writeback pages, the rest summed as
// cgroup="other". cgroup v1 has no per-cgroup throttling: only the dirty
// and writeback bytes are exported there. See docs/cgroup-dirty.md.

func init() {
	register("cgroup_dirty",
		"Dirty and writeback pages per memory cgroup (memory.stat) and, on cgroup v2, each cgroup's own dirty throttle point, for the watched services' cgroups and the top cgroups by dirty pages",
		newCgroupDirty)
}

var (
	cgroupDirtyBytes = collector.NewMetric("cgroup_dirty_bytes",
		"Dirty page-cache bytes charged to the cgroup and its descendants (memory.stat file_dirty on cgroup v2, total_dirty on v1); cgroup=\"other\" sums the cgroups not exported by name.",
		prometheus.GaugeValue, "cgroup")
	cgroupWritebackBytes = collector.NewMetric("cgroup_writeback_bytes",
		"Bytes under writeback charged to the cgroup and its descendants (memory.stat file_writeback on v2, total_writeback on v1); cgroup=\"other\" as for stall_cgroup_dirty_bytes.",
		prometheus.GaugeValue, "cgroup")
	cgroupDirtyThreshold = collector.NewMetric("cgroup_dirty_threshold_bytes",
		"The cgroup's own dirty limit: vm.dirty_ratio (or vm.dirty_bytes scaled to the host) of the memory its memory.max/memory.high leave it, as domain_dirty_limits() computes it for its memcg domain. cgroup v2 with the memory and io controllers only: v1 has no per-cgroup throttling.",
		prometheus.GaugeValue, "cgroup")
	cgroupDirtyBackgroundThreshold = collector.NewMetric("cgroup_dirty_background_threshold_bytes",
		"The cgroup's own background writeback threshold (vm.dirty_background_ratio or _bytes, as stall_cgroup_dirty_threshold_bytes). cgroup v2 only.",
		prometheus.GaugeValue, "cgroup")
	cgroupThrottleRatio = collector.NewMetric("cgroup_dirty_throttle_ratio",
		"The cgroup's dirty and writeback bytes over the midpoint of its own two thresholds, as stall_vm_dirty_throttle_ratio for the host; at 1 balance_dirty_pages() throttles the cgroup's writers whatever the host's ratio. cgroup v2 only: v1 has no per-cgroup throttling.",
		prometheus.GaugeValue, "cgroup")
	cgroupWatched = collector.NewMetric("cgroup_watched",
		"1 for the cgroup of each process the supervision collector identifies (service as in stall_watched_processes), from /proc/<pid>/cgroup; needs the supervision collector.",
		prometheus.GaugeValue, "cgroup", "service")
	cgroupDirtyReads = collector.NewMetric("cgroup_dirty_reads",
		"memory.stat files and cgroup directories the last scrape read to find the top cgroups by dirty pages, at most --cgroup-dirty.max-reads.",
		prometheus.GaugeValue)
)

// cgroupOther is the cgroup label of the cgroups not exported by name.
const cgroupOther = "other"

type cgroupDirtyCollector struct {
	paths     collector.Paths
	problems  *collector.Problems
	state     *collector.StateLog
	pageSize  uint64
	top       int
	maxReads  int
	vmSrc     *procSource
	sysctls   *sysctlReader
	watched   *watchedSet
	mountinfo string

	mu     sync.Mutex // concurrent scrapes share the buffers
	layout *cgroupLayout
	reader memStatReader
	vmBuf  []byte
}

func newCgroupDirty(cfg collector.Config, s settings) *cgroupDirtyCollector {
	return &cgroupDirtyCollector{
		paths:     cfg.Paths,
		problems:  cfg.Problems,
		state:     collector.NewStateLog(cfg.Logger),
		pageSize:  s.pageSize,
		top:       s.cgroupTop,
		maxReads:  s.cgroupMaxReads,
		vmSrc:     sourceAt(cfg.Paths.Proc("vmstat")),
		sysctls:   sysctlsAt(cfg.Paths.Proc("sys", "vm"), s.sysctlRefresh),
		watched:   watchedAt(cfg.Paths.Procfs),
		mountinfo: cfg.Paths.Proc("self", "mountinfo"),
	}
}

// cgroupSeries is one exported cgroup.
type cgroupSeries struct {
	label            string
	paths            []string
	node             *cgroupDirtyNode
	dirty, writeback uint64
	services         []string
}

// Update walks the memory hierarchy (bounded, walkCgroups) and exports the
// watched cgroups, the top cgroups and "other".
func (c *cgroupDirtyCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.layout == nil {
		l, err := findMemoryCgroups(c.mountinfo)
		if err != nil {
			return fmt.Errorf("%w: no memory cgroup hierarchy: %v", collector.ErrNoData, err)
		}
		c.layout = &l
	}
	l := *c.layout
	w := walkCgroups(l, c.maxReads, &c.reader)
	c.problems.Add("cgroup_memory_stat_line", w.bad, w.badErr)
	cgroupDirtyReads.Send(ch, float64(w.reads))
	if len(w.read) == 0 && w.err != nil {
		return fmt.Errorf("reading %s: %w", l.root, w.err) // nothing could be read
	}

	named := c.choose(l, w)
	var outer []string // the named paths
	for _, s := range named {
		cgroupDirtyBytes.Send(ch, float64(s.dirty), s.label)
		cgroupWritebackBytes.Send(ch, float64(s.writeback), s.label)
		for _, svc := range s.services {
			cgroupWatched.Send(ch, 1, s.label, svc)
		}
		outer = append(outer, s.paths...)
	}
	// "other" is the hierarchy's total less the named cgroups, each
	// subtree counted once (a watched cgroup inside another is in it).
	slices.Sort(outer)
	outer = slices.Compact(outer)
	otherDirty, otherWB := w.dirty, w.writeback
	for i, p := range outer {
		if slices.ContainsFunc(outer[:i], func(q string) bool { return within(p, q) }) {
			continue
		}
		if n := w.read[p]; n != nil {
			otherDirty -= min(otherDirty, n.dirty)
			otherWB -= min(otherWB, n.writeback)
		}
	}
	cgroupDirtyBytes.Send(ch, float64(otherDirty), cgroupOther)
	cgroupWritebackBytes.Send(ch, float64(otherWB), cgroupOther)

	if l.v2 {
		c.sendLimits(ch, l, named)
	}
	if w.err != nil {
		c.state.Failed("cannot read part of the memory cgroup hierarchy; cgroups in it are missing from stall_cgroup_dirty_bytes", readReason(w.err), w.err)
		return w.err
	}
	c.state.OK("reads the memory cgroup hierarchy again")
	return nil
}

// choose returns the cgroups exported by name: the watched ones, then the
// top frontier cgroups that are neither inside nor around a watched one.
func (c *cgroupDirtyCollector) choose(l cgroupLayout, w *cgroupWalk) []*cgroupSeries {
	byLabel := map[string]*cgroupSeries{}
	var out []*cgroupSeries
	add := func(p string, n *cgroupDirtyNode, svc string) {
		label := proclabel.Cgroup(p)
		if label == cgroupOther {
			label = "/" + label // a cgroup named "other" is not the sum
		}
		s := byLabel[label]
		if s == nil {
			s = &cgroupSeries{label: label}
			byLabel[label] = s
			out = append(out, s)
		}
		if !slices.Contains(s.paths, p) {
			s.paths = append(s.paths, p)
			s.dirty += n.dirty
			s.writeback += n.writeback
			s.node = n
		}
		if svc != "" && !slices.Contains(s.services, svc) {
			s.services = append(s.services, svc)
		}
	}
	list, _ := c.watched.get()
	var watchedPaths []string
	for _, wc := range list {
		p := wc.path(l.v2)
		if p == "" || p == "/" {
			continue // the root cgroup is the host's: stall_vm_*
		}
		n := w.read[p]
		if n == nil {
			n = &cgroupDirtyNode{path: p}
			if !w.readNode(l, n, &c.reader) {
				continue // removed since supervision's scan
			}
		}
		watchedPaths = append(watchedPaths, p)
		add(p, n, wc.service)
	}
	frontier := slices.Clone(w.frontier)
	slices.SortFunc(frontier, func(a, b *cgroupDirtyNode) int {
		return cmp.Or(cmp.Compare(b.total(), a.total()), strings.Compare(a.path, b.path))
	})
	topped := 0
	for _, n := range frontier {
		if topped >= c.top {
			break
		}
		if n.path == "/" || slices.ContainsFunc(watchedPaths, func(q string) bool { return within(n.path, q) || within(q, n.path) }) {
			continue
		}
		if _, dup := byLabel[proclabel.Cgroup(n.path)]; dup {
			continue
		}
		add(n.path, n, "")
		topped++
	}
	for _, s := range out {
		slices.Sort(s.services)
	}
	return out
}

// within reports whether cgroup path p is q or inside it.
func within(p, q string) bool {
	return p == q || q == "/" || strings.HasPrefix(p, q+"/")
}

// sendLimits exports the v2 thresholds and ratio of the named cgroups
// that are under cgroup writeback (memory and io controllers).
func (c *cgroupDirtyCollector) sendLimits(ch chan<- prometheus.Metric, l cgroupLayout, named []*cgroupSeries) {
	host, ok := c.hostState()
	if !ok {
		return
	}
	for _, s := range named {
		if len(s.paths) != 1 || s.paths[0] == "/" {
			continue // two cgroups under one name, or the root: no one domain
		}
		dir := l.root + s.paths[0]
		if !cgroupWritebackOn(dir) {
			continue
		}
		levels, err := readCeilings(l.root, s.paths[0])
		if err != nil {
			continue // removed meanwhile, or unreadable: the bytes are exported, the limits not
		}
		lim, ok := host.limits(&s.node.stat, levels, c.pageSize)
		for _, lv := range levels {
			lv.current.close()
		}
		if !ok {
			continue
		}
		cgroupDirtyThreshold.Send(ch, float64(lim.thresh*c.pageSize), s.label)
		cgroupDirtyBackgroundThreshold.Send(ch, float64(lim.bgThresh*c.pageSize), s.label)
		cgroupThrottleRatio.Send(ch, lim.ratio, s.label)
	}
}

// hostState reads the host's side of the formula: /proc/vmstat (the
// sampler's last read while it runs) and the vm.dirty_* tunables.
func (c *cgroupDirtyCollector) hostState() (hostDirtyState, bool) {
	data, err := c.vmSrc.Read(c.vmBuf)
	c.vmBuf = data[:0]
	if err != nil {
		return hostDirtyState{}, false
	}
	var v VMStat
	ParseVMStat(data, &v) // malformed lines are counted by the vmstat collector
	sys, ok := c.sysctls.get()
	if !ok {
		return hostDirtyState{}, false
	}
	return newHostDirtyState(&v, sys, c.pageSize)
}

// hostDirtyState is the host's dirtyable memory and dirty pages, and the
// tunables, at one instant.
type hostDirtyState struct {
	sys          dirtySysctls
	avail, dirty uint64 // pages
}

func newHostDirtyState(v *VMStat, sys dirtySysctls, pageSize uint64) (hostDirtyState, bool) {
	avail, ok1 := hostDirtyable(v, sys, pageSize)
	dirty, ok2 := hostDirtyPages(v)
	return hostDirtyState{sys: sys, avail: avail, dirty: dirty}, ok1 && ok2
}

// cgroupLimits is one cgroup's limits (pages) and throttle ratio.
type cgroupLimits struct {
	avail, thresh, bgThresh uint64
	ratio                   float64
}

// limits computes a cgroup's limits from its memory.stat and the
// headroom of its ceilings (reading each level's memory.current now).
func (h hostDirtyState) limits(m *MemStat, levels []cgroupCeiling, pageSize uint64) (cgroupLimits, bool) {
	d, wb, ok1 := m.Dirty()
	file, ok2 := m.FileBytes()
	if !ok1 || !ok2 {
		return cgroupLimits{}, false
	}
	headroom, err := headroomPages(levels, pageSize)
	if err != nil {
		return cgroupLimits{}, false
	}
	md := memcgDirty{filePages: file / pageSize, headroom: headroom, dirty: d / pageSize, writeback: wb / pageSize}
	var lim cgroupLimits
	lim.avail, lim.thresh, lim.bgThresh = memcgDirtyLimits(h.sys, pageSize, h.avail, h.dirty, md)
	r, ok := throttleRatio(md.dirty+md.writeback, lim.thresh, lim.bgThresh)
	lim.ratio = r
	return lim, ok
}

// cgroupCeiling is one level (the cgroup or an ancestor below the root)
// with a memory.max or memory.high: its ceiling and its memory.current.
type cgroupCeiling struct {
	ceiling uint64 // bytes
	current *procSource
}

// readCeilings returns the levels of cgroup p (under root) that have a
// ceiling; the others leave the headroom unlimited.
func readCeilings(root, p string) ([]cgroupCeiling, error) {
	var out []cgroupCeiling
	for _, a := range ancestors(p) {
		ceil, finite, err := readCeiling(root + a)
		if err != nil {
			return nil, err
		}
		if finite {
			out = append(out, cgroupCeiling{ceiling: ceil, current: &procSource{path: root + a + "/memory.current"}})
		}
	}
	return out, nil
}

// headroomPages is mem_cgroup_wb_stats()'s headroom: the least
// ceiling - min(ceiling, memory.current) over the levels, in pages.
func headroomPages(levels []cgroupCeiling, pageSize uint64) (uint64, error) {
	headroom := uint64(noHeadroom)
	var buf [32]byte
	for _, lv := range levels {
		b, err := lv.current.ReadNow(buf[:0])
		if err != nil {
			return 0, err
		}
		used, ok := scan.Uint(bytes.TrimSpace(b))
		if !ok {
			return 0, errors.New(lv.current.path + ": not a number")
		}
		c := lv.ceiling / pageSize
		headroom = min(headroom, c-min(c, used/pageSize))
	}
	return headroom, nil
}

// cgroupWritebackOn reports whether the kernel can use the cgroup's
// memcg domain: cgroup writeback needs both the memory and the io
// controller on the cgroup (its cgroup.controllers).
func cgroupWritebackOn(dir string) bool {
	b, err := os.ReadFile(dir + "/cgroup.controllers")
	return err == nil && hasWord(b, "memory") && hasWord(b, "io")
}

// sysctlReaders shares one reader of /proc/sys/vm between the collector and
// the sampler.
var sysctlReaders sync.Map // dir → *sysctlReader

func sysctlsAt(dir string, refresh time.Duration) *sysctlReader {
	r, _ := sysctlReaders.LoadOrStore(dir, &sysctlReader{dir: dir, refresh: refresh})
	return r.(*sysctlReader)
}
