package dns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Per-process attribution in the kernel. Packet capture cannot see which
// process sent a query, and user space cannot catch it in time: glibc opens
// a socket per lookup, connects it to the resolver, and closes it one round
// trip later. So four tiny programs of type cgroup sock_addr, attached to
// the cgroup v2 root, run inside connect(2) and sendmsg(2) of every task on
// the host: on a connect (TCP or UDP) or an unconnected UDP sendmsg to port
// 53 they add one to the calling process's count in a hash map keyed by
// tgid, recording the calling thread's comm when they create the entry.
// They always allow the call. They are assembled here with cilium/ebpf's
// asm package: no C compiler, no object files.
//
// Kernel requirements: cgroup sock_addr connect hooks (4.17), sendmsg
// hooks (4.18), bpf_link for cgroups (5.7; older kernels use the legacy
// attach with the same effect), CAP_BPF + CAP_NET_ADMIN (5.8+) or
// CAP_SYS_ADMIN. The links are not pinned: when the exporter exits, the
// kernel detaches the programs.

// processMapEntries bounds the kernel map: processes that looked something
// up since the last drain (every scrape and every 5 s). When it is full, a
// new process's lookups are counted in the overflow slot and reported as
// comm="other". 8192 entries cost about 0.5 MiB of kernel memory.
const processMapEntries = 8192

// processValue is the map's value: the lookup count, then the comm of the
// thread that made the first one (TASK_COMM_LEN, NUL-padded).
type processValue struct {
	Count uint64
	Comm  [16]byte
}

const processValueSize = 24

// Offsets in struct bpf_sock_addr (include/uapi/linux/bpf.h), stable ABI.
const sockAddrUserPort = 24 // __u32 user_port, network byte order in the low 16 bits

const bpfNoExist = 1 // BPF_NOEXIST

var sockAddrHooks = []ebpf.AttachType{
	ebpf.AttachCGroupInet4Connect,
	ebpf.AttachCGroupInet6Connect,
	ebpf.AttachCGroupUDP4Sendmsg,
	ebpf.AttachCGroupUDP6Sendmsg,
}

// lookupProgram returns the sock_addr program body.
func lookupProgram(counts, overflow *ebpf.Map) asm.Instructions {
	// user_port as the kernel loads it: the port's two network-order bytes
	// at the start of a little- or big-endian word.
	port53 := int32(binary.NativeEndian.Uint32([]byte{0, 53, 0, 0}))
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, sockAddrUserPort, asm.Word),
		asm.JNE.Imm(asm.R2, port53, "allow"),

		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word), // key: tgid at fp-4
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "create"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Ja.Label("allow"),

		// A new process: value {1, comm} at fp-32, inserted only if absent.
		asm.Mov.Imm(asm.R1, 1).WithSymbol("create"),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -24),
		asm.Mov.Imm(asm.R2, 16),
		asm.FnGetCurrentComm.Call(),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -32),
		asm.Mov.Imm(asm.R4, bpfNoExist),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "allow"),

		// Not inserted: another thread of the process inserted it first
		// (count there), or the map is full (count in the overflow slot).
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "add"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, overflow.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "allow"),
		asm.Mov.Imm(asm.R1, 1).WithSymbol("add"),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),

		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"), // always allow the call
		asm.Return(),
	}
}

// ebpfAttribution owns the maps, programs and links.
type ebpfAttribution struct {
	counts, overflow *ebpf.Map
	progs            []*ebpf.Program
	links            []link.Link
	procPath         func(elem ...string) string

	last         map[uint32]uint64 // tgid → count already reported
	lastOverflow uint64
}

// newEBPFAttribution loads the programs and attaches them to the cgroup v2
// directory cgroupRoot. Any failure undoes what was done and is returned
// with what the kernel or the loader said.
func newEBPFAttribution(cgroupRoot string, procPath func(elem ...string) string) (_ *ebpfAttribution, err error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raising RLIMIT_MEMLOCK for BPF maps (kernels before 5.11): %w", err)
	}
	a := &ebpfAttribution{procPath: procPath, last: map[uint32]uint64{}}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.counts, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "stall_dns_procs", Type: ebpf.Hash, KeySize: 4, ValueSize: processValueSize, MaxEntries: processMapEntries,
	}); err != nil {
		return nil, fmt.Errorf("creating the BPF map: %w", err)
	}
	if a.overflow, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "stall_dns_ovf", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
	}); err != nil {
		return nil, fmt.Errorf("creating the BPF map: %w", err)
	}
	for _, hook := range sockAddrHooks {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "stall_dns_" + hookName(hook),
			Type:         ebpf.CGroupSockAddr,
			AttachType:   hook,
			Instructions: lookupProgram(a.counts, a.overflow),
			License:      "Dual MIT/GPL",
		})
		if err != nil {
			return nil, fmt.Errorf("loading the %s program: %w", hookName(hook), err)
		}
		a.progs = append(a.progs, prog)
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupRoot, Attach: hook, Program: prog})
		if err != nil {
			return nil, fmt.Errorf("attaching the %s program to %s: %w", hookName(hook), cgroupRoot, err)
		}
		a.links = append(a.links, l)
	}
	return a, nil
}

func hookName(t ebpf.AttachType) string {
	switch t {
	case ebpf.AttachCGroupInet4Connect:
		return "connect4"
	case ebpf.AttachCGroupInet6Connect:
		return "connect6"
	case ebpf.AttachCGroupUDP4Sendmsg:
		return "sendmsg4"
	case ebpf.AttachCGroupUDP6Sendmsg:
		return "sendmsg6"
	}
	return t.String()
}

func (a *ebpfAttribution) mode() string { return "ebpf" }

// drain adds the lookups counted since the last drain to pt, named by the
// process's name (/proc/<tgid>/comm: a JVM is "java" whichever thread
// looked up) or, once the process is gone, by the comm the kernel recorded
// (the thread's, which for a short-lived command is its name). Entries of
// processes that are gone are deleted, so the map holds only live ones.
func (a *ebpfAttribution) drain(pt *processTable) error {
	var (
		tgid  uint32
		v     processValue
		dead  []uint32
		alive = map[uint32]bool{}
	)
	it := a.counts.Iterate()
	for it.Next(&tgid, &v) {
		name, live := a.processName(tgid)
		if !live {
			name = commString(v.Comm[:])
			dead = append(dead, tgid)
		}
		alive[tgid] = live
		if d := v.Count - a.last[tgid]; d > 0 {
			pt.add(name, d)
		}
		a.last[tgid] = v.Count
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading the BPF map: %w", err)
	}
	for _, t := range dead {
		// A lookup between the read above and this delete is lost; the
		// process has exited, so only a reused pid could make one.
		if err := a.counts.Delete(t); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("deleting from the BPF map: %w", err)
		}
		delete(a.last, t)
	}
	for t := range a.last {
		if _, ok := alive[t]; !ok {
			delete(a.last, t) // deleted by someone else, or pid reused after a delete
		}
	}
	var ovf uint64
	if err := a.overflow.Lookup(uint32(0), &ovf); err == nil && ovf > a.lastOverflow {
		pt.addOther(ovf - a.lastOverflow)
		a.lastOverflow = ovf
	}
	return nil
}

// processName reads /proc/<tgid>/comm; live is false when the process is gone.
func (a *ebpfAttribution) processName(tgid uint32) (name string, live bool) {
	b, err := os.ReadFile(a.procPath(strconv.FormatUint(uint64(tgid), 10), "comm"))
	if err != nil {
		return "", false
	}
	return strings.TrimSuffix(string(b), "\n"), true
}

func commString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Close detaches the programs and frees the maps.
func (a *ebpfAttribution) Close() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	for _, p := range a.progs {
		errs = append(errs, p.Close())
	}
	for _, m := range []*ebpf.Map{a.counts, a.overflow} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	a.links, a.progs = nil, nil
	return errors.Join(errs...)
}
