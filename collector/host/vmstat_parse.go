package host

import (
	"bytes"
	"math/bits"

	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// VMField names one /proc/vmstat counter that stall_exporter reads. Fields
// that exist in several kernel layouts (per-zone before 4.8, node-wide
// after) are normalised by VMStat's accessors, not here.
type VMField uint8

// The /proc/vmstat fields the exporter uses. Per-zone variants of one
// counter (allocstall_normal, pgscan_direct_dma32 …) fold into the *Zones
// field by summing, so a single field covers the old and the new layout.
const (
	VMNrDirty                    VMField = iota // nr_dirty (pages)
	VMNrWriteback                               // nr_writeback (pages)
	VMNrUnstable                                // nr_unstable (NFS unstable pages, removed in 5.8)
	VMNrDirtyThreshold                          // nr_dirty_threshold (pages, kernel's global dirty limit)
	VMNrDirtyBackgroundThreshold                // nr_dirty_background_threshold (pages)
	VMNrDirtied                                 // nr_dirtied (counter, pages)
	VMNrWritten                                 // nr_written (counter, pages)
	VMAllocstall                                // allocstall (one counter, before 4.8)
	VMAllocstallZones                           // sum of allocstall_<zone> (4.8+)
	VMPgscanDirect                              // pgscan_direct (node-wide, 4.8+)
	VMPgscanDirectZones                         // sum of pgscan_direct_<zone> (before 4.8)
	VMPgstealDirect                             // pgsteal_direct (node-wide, 4.8+)
	VMPgstealDirectZones                        // sum of pgsteal_direct_<zone> (3.x–4.7)
	VMPgscanKswapd                              // pgscan_kswapd (node-wide, 4.8+)
	VMPgscanKswapdZones                         // sum of pgscan_kswapd_<zone> (before 4.8)
	VMPgstealKswapd                             // pgsteal_kswapd (node-wide, 4.8+)
	VMPgstealKswapdZones                        // sum of pgsteal_kswapd_<zone> (3.x–4.7)
	VMPgscanDirectThrottle                      // pgscan_direct_throttle (events, 3.6+)
	VMCompactStall                              // compact_stall
	VMCompactFail                               // compact_fail
	VMPgmajfault                                // pgmajfault
	VMWorkingsetRefault                         // workingset_refault (3.15–5.8)
	VMWorkingsetRefaultAnon                     // workingset_refault_anon (5.9+)
	VMWorkingsetRefaultFile                     // workingset_refault_file (5.9+)
	VMOOMKill                                   // oom_kill (4.13+)
	vmFieldCount
)

// VMStat is the subset of one /proc/vmstat snapshot the exporter uses. The
// zero value is empty; ParseVMStat fills it without allocating, so the 1 s
// sampler can reuse one VMStat per tick.
type VMStat struct {
	values  [vmFieldCount]uint64
	present uint64 // bit f set when field f was seen
}

// Get returns a field and whether this kernel reported it. Absent fields are
// never a fake 0.
func (v *VMStat) Get(f VMField) (uint64, bool) {
	return v.values[f], v.present&(1<<f) != 0
}

func (v *VMStat) getter(f VMField) func() (uint64, bool) {
	return func() (uint64, bool) { return v.Get(f) }
}

// Len is the number of fields present.
func (v *VMStat) Len() int { return bits.OnesCount64(v.present) }

func (v *VMStat) set(f VMField, x uint64) {
	v.values[f] = x
	v.present |= 1 << f
}

func (v *VMStat) add(f VMField, x uint64) {
	v.values[f] += x
	v.present |= 1 << f
}

// ParseVMStat parses /proc/vmstat ("name value" per line) into v, which it
// resets first. Unknown names are skipped silently (every kernel adds some);
// a line without exactly a name and an unsigned decimal value is counted in
// bad, and the first such line is described by firstErr. Lines of fields the
// exporter does not use are not validated beyond their shape. It does not
// allocate unless a line is malformed.
func ParseVMStat(data []byte, v *VMStat) (bad int, firstErr error) {
	*v = VMStat{}
	line := 0
	for len(data) > 0 {
		var l []byte
		l, data = scan.Line(data)
		line++
		if len(l) == 0 {
			continue
		}
		sp := bytes.IndexByte(l, ' ')
		if sp <= 0 {
			bad++
			if firstErr == nil {
				firstErr = &ParseError{File: "vmstat", Line: line, Text: truncate(l), Msg: "want \"name value\""}
			}
			continue
		}
		name, val := l[:sp], l[sp+1:]
		f, agg, ok := vmFieldOf(name)
		if !ok {
			continue
		}
		x, ok := scan.Uint(val)
		if !ok {
			bad++
			if firstErr == nil {
				firstErr = &ParseError{File: "vmstat", Line: line, Text: truncate(l), Msg: "value is not an unsigned integer"}
			}
			continue
		}
		if agg {
			v.add(f, x)
		} else {
			v.set(f, x)
		}
	}
	return bad, firstErr
}

// isZone reports whether s is the zone suffix of a per-zone counter
// (allocstall_normal, pgscan_direct_dma32 …) on any kernel.
func isZone(s []byte) bool {
	switch string(s) {
	case "dma", "dma32", "normal", "movable", "high", "device":
		return true
	}
	return false
}

// vmFieldOf maps a /proc/vmstat name to a field; agg reports a per-zone
// variant to be summed.
func vmFieldOf(name []byte) (f VMField, agg bool, ok bool) {
	switch string(name) {
	case "nr_dirty":
		return VMNrDirty, false, true
	case "nr_writeback":
		return VMNrWriteback, false, true
	case "nr_unstable":
		return VMNrUnstable, false, true
	case "nr_dirty_threshold":
		return VMNrDirtyThreshold, false, true
	case "nr_dirty_background_threshold":
		return VMNrDirtyBackgroundThreshold, false, true
	case "nr_dirtied":
		return VMNrDirtied, false, true
	case "nr_written":
		return VMNrWritten, false, true
	case "allocstall":
		return VMAllocstall, false, true
	case "pgscan_direct":
		return VMPgscanDirect, false, true
	case "pgsteal_direct":
		return VMPgstealDirect, false, true
	case "pgscan_kswapd":
		return VMPgscanKswapd, false, true
	case "pgsteal_kswapd":
		return VMPgstealKswapd, false, true
	case "pgscan_direct_throttle":
		return VMPgscanDirectThrottle, false, true
	case "compact_stall":
		return VMCompactStall, false, true
	case "compact_fail":
		return VMCompactFail, false, true
	case "pgmajfault":
		return VMPgmajfault, false, true
	case "workingset_refault":
		return VMWorkingsetRefault, false, true
	case "workingset_refault_anon":
		return VMWorkingsetRefaultAnon, false, true
	case "workingset_refault_file":
		return VMWorkingsetRefaultFile, false, true
	case "oom_kill":
		return VMOOMKill, false, true
	}
	for _, p := range vmZonePrefixes {
		if len(name) > len(p.prefix) && string(name[:len(p.prefix)]) == p.prefix && isZone(name[len(p.prefix):]) {
			return p.field, true, true
		}
	}
	return 0, false, false
}

var vmZonePrefixes = [...]struct {
	prefix string
	field  VMField
}{
	{"allocstall_", VMAllocstallZones},
	{"pgscan_direct_", VMPgscanDirectZones},
	{"pgsteal_direct_", VMPgstealDirectZones},
	{"pgscan_kswapd_", VMPgscanKswapdZones},
	{"pgsteal_kswapd_", VMPgstealKswapdZones},
}

// first returns the first present field of fs.
func (v *VMStat) first(fs ...VMField) (uint64, bool) {
	for _, f := range fs {
		if x, ok := v.Get(f); ok {
			return x, true
		}
	}
	return 0, false
}

// AllocStalls is the number of direct-reclaim allocation stalls: allocstall
// before 4.8, the sum of allocstall_<zone> after.
func (v *VMStat) AllocStalls() (uint64, bool) { return v.first(VMAllocstall, VMAllocstallZones) }

// DirectScanned is pages scanned by direct reclaim: pgscan_direct (4.8+) or
// the sum of pgscan_direct_<zone> (pgscan_direct_throttle is an event count
// and is not included).
func (v *VMStat) DirectScanned() (uint64, bool) { return v.first(VMPgscanDirect, VMPgscanDirectZones) }

// DirectReclaimed is pages reclaimed by direct reclaim: pgsteal_direct or
// the sum of pgsteal_direct_<zone>.
func (v *VMStat) DirectReclaimed() (uint64, bool) {
	return v.first(VMPgstealDirect, VMPgstealDirectZones)
}

// KswapdScanned is pages scanned by kswapd: pgscan_kswapd or the per-zone sum.
func (v *VMStat) KswapdScanned() (uint64, bool) { return v.first(VMPgscanKswapd, VMPgscanKswapdZones) }

// KswapdReclaimed is pages reclaimed by kswapd: pgsteal_kswapd or the per-zone sum.
func (v *VMStat) KswapdReclaimed() (uint64, bool) {
	return v.first(VMPgstealKswapd, VMPgstealKswapdZones)
}

// Refaults is workingset_refault (3.15–5.8) or workingset_refault_anon +
// workingset_refault_file (5.9+).
func (v *VMStat) Refaults() (uint64, bool) {
	if x, ok := v.Get(VMWorkingsetRefault); ok {
		return x, true
	}
	a, okA := v.Get(VMWorkingsetRefaultAnon)
	f, okF := v.Get(VMWorkingsetRefaultFile)
	return a + f, okA || okF
}

// ThrottleRatio is (nr_dirty + nr_unstable + nr_writeback) divided by the
// midpoint of nr_dirty_threshold and nr_dirty_background_threshold: the
// "freerun" ceiling below which balance_dirty_pages() lets writers run
// free. At 1 the kernel starts throttling writers; at (threshold/midpoint)
// they are hard-limited. ok is false when the kernel lacks the fields or the
// thresholds are zero.
func (v *VMStat) ThrottleRatio() (float64, bool) {
	dirty, ok1 := v.Get(VMNrDirty)
	wb, ok2 := v.Get(VMNrWriteback)
	th, ok3 := v.Get(VMNrDirtyThreshold)
	bg, ok4 := v.Get(VMNrDirtyBackgroundThreshold)
	if !ok1 || !ok2 || !ok3 || !ok4 || th+bg == 0 {
		return 0, false
	}
	unstable, _ := v.Get(VMNrUnstable)
	return float64(dirty+unstable+wb) / (float64(th+bg) / 2), true
}
