package writeback

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The eBPF program on writeback:balance_dirty_pages, assembled with
// cilium/ebpf's asm package (no C compiler, no object files), and the
// layout of the maps it shares with user space. Loading, attaching and
// draining it is pause.go.

// pauseMapEntries bounds the kernel map: (process, cgroup) pairs paused
// since their entry was last deleted (a drain deletes those of exited
// processes). When it is full, a new pair's pauses are counted in the
// overflow slot and reported as comm="other". A hash map's entries are
// allocated when it is created: 4096 of 16 + 32 bytes and the kernel's
// per-element header, 0.44 MiB of kernel memory (its memlock on 6.18).
const pauseMapEntries = 4096

// pauseKey is the map's key: the process (tgid) and its cgroup v2 id (the
// inode number of its cgroup directory, bpf_get_current_cgroup_id(); 0
// where the kernel does not give it) at the pause. A process moved to
// another cgroup gets a second entry.
type pauseKey struct {
	Tgid   uint32
	_      uint32
	Cgroup uint64
}

// pauseValue is the map's value: the planned sleeps' total in ms (the
// tracepoint's pause), their number, and the comm of the thread that
// created the entry (TASK_COMM_LEN, NUL-padded), for a process gone
// before the drain.
type pauseValue struct {
	PauseMS uint64
	Pauses  uint64
	Comm    [16]byte
}

// overflowValue is the overflow slot: the pauses of pairs the full map
// had no room for.
type overflowValue struct {
	PauseMS uint64
	Pauses  uint64
}

const (
	pauseKeySize      = 16
	pauseValueSize    = 32
	overflowValueSize = 16
	valuePauses       = 8
	valueComm         = 16

	bpfNoExist = 1 // BPF_NOEXIST
)

// Stack layout of the program (offsets from the frame pointer).
const (
	stKey   = -16 // pauseKey
	stValue = -48 // pauseValue
	stZero  = -52 // u32 0, the overflow map's key
)

// pauseProgram returns the program: for a call of balance_dirty_pages()
// that sleeps — the tracepoint's pause > 0; the kernel also emits it with
// pause <= 0 for a call that does not sleep (pause < min_pause: a
// think-time credit, clamped to min(pause, 0)) — it adds the pause (ms)
// and one sleep to the calling process's entry for its cgroup, creating
// the entry with the thread's comm; with a full map, to the overflow
// slot. It reads only the record's pause field, at l.pauseOff. With
// cgroupID it records the caller's cgroup v2 id (bpf_get_current_cgroup_id,
// tracing programs since 4.18); without, 0. It returns 1: a tracepoint
// program's 0 would also hide the hit from every perf user of the event
// (perf_trace_run_bpf_submit()), such as an on-call's `perf trace -e
// writeback:balance_dirty_pages`; ftrace sees it either way.
func pauseProgram(l pauseLayout, counts, overflow *ebpf.Map, cgroupID bool) asm.Instructions {
	var p asm.Instructions
	add := func(ins ...asm.Instruction) { p = append(p, ins...) }
	lookup := func(m *ebpf.Map, key int16) {
		add(
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, int32(key)),
			asm.FnMapLookupElem.Call(),
		)
	}
	// count adds the pause (R7) and one sleep to the value at R0.
	count := func() {
		add(
			asm.StoreXAdd(asm.R0, asm.R7, asm.DWord),
			asm.Mov.Imm(asm.R1, 1),
			asm.Mov.Reg(asm.R2, asm.R0),
			asm.Add.Imm(asm.R2, valuePauses),
			asm.StoreXAdd(asm.R2, asm.R1, asm.DWord),
			asm.Ja.Label("exit"),
		)
	}
	add(asm.Mov.Reg(asm.R6, asm.R1))
	if l.pauseSize == 8 {
		add(asm.LoadMem(asm.R7, asm.R6, l.pauseOff, asm.DWord))
	} else { // a 32-bit kernel's long: sign-extend
		add(
			asm.LoadMem(asm.R7, asm.R6, l.pauseOff, asm.Word),
			asm.LSh.Imm(asm.R7, 32),
			asm.ArSh.Imm(asm.R7, 32),
		)
	}
	add(
		asm.JSLE.Imm(asm.R7, 0, "exit"), // no sleep
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, stKey, asm.R0, asm.Word),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stKey+4, asm.R1, asm.Word),
	)
	if cgroupID {
		add(asm.FnGetCurrentCgroupId.Call())
	} else {
		add(asm.Mov.Imm(asm.R0, 0))
	}
	add(asm.StoreMem(asm.RFP, stKey+8, asm.R0, asm.DWord))
	lookup(counts, stKey)
	add(asm.JEq.Imm(asm.R0, 0, "create"))
	count()
	// A new entry: {pause, 1, comm}, inserted only if absent.
	add(
		asm.StoreMem(asm.RFP, stValue, asm.R7, asm.DWord).WithSymbol("create"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stValue+valuePauses, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stValue+valueComm),
		asm.Mov.Imm(asm.R2, 16),
		asm.FnGetCurrentComm.Call(),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stValue),
		asm.Mov.Imm(asm.R4, bpfNoExist),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
	)
	// Not inserted: another thread of the process inserted it first
	// (count there), or the map is full (count in the overflow slot).
	lookup(counts, stKey)
	add(asm.JEq.Imm(asm.R0, 0, "overflow"))
	count()
	add(
		asm.Mov.Imm(asm.R1, 0).WithSymbol("overflow"),
		asm.StoreMem(asm.RFP, stZero, asm.R1, asm.Word),
	)
	lookup(overflow, stZero)
	add(asm.JEq.Imm(asm.R0, 0, "exit"))
	count()
	add(
		asm.Mov.Imm(asm.R0, 1).WithSymbol("exit"),
		asm.Return(),
	)
	return p
}
