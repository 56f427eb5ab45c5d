package dns

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/jvm"
)

// Loading, attaching and reading the attribution's eBPF programs
// (ebpf_prog.go), attached to the cgroup v2 root so that every task on the
// host runs them (docs/dns.md, "Which process asked"). Kernel requirements:
// cgroup sock_addr connect hooks (4.17), sendmsg hooks (4.18), bpf_link for
// cgroups (5.7; before, link.AttachCgroup falls back to the legacy attach
// with the same effect), CAP_BPF + CAP_NET_ADMIN (5.8+) or CAP_SYS_ADMIN.
// The links are not pinned: when the exporter exits, the kernel detaches
// the programs.

// hook is where a program is attached, and the name it is loaded under
// (stall_dns_<name>).
type hook struct {
	attach ebpf.AttachType
	name   string
}

// sockAddrHooks are the hooks lookupProgram is attached to, one program each.
var sockAddrHooks = []hook{
	{ebpf.AttachCGroupInet4Connect, "connect4"},
	{ebpf.AttachCGroupInet6Connect, "connect6"},
	{ebpf.AttachCGroupUDP4Sendmsg, "sendmsg4"},
	{ebpf.AttachCGroupUDP6Sendmsg, "sendmsg6"},
}

var egressHook = hook{ebpf.AttachCGroupInetEgress, "egress"}

// programSet is one way of building the programs: with the egress program
// (query types per process; it needs bpf_get_socket_cookie in sock_addr
// programs) and with the caller's cgroup id (5.7+). programSets are tried
// in order, the richest the kernel accepts wins.
type programSet struct{ byType, cgroupID bool }

var programSets = []programSet{{true, true}, {true, false}, {false, true}, {false, false}}

// ebpfAttribution owns the maps, programs and links.
type ebpfAttribution struct {
	counts, overflow, socks *ebpf.Map
	progs                   []*ebpf.Program // one per sockAddrHooks
	egress                  *ebpf.Program   // nil without the socket map
	links                   []link.Link
	procPath                func(elem ...string) string
	// typeErr says why the egress program could not be loaded or
	// attached: then only lookups per process are counted, not their types.
	typeErr error
	// cgroupErr says why the programs record no cgroup id (a kernel
	// before 5.7): cgroups are then named from /proc for live processes.
	cgroupErr error
	cgroups   *proclabel.CgroupNames
	// private holds the cgroup v2 hierarchy open where no mount shows it
	// (openCgroup2); nil when the programs attach to a mounted one.
	private *os.File

	seen         map[uint32]seenProcess // per tgid in the map
	lastOverflow uint64
}

// seenProcess is what a drain keeps of a process in the map: the counts
// already reported and, for a JVM, what it runs (jvmName, read once).
type seenProcess struct {
	reported  processValue
	main      string
	mainKnown bool
}

// newEBPFAttribution loads the richest program set the kernel accepts and
// attaches it to the cgroup v2 directory cgroupRoot, which private (if not
// nil, closed with the attribution) holds open. A failure of the
// sock_addr part undoes everything and is returned with what the kernel or
// the loader said; a failure of the egress part (query types per process)
// only leaves it out, in typeErr.
func newEBPFAttribution(cgroupRoot string, private *os.File, procPath func(elem ...string) string) (_ *ebpfAttribution, err error) {
	a := &ebpfAttribution{procPath: procPath, private: private, seen: map[uint32]seenProcess{}, cgroups: proclabel.NewCgroupNames(cgroupRoot, procPath)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raising RLIMIT_MEMLOCK for BPF maps (kernels before 5.11): %w", err)
	}
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
	var set programSet
	var richest error // why programSets[0], which has both, failed: what a poorer set lacks
	for i := range programSets {
		set = programSets[i]
		if err = a.load(set); err == nil {
			break
		}
		if i == 0 {
			richest = err
		}
	}
	if err != nil {
		return nil, err
	}
	if !set.byType {
		a.typeErr = richest
	}
	if !set.cgroupID {
		a.cgroupErr = richest
	}
	for i, h := range sockAddrHooks {
		if err := a.attach(cgroupRoot, h, a.progs[i]); err != nil {
			return nil, err
		}
	}
	if a.egress != nil {
		a.typeErr = a.attach(cgroupRoot, egressHook, a.egress)
	}
	return a, nil
}

// load builds one program set; on failure it closes what it made.
func (a *ebpfAttribution) load(set programSet) (err error) {
	defer func() {
		if err != nil {
			for _, p := range append(a.progs, a.egress) {
				p.Close()
			}
			a.socks.Close()
			a.progs, a.egress, a.socks = nil, nil, nil
		}
	}()
	if set.byType {
		if a.socks, err = ebpf.NewMap(&ebpf.MapSpec{
			Name: "stall_dns_socks", Type: ebpf.LRUHash, KeySize: 8, ValueSize: 4, MaxEntries: socketMapEntries,
		}); err != nil {
			return fmt.Errorf("creating the socket BPF map: %w", err)
		}
		if a.egress, err = ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "stall_dns_" + egressHook.name,
			Type:         ebpf.CGroupSKB,
			AttachType:   egressHook.attach,
			Instructions: egressProgram(a.counts, a.socks),
			License:      "Dual MIT/GPL",
		}); err != nil {
			return fmt.Errorf("loading the egress program: %w", err)
		}
	}
	for _, h := range sockAddrHooks {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "stall_dns_" + h.name,
			Type:         ebpf.CGroupSockAddr,
			AttachType:   h.attach,
			Instructions: lookupProgram(a.counts, a.overflow, a.socks, set.cgroupID),
			License:      "Dual MIT/GPL",
		})
		if err != nil {
			return fmt.Errorf("loading the %s program (cgroup ids %v, socket cookies %v): %w", h.name, set.cgroupID, set.byType, err)
		}
		a.progs = append(a.progs, prog)
	}
	return nil
}

func (a *ebpfAttribution) attach(cgroupRoot string, h hook, prog *ebpf.Program) error {
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupRoot, Attach: h.attach, Program: prog})
	if err != nil {
		return fmt.Errorf("attaching the %s program to %s: %w", h.name, cgroupRoot, err)
	}
	a.links = append(a.links, l)
	return nil
}

func (a *ebpfAttribution) mode() string { return "ebpf" }

// drain adds the lookups counted since the last drain to pt, named by the
// process's name (/proc/<tgid>/comm: a JVM is "java" whichever thread
// looked up, and is told apart by what it runs, jvmName) or, once the
// process is gone, by the comm the kernel recorded (the thread's, which for
// a short-lived command is its name), and by its cgroup (the id the kernel
// recorded, resolved by cgroupNames). Entries of processes that are gone
// are deleted, so the map holds only live ones.
func (a *ebpfAttribution) drain(pt *processTable) error {
	a.cgroups.StartDrain()
	var (
		tgid uint32
		v    processValue
		dead []uint32
	)
	seen := make(map[uint32]seenProcess, len(a.seen))
	it := a.counts.Iterate()
	for it.Next(&tgid, &v) {
		pid := strconv.FormatUint(uint64(tgid), 10)
		name, live := proclabel.Comm(a.procPath(pid, "comm"))
		s := a.seen[tgid]
		main := s.main
		switch {
		case !live:
			name = proclabel.CommBytes(v.Comm[:])
			dead = append(dead, tgid)
		case name != jvm.Comm:
			main = ""
		case !s.mainKnown:
			main = proclabel.Main(a.procPath(pid, "cmdline"))
			s.main, s.mainKnown = main, true
		}
		prev := s.reported
		var cgroup string
		if v.Count != prev.Count || v.Queries != prev.Queries {
			cgroup = a.cgroups.Name(v.Cgroup, tgid, live)
		}
		if d := v.Count - prev.Count; d > 0 {
			pt.add(processKey{name, main, cgroup}, d)
		}
		for q := range numQTypes {
			if d := v.Queries[q] - prev.Queries[q]; d > 0 {
				pt.addQueries(processKey{name, main, cgroup}, q, d)
			}
		}
		s.reported = v
		seen[tgid] = s
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading the BPF map: %w", err)
	}
	// Entries not read (deleted by someone else, or a pid reused after a
	// delete) are forgotten.
	a.seen = seen
	for _, t := range dead {
		// A lookup between the read above and this delete is lost; the
		// process has exited, so only a reused pid could make one.
		if err := a.counts.Delete(t); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("deleting from the BPF map: %w", err)
		}
		delete(a.seen, t)
	}
	var ovf uint64
	if err := a.overflow.Lookup(uint32(0), &ovf); err == nil && ovf > a.lastOverflow {
		pt.addOther(ovf - a.lastOverflow)
		a.lastOverflow = ovf
	}
	return nil
}

// Close detaches the programs and frees the maps.
func (a *ebpfAttribution) Close() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	for _, p := range append(a.progs, a.egress) {
		errs = append(errs, p.Close())
	}
	for _, m := range []*ebpf.Map{a.counts, a.overflow, a.socks} {
		errs = append(errs, m.Close())
	}
	if a.private != nil {
		errs = append(errs, a.private.Close())
		a.private = nil
	}
	a.links, a.progs, a.egress = nil, nil, nil
	return errors.Join(errs...)
}
