package host

// VMField names one /proc/vmstat counter that stall_exporter reads. A
// counter that has another name in another kernel layout (per-zone before
// 4.8, node-wide after) has a field per layout; VMStat.First picks one.
type VMField uint8

// The /proc/vmstat fields the exporter uses. Per-zone variants of one
// counter (allocstall_normal, pgscan_direct_dma32 …) fold into the *Zones
// field by summing, and so do the anon and file refaults of 5.9+
// (vmSummed).
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
	VMWorkingsetRefaultSplit                    // workingset_refault_anon + workingset_refault_file (5.9+)
	VMOOMKill                                   // oom_kill (4.13+)
	VMNrFreePages                               // nr_free_pages (pages)
	VMNrActiveFile                              // nr_active_file (pages)
	VMNrInactiveFile                            // nr_inactive_file (pages)
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

// ParseVMStat parses /proc/vmstat ("name value" per line) into v, which it
// resets first. Unknown names are skipped silently (every kernel adds some);
// a line without exactly a name and an unsigned decimal value is counted in
// bad, and the first such line is described by firstErr. Lines of fields the
// exporter does not use are not validated beyond their shape. It does not
// allocate unless a line is malformed.
func ParseVMStat(data []byte, v *VMStat) (bad int, firstErr error) {
	*v = VMStat{}
	return parseNameValues(data, "vmstat", vmFieldByName, func(f VMField, x uint64) {
		if vmSummed&(1<<f) != 0 {
			x += v.values[f]
		}
		v.values[f] = x
		v.present |= 1 << f
	})
}

// vmSummed are the fields that sum several lines of /proc/vmstat.
const vmSummed = 1<<VMAllocstallZones | 1<<VMPgscanDirectZones | 1<<VMPgstealDirectZones |
	1<<VMPgscanKswapdZones | 1<<VMPgstealKswapdZones | 1<<VMWorkingsetRefaultSplit

// vmFieldByName maps a /proc/vmstat name to its field. A per-zone counter
// is its prefix and one of the zones of any kernel (allocstall_normal,
// pgscan_direct_dma32 …).
var vmFieldByName = func() map[string]VMField {
	m := map[string]VMField{
		"nr_dirty":                      VMNrDirty,
		"nr_writeback":                  VMNrWriteback,
		"nr_unstable":                   VMNrUnstable,
		"nr_dirty_threshold":            VMNrDirtyThreshold,
		"nr_dirty_background_threshold": VMNrDirtyBackgroundThreshold,
		"nr_dirtied":                    VMNrDirtied,
		"nr_written":                    VMNrWritten,
		"allocstall":                    VMAllocstall,
		"pgscan_direct":                 VMPgscanDirect,
		"pgsteal_direct":                VMPgstealDirect,
		"pgscan_kswapd":                 VMPgscanKswapd,
		"pgsteal_kswapd":                VMPgstealKswapd,
		"pgscan_direct_throttle":        VMPgscanDirectThrottle,
		"compact_stall":                 VMCompactStall,
		"compact_fail":                  VMCompactFail,
		"pgmajfault":                    VMPgmajfault,
		"workingset_refault":            VMWorkingsetRefault,
		"workingset_refault_anon":       VMWorkingsetRefaultSplit,
		"workingset_refault_file":       VMWorkingsetRefaultSplit,
		"oom_kill":                      VMOOMKill,
		"nr_free_pages":                 VMNrFreePages,
		"nr_active_file":                VMNrActiveFile,
		"nr_inactive_file":              VMNrInactiveFile,
	}
	for prefix, f := range map[string]VMField{
		"allocstall_":     VMAllocstallZones,
		"pgscan_direct_":  VMPgscanDirectZones,
		"pgsteal_direct_": VMPgstealDirectZones,
		"pgscan_kswapd_":  VMPgscanKswapdZones,
		"pgsteal_kswapd_": VMPgstealKswapdZones,
	} {
		for _, zone := range [...]string{"dma", "dma32", "normal", "movable", "high", "device"} {
			m[prefix+zone] = f
		}
	}
	return m
}()

// First returns the first field of fs this kernel reported: one counter
// in two layouts (allocstall before 4.8, the sum of allocstall_<zone>
// after).
func (v *VMStat) First(fs ...VMField) (uint64, bool) {
	for _, f := range fs {
		if x, ok := v.Get(f); ok {
			return x, true
		}
	}
	return 0, false
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
