package host

import (
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A memory cgroup's own dirty limits, computed as the kernel computes them
// for its memcg writeback domain. Read in mm/page-writeback.c and
// mm/memcontrol.c of Linux 5.10 and of 6.12+ (where domain_dirty_avail()
// gathers the same steps); the arithmetic is the same in both:
//
//  1. mm/memcontrol.c:mem_cgroup_wb_stats(): for the wb's memcg,
//     dirty = NR_FILE_DIRTY, writeback = NR_WRITEBACK,
//     filepages = NR_INACTIVE_FILE + NR_ACTIVE_FILE (all hierarchical:
//     memory.stat's file_dirty, file_writeback, inactive_file,
//     active_file), and headroom = the least of
//     min(memory.max, memory.high) - min(that, memory.current) over the
//     memcg and every ancestor but the root (PAGE_COUNTER_MAX when none is
//     set).
//  2. mm/page-writeback.c:balance_dirty_pages() (5.10) /
//     domain_dirty_avail() (6.12+): the memcg's dirty is dirty + writeback.
//  3. mm/page-writeback.c:mdtc_calc_avail():
//     clean = filepages - min(filepages, dirty);
//     global_clean = gavail - min(gavail, gdirty), where gavail is
//     global_dirtyable_memory() and gdirty the host's nr_dirty +
//     nr_writeback (+ nr_unstable before 5.8);
//     other_clean = global_clean - min(global_clean, clean);
//     avail = filepages + min(headroom, other_clean).
//  4. mm/page-writeback.c:domain_dirty_limits() for a memcg domain (gdtc
//     set): the ratios in per-PAGE_SIZE units, ratio = vm.dirty_ratio ×
//     PAGE_SIZE / 100; a vm.dirty_bytes setting is turned into a ratio
//     against the host's dirtyable memory,
//     ratio = min(DIV_ROUND_UP(dirty_bytes, gavail), PAGE_SIZE) (bytes
//     over pages: per-PAGE_SIZE); thresh = ratio × avail / PAGE_SIZE,
//     capped at UINT_MAX; likewise bg_thresh; bg_thresh >= thresh becomes
//     thresh / 2.
//  5. balance_dirty_pages(): a writer runs free while the memcg's dirty is
//     at most dirty_freerun_ceiling() = (thresh + bg_thresh) / 2, as for
//     the host (and it must be under both the host's and its memcg's).
//
// Where this is an approximation of what the kernel does:
//   - The kernel uses the memcg of the wb the inode is attached to (the
//     memcg that first dirtied the inode, switched by a foreign-inode
//     election), not the memcg of the process that writes; for a service
//     writing its own files the two are one.
//   - The kernel throttles against the wb's share of the domain
//     (wb_calc_thresh(), per device, by recent writeback completions) as
//     well as the domain's freerun point; this is the domain's point only,
//     like the host's stall_vm_dirty_throttle_ratio.
//   - The memcg domain applies only with cgroup writeback: cgroup v2 with
//     the memory and io controllers on the cgroup, a filesystem that
//     supports it (ext2/4, btrfs, f2fs, xfs), a non-root memcg. The
//     collector exports limits only for cgroups with both controllers.
//   - gavail is not in /proc: it is recovered from /proc/vmstat's
//     nr_dirty_threshold (global_dirty_limits() over
//     global_dirtyable_memory()) by inverting step 4 (±PAGE_SIZE/ratio
//     pages), or from the background threshold, or when both are set in
//     bytes as nr_free_pages + nr_active_file + nr_inactive_file, which
//     leaves out totalreserve_pages (high watermarks and lowmem reserves).
//   - memory.stat's counters are per-CPU batched (the kernel flushes them
//     before reading, memory.stat a little less often): a few MiB per CPU
//     of difference on a busy cgroup.
//   - Real-time tasks get a quarter more (rt_task() in domain_dirty_limits);
//     not modelled.

// dirtySysctls are the four vm.* tunables of the dirty limits, as
// /proc/sys/vm shows them; a write to one of a pair sets the other to 0.
type dirtySysctls struct {
	ratio, bgRatio uint64 // vm.dirty_ratio, vm.dirty_background_ratio (percent)
	bytes, bgBytes uint64 // vm.dirty_bytes, vm.dirty_background_bytes
}

// memcgDirty is one memcg's state in pages, as mem_cgroup_wb_stats()
// reads it.
type memcgDirty struct {
	filePages, headroom, dirty, writeback uint64
}

// noHeadroom is the headroom of a memcg with no memory.max or memory.high
// on it or an ancestor (PAGE_COUNTER_MAX, effectively unlimited).
const noHeadroom = math.MaxUint64

// memcgDirtyLimits returns a memcg domain's dirtyable memory, throttle
// threshold and background threshold, in pages (steps 3 and 4 above).
// hostAvail is the host's dirtyable memory and hostDirty its dirty and
// writeback pages.
func memcgDirtyLimits(s dirtySysctls, pageSize, hostAvail, hostDirty uint64, m memcgDirty) (avail, thresh, bgThresh uint64) {
	dirty := m.dirty + m.writeback
	clean := m.filePages - min(m.filePages, dirty)
	globalClean := hostAvail - min(hostAvail, hostDirty)
	otherClean := globalClean - min(globalClean, clean)
	avail = m.filePages + min(m.headroom, otherClean)

	ratio := s.ratio * pageSize / 100
	bgRatio := s.bgRatio * pageSize / 100
	if s.bytes != 0 && hostAvail > 0 {
		ratio = min(ceilDiv(s.bytes, hostAvail), pageSize)
	}
	if s.bgBytes != 0 && hostAvail > 0 {
		bgRatio = min(ceilDiv(s.bgBytes, hostAvail), pageSize)
	}
	thresh = mulDiv(ratio, avail, pageSize)
	bgThresh = mulDiv(bgRatio, avail, pageSize)
	if thresh > math.MaxUint32 {
		thresh = math.MaxUint32
	}
	if bgThresh >= thresh {
		bgThresh = thresh / 2
	}
	return avail, thresh, bgThresh
}

// throttleRatio is dirty over the freerun ceiling (thresh + bg) / 2, as
// VMStat.ThrottleRatio; ok is false for zero thresholds.
func throttleRatio(dirty, thresh, bgThresh uint64) (float64, bool) {
	if thresh+bgThresh == 0 {
		return 0, false
	}
	return float64(dirty) / (float64(thresh+bgThresh) / 2), true
}

// hostDirtyable estimates global_dirtyable_memory() in pages from one
// /proc/vmstat read (see the approximations above): by inverting the
// kernel's thresh = ⌊ratio·PAGE_SIZE/100⌋ × avail / PAGE_SIZE for the
// threshold that is set as a ratio, else from free and file pages.
func hostDirtyable(v *VMStat, s dirtySysctls, pageSize uint64) (uint64, bool) {
	invert := func(thresh, pct uint64) uint64 {
		r := pct * pageSize / 100
		return (thresh*pageSize + pageSize/2) / r // the middle of the pages that give thresh
	}
	th, okT := v.Get(VMNrDirtyThreshold)
	bg, okB := v.Get(VMNrDirtyBackgroundThreshold)
	switch {
	case okT && s.bytes == 0 && s.ratio > 0 && th > 0 && th < math.MaxUint32:
		return invert(th, s.ratio), true
	case okT && okB && s.bgBytes == 0 && s.bgRatio > 0 && bg > 0 && bg != th/2:
		return invert(bg, s.bgRatio), true
	}
	free, ok1 := v.Get(VMNrFreePages)
	act, ok2 := v.Get(VMNrActiveFile)
	inact, ok3 := v.Get(VMNrInactiveFile)
	if !ok1 || !ok2 || !ok3 {
		return 0, false
	}
	return free + act + inact + 1, true
}

// hostDirtyPages is what the kernel's global domain counts as dirty:
// nr_dirty + nr_writeback (+ nr_unstable before 5.8).
func hostDirtyPages(v *VMStat) (uint64, bool) {
	d, ok1 := v.Get(VMNrDirty)
	w, ok2 := v.Get(VMNrWriteback)
	u, _ := v.Get(VMNrUnstable)
	return d + w + u, ok1 && ok2
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// mulDiv is a×b/c without overflowing for the sizes of real hosts (a is a
// per-PAGE_SIZE ratio, at most PAGE_SIZE).
func mulDiv(a, b, c uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return b / c * a
	}
	return a * b / c
}

// sysctlReader reads the four dirty tunables from /proc/sys/vm, at most
// once per refresh interval (they change by hand, rarely). Safe for
// concurrent use.
type sysctlReader struct {
	dir     string // <procfs>/sys/vm
	refresh time.Duration

	mu     sync.Mutex
	last   dirtySysctls
	ok     bool
	readAt time.Time
}

// get returns the tunables; ok is false while they cannot be read.
func (r *sysctlReader) get() (dirtySysctls, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok && r.refresh > 0 && time.Since(r.readAt) < r.refresh {
		return r.last, true
	}
	var s dirtySysctls
	ok := true
	for _, f := range [...]struct {
		name string
		v    *uint64
	}{
		{"dirty_ratio", &s.ratio}, {"dirty_background_ratio", &s.bgRatio},
		{"dirty_bytes", &s.bytes}, {"dirty_background_bytes", &s.bgBytes},
	} {
		b, err := os.ReadFile(r.dir + "/" + f.name)
		if err != nil {
			ok = false
			break
		}
		x, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			ok = false
			break
		}
		*f.v = x
	}
	r.last, r.ok, r.readAt = s, ok, time.Now()
	return s, ok
}
