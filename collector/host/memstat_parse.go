package host

// MemStatField names one memory.stat field of a memory cgroup that the
// cgroup_dirty collector and the sampler read. cgroup v2 prints each
// field once, hierarchically (the cgroup and its descendants); cgroup v1
// prints the cgroup's own value and a total_ one over its subtree, and the
// exporter reads the total_ ones. All values are bytes in both versions.
type MemStatField uint8

// The memory.stat fields the exporter uses. Which kernel prints which
// (read in mm/memcontrol.c of each version):
//   - v2 file_dirty, file_writeback, active_file, inactive_file: in
//     memory_stat_show() since the 4.x cgroup2 memory.stat (MEM_CGROUP_STAT_DIRTY
//     and _WRITEBACK, then node_stat NR_FILE_DIRTY and NR_WRITEBACK, 5.4's
//     acc.stat[], 6.x's memory_stats[] table); every v2 layout of the
//     fixtures has them.
//   - v1 total_dirty, total_writeback: memcg1_stat_format() (and its
//     predecessors) since 4.2, when cgroup writeback added per-memcg dirty
//     and writeback accounting; a 3.x/4.1 v1 memory.stat has neither.
//   - v1 total_active_file, total_inactive_file: every v1 kernel.
const (
	MemFileDirty         MemStatField = iota // v2 file_dirty
	MemFileWriteback                         // v2 file_writeback
	MemActiveFile                            // v2 active_file
	MemInactiveFile                          // v2 inactive_file
	MemTotalDirty                            // v1 total_dirty
	MemTotalWriteback                        // v1 total_writeback
	MemTotalActiveFile                       // v1 total_active_file
	MemTotalInactiveFile                     // v1 total_inactive_file
	memStatFieldCount
)

// MemStat is the subset of one memory.stat the exporter uses. The zero
// value is empty; ParseMemStat fills it without allocating, so the sampler
// reuses one per watched cgroup and tick.
type MemStat struct {
	values  [memStatFieldCount]uint64
	present uint16 // bit f set when field f was seen
}

// Get returns a field (bytes) and whether this memory.stat had it; an
// absent field is never a fake 0.
func (m *MemStat) Get(f MemStatField) (uint64, bool) {
	return m.values[f], m.present&(1<<f) != 0
}

// Dirty returns the cgroup's dirty and writeback bytes (hierarchical):
// v2's file_dirty and file_writeback when present, else v1's total_dirty
// and total_writeback. ok is false when the layout has neither pair (a v1
// kernel before 4.2, or not a memory.stat).
func (m *MemStat) Dirty() (dirty, writeback uint64, ok bool) {
	if d, ok1 := m.Get(MemFileDirty); ok1 {
		w, ok2 := m.Get(MemFileWriteback)
		return d, w, ok2
	}
	d, ok1 := m.Get(MemTotalDirty)
	w, ok2 := m.Get(MemTotalWriteback)
	return d, w, ok1 && ok2
}

// FileBytes returns the cgroup's file LRU pages in bytes (v1's
// hierarchical total_active_file + total_inactive_file when present, else
// v2's active_file + inactive_file, which v2 prints hierarchically; v1's
// own active_file is the cgroup alone): what mem_cgroup_wb_stats() calls
// filepages.
func (m *MemStat) FileBytes() (uint64, bool) {
	a, ok1 := m.Get(MemTotalActiveFile)
	i, ok2 := m.Get(MemTotalInactiveFile)
	if ok1 && ok2 {
		return a + i, true
	}
	a, ok1 = m.Get(MemActiveFile)
	i, ok2 = m.Get(MemInactiveFile)
	return a + i, ok1 && ok2
}

// ParseMemStat parses a memory.stat ("name value" per line) into m, which
// it resets first. Unknown names are skipped (every kernel adds some); a
// known field whose value is not an unsigned decimal, or a line without a
// name and a value, is counted in bad and the first such line described
// by firstErr. It does not allocate unless a line is malformed.
func ParseMemStat(data []byte, m *MemStat) (bad int, firstErr error) {
	*m = MemStat{}
	return parseNameValues(data, "memory.stat", memStatFieldByName, func(f MemStatField, x uint64) {
		m.values[f] = x
		m.present |= 1 << f
	})
}

var memStatFieldByName = map[string]MemStatField{
	"file_dirty":          MemFileDirty,
	"file_writeback":      MemFileWriteback,
	"active_file":         MemActiveFile,
	"inactive_file":       MemInactiveFile,
	"total_dirty":         MemTotalDirty,
	"total_writeback":     MemTotalWriteback,
	"total_active_file":   MemTotalActiveFile,
	"total_inactive_file": MemTotalInactiveFile,
}
