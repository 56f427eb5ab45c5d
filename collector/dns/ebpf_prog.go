package dns

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The eBPF programs of the attribution, assembled with cilium/ebpf's asm
// package (no C compiler, no object files), and the layout of the map they
// share with user space. Loading and attaching them is ebpf.go. Both
// programs always allow the call or packet.

// processMapEntries bounds the kernel map: processes that looked something
// up since the last drain (every scrape and every 5 s). When it is full, a
// new process's lookups are counted in the overflow slot and reported as
// comm="other". 8192 entries cost about 1.2 MiB of kernel memory.
const processMapEntries = 8192

// socketMapEntries bounds the socket-cookie → tgid map that joins a query
// packet to the process that opened its socket; least recently used
// sockets are forgotten first.
const socketMapEntries = 16384

// processValue is the map's value: the lookup count, the comm of the thread
// that made the first one (TASK_COMM_LEN, NUL-padded), the UDP queries the
// process sent, by qtype label index (egress program), and the cgroup v2
// id of the thread that made the first lookup (the inode number of its
// cgroup directory; 0 where the kernel does not give it).
type processValue struct {
	Count   uint64
	Comm    [16]byte
	Queries [numQTypes]uint64
	Cgroup  uint64
}

const (
	processValueSize = 8 + 16 + 8*numQTypes + 8
	valueComm        = 8
	valueQueries     = 24
	valueCgroup      = valueQueries + 8*numQTypes
)

// Offsets in struct bpf_sock_addr and struct __sk_buff
// (include/uapi/linux/bpf.h), stable ABI.
const (
	sockAddrUserPort = 24 // __u32 user_port: the port's network-order bytes first
	skbData          = 76 // __u32 data (a packet pointer)
	skbDataEnd       = 80 // __u32 data_end
)

const bpfNoExist = 1 // BPF_NOEXIST

// Stack layout of the sock_addr program (offsets from the frame pointer).
const (
	stTgid   = -4   // u32 map key
	stZero   = -8   // u32 0, the overflow map's key
	stCookie = -16  // u64 socket cookie
	stValue  = -136 // processValue, 112 bytes
)

// be16 is the value a half-word load gives for a 16-bit network-order field.
func be16(v uint16) int32 {
	return int32(binary.NativeEndian.Uint16([]byte{byte(v >> 8), byte(v)}))
}

// program is an eBPF program being assembled, with the sequences both
// programs repeat.
type program struct{ asm.Instructions }

func (p *program) add(ins ...asm.Instruction) { p.Instructions = append(p.Instructions, ins...) }

// lookup calls bpf_map_lookup_elem(m, fp+key): R0 is the value's address,
// or 0 when there is no entry.
func (p *program) lookup(m *ebpf.Map, key int16) {
	p.add(
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
	)
}

// update calls bpf_map_update_elem(m, fp+key, fp+value, flags): R0 is 0
// when the entry was written.
func (p *program) update(m *ebpf.Map, key, value int16, flags int32) {
	p.add(
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(value)),
		asm.Mov.Imm(asm.R4, flags),
		asm.FnMapUpdateElem.Call(),
	)
}

// count adds one, atomically, to the first u64 of m's entry at fp+key and
// jumps to done; without an entry it jumps to missing.
func (p *program) count(m *ebpf.Map, key int16, missing, done string) {
	p.lookup(m, key)
	p.add(
		asm.JEq.Imm(asm.R0, 0, missing),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Ja.Label(done),
	)
}

// lookupProgram returns the program of the four cgroup sock_addr hooks,
// run inside connect(2) and sendmsg(2): on a connect (TCP or UDP) or an
// unconnected UDP sendmsg to port 53 it adds one to the calling process's
// count, keyed by tgid, recording the calling thread's comm (and with
// cgroupID its cgroup v2 id, bpf_get_current_cgroup_id, 5.7+) when it
// creates the entry. With socks non-nil it also records the socket's
// cookie → tgid, for the egress program.
func lookupProgram(counts, overflow, socks *ebpf.Map, cgroupID bool) asm.Instructions {
	// user_port as the kernel loads it: the port's two network-order bytes
	// at the start of a little- or big-endian word.
	port53 := int32(binary.NativeEndian.Uint32([]byte{0, 53, 0, 0}))
	var p program
	p.add(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, sockAddrUserPort, asm.Word),
		asm.JNE.Imm(asm.R2, port53, "allow"),
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, stTgid, asm.R0, asm.Word),
	)
	p.count(counts, stTgid, "create", "record")
	// A new process: value {1, comm, zeros, cgroup}, inserted only if
	// absent.
	p.add(asm.Mov.Imm(asm.R1, 0).WithSymbol("create"))
	for off := int16(valueQueries); off < processValueSize; off += 8 {
		p.add(asm.StoreMem(asm.RFP, stValue+off, asm.R1, asm.DWord))
	}
	p.add(
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stValue, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stValue+valueComm),
		asm.Mov.Imm(asm.R2, 16),
		asm.FnGetCurrentComm.Call(),
	)
	if cgroupID {
		p.add(
			asm.FnGetCurrentCgroupId.Call(),
			asm.StoreMem(asm.RFP, stValue+valueCgroup, asm.R0, asm.DWord),
		)
	}
	p.update(counts, stTgid, stValue, bpfNoExist)
	p.add(asm.JEq.Imm(asm.R0, 0, "record"))
	// Not inserted: another thread of the process inserted it first
	// (count there), or the map is full (count in the overflow slot).
	p.count(counts, stTgid, "overflow", "record")
	p.add(
		asm.Mov.Imm(asm.R1, 0).WithSymbol("overflow"),
		asm.StoreMem(asm.RFP, stZero, asm.R1, asm.Word),
	)
	p.count(overflow, stZero, "allow", "allow")
	// Remember which process owns the socket, for the egress program.
	p.add(asm.Mov.Reg(asm.R1, asm.R6).WithSymbol("record"))
	if socks != nil {
		p.add(
			asm.FnGetSocketCookie.Call(),
			asm.StoreMem(asm.RFP, stCookie, asm.R0, asm.DWord),
		)
		p.update(socks, stCookie, stTgid, 0) // BPF_ANY
	}
	p.add(asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"), asm.Return()) // always allow the call
	return p.Instructions
}

// maxLabels is how many labels of a query's name the egress program skips
// to reach its type: an ip6.arpa name has 34, an in-addr.arpa name 6.
// Names with more are not counted by type.
const maxLabels = 40

// minQueryPacket is the shortest UDP DNS query with its IP header: IPv4
// (20) + UDP (8) + DNS header (12) + the root name (1) + type and class
// (4). A question for "a." is 47 bytes: a bound of 48 would miss both.
const minQueryPacket = 20 + 8 + 12 + 1 + 4

// egressProgram returns the cgroup_skb egress program: for a UDP packet to
// port 53 carrying a DNS query, it reads the question type and adds one to
// queries[qtype] of the process that owns the socket (socks, recorded at
// connect/sendmsg). It runs on every packet the host's processes send, so
// it leaves at the first check a non-DNS packet fails, and it always lets
// the packet through.
func egressProgram(counts, socks *ebpf.Map) asm.Instructions {
	const (
		r6ctx = asm.R6
		r7    = asm.R7 // packet data, later the qtype label index
		r8    = asm.R8 // packet end
		r9off = asm.R9 // offset of the next byte of the DNS message
		stBuf = -8
		stKey = -16
	)
	var p program
	// loadBytes reads n bytes at r9off to fp+stBuf, or lets the packet
	// through when it is shorter.
	loadBytes := func(n int32) {
		p.add(
			asm.Mov.Reg(asm.R1, r6ctx),
			asm.Mov.Reg(asm.R2, r9off),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, stBuf),
			asm.Mov.Imm(asm.R4, n),
			asm.FnSkbLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, "allow"),
		)
	}
	p.add(
		asm.Mov.Reg(r6ctx, asm.R1),
		asm.LoadMem(r7, r6ctx, skbData, asm.Word),
		asm.LoadMem(r8, r6ctx, skbDataEnd, asm.Word),
		// Shorter than the shortest query there is: not DNS. The bound
		// also covers the direct loads below (up to byte 44 of an IPv6
		// packet); later bytes are read with bounds-checked helpers.
		asm.Mov.Reg(asm.R1, r7),
		asm.Add.Imm(asm.R1, minQueryPacket),
		asm.JGT.Reg(asm.R1, r8, "allow"),
		asm.LoadMem(asm.R2, r7, 0, asm.Byte),
		asm.And.Imm(asm.R2, 0xf0),
		asm.JEq.Imm(asm.R2, 0x40, "v4"),
		asm.JNE.Imm(asm.R2, 0x60, "allow"),
		// IPv6: UDP right after the fixed header.
		asm.LoadMem(asm.R2, r7, 6, asm.Byte),
		asm.JNE.Imm(asm.R2, protoUDP, "allow"),
		asm.LoadMem(asm.R2, r7, 42, asm.Half),
		asm.JNE.Imm(asm.R2, be16(53), "allow"),
		asm.Mov.Imm(r9off, 40+8),
		asm.Ja.Label("dns"),
		// IPv4: not a later fragment, UDP, port 53 after IHL*4 bytes.
		asm.LoadMem(asm.R2, r7, 9, asm.Byte).WithSymbol("v4"),
		asm.JNE.Imm(asm.R2, protoUDP, "allow"),
		asm.LoadMem(asm.R2, r7, 6, asm.Half),
		asm.And.Imm(asm.R2, be16(0x1fff)),
		asm.JNE.Imm(asm.R2, 0, "allow"),
		asm.LoadMem(r9off, r7, 0, asm.Byte),
		asm.And.Imm(r9off, 0x0f),
		asm.LSh.Imm(r9off, 2),
		asm.Mov.Reg(asm.R1, r7),
		asm.Add.Reg(asm.R1, r9off),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Add.Imm(asm.R2, 4),
		asm.JGT.Reg(asm.R2, r8, "allow"),
		asm.LoadMem(asm.R2, asm.R1, 2, asm.Half),
		asm.JNE.Imm(asm.R2, be16(53), "allow"),
		asm.Add.Imm(r9off, 8),

		// The DNS header: a query (QR 0)?
		asm.Add.Imm(r9off, 2).WithSymbol("dns"),
	)
	loadBytes(1)
	p.add(
		asm.LoadMem(asm.R2, asm.RFP, stBuf, asm.Byte),
		asm.And.Imm(asm.R2, 0x80),
		asm.JNE.Imm(asm.R2, 0, "allow"),
		asm.Add.Imm(r9off, 10),
	)
	// Skip the name's labels (at most maxLabels; a compression pointer in
	// a query's first name is not expected and ends the walk).
	for range maxLabels {
		loadBytes(1)
		p.add(
			asm.LoadMem(asm.R2, asm.RFP, stBuf, asm.Byte),
			asm.JEq.Imm(asm.R2, 0, "qtype"),
			asm.JGT.Imm(asm.R2, 63, "allow"),
			asm.Add.Reg(r9off, asm.R2),
			asm.Add.Imm(r9off, 1),
		)
	}
	p.add(asm.Ja.Label("allow"), asm.Add.Imm(r9off, 1).WithSymbol("qtype"))
	loadBytes(2)
	p.add(
		asm.LoadMem(asm.R2, asm.RFP, stBuf, asm.Half),
		asm.Mov.Imm(r7, qtOther),
	)
	for _, code := range qtypeCodes {
		p.add(asm.JEq.Imm(asm.R2, be16(code), fmt.Sprintf("qt%d", code)))
	}
	p.add(asm.Ja.Label("owner"))
	for idx, code := range qtypeCodes {
		p.add(
			asm.Mov.Imm(r7, int32(idx)).WithSymbol(fmt.Sprintf("qt%d", code)),
			asm.Ja.Label("owner"),
		)
	}
	// The sending process, by the socket's cookie; then
	// counts[tgid].Queries[r7] += 1.
	p.add(
		asm.Mov.Reg(asm.R1, r6ctx).WithSymbol("owner"),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, stKey, asm.R0, asm.DWord),
	)
	p.lookup(socks, stKey)
	p.add(
		asm.JEq.Imm(asm.R0, 0, "allow"),
		asm.LoadMem(asm.R2, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, stKey, asm.R2, asm.Word),
	)
	p.lookup(counts, stKey)
	p.add(
		asm.JEq.Imm(asm.R0, 0, "allow"),
		asm.LSh.Imm(r7, 3),
		asm.Add.Reg(asm.R0, r7),
		asm.Add.Imm(asm.R0, valueQueries),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"), // always let the packet through
		asm.Return(),
	)
	return p.Instructions
}
