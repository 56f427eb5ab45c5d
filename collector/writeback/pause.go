package writeback

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/jvm"
)

// pauseSource owns the program (prog.go) on writeback:balance_dirty_pages,
// its maps and the perf event that attaches it. Kernel requirements: the
// tracepoint (CONFIG_TRACEPOINTS), eBPF tracepoint programs (4.7),
// CAP_BPF + CAP_PERFMON (5.8+) or CAP_SYS_ADMIN, and CAP_SYS_ADMIN for a
// private tracefs where none is mounted (tracefs.go). Nothing is pinned:
// when the exporter exits, the kernel detaches the program.
type pauseSource struct {
	counts, overflow *ebpf.Map
	prog             *ebpf.Program
	event            int // the perf event's descriptor, -1 when closed
	layout           pauseLayout
	// cgroupErr says why the program records no cgroup id: cgroups are
	// then named from /proc for live processes.
	cgroupErr error
	cgroups   *proclabel.CgroupNames
	// noRoot: no cgroup2 mount to resolve ids under; cgroups are named
	// from /proc/<pid>/cgroup ("unknown" for exited processes).
	noRoot   bool
	procPath func(elem ...string) string

	seen         map[pauseKey]seenPause
	lastOverflow overflowValue
}

// seenPause is what a drain keeps of an entry: the counts already
// reported and, for a JVM, what it runs (read once).
type seenPause struct {
	reported  pauseValue
	main      string
	mainKnown bool
}

// newPauseSource loads the program for the event layout l with a map of
// entries (pairs), attaches it, and names cgroups under cgroupRoot (the
// cgroup v2 mount; "" names them from /proc/<pid>/cgroup only). A failure
// undoes everything and says what the kernel or the loader refused.
func newPauseSource(l pauseLayout, entries int, cgroupRoot string, procPath func(elem ...string) string) (_ *pauseSource, err error) {
	s := &pauseSource{event: -1, layout: l, procPath: procPath, seen: map[pauseKey]seenPause{}, cgroups: proclabel.NewCgroupNames(cgroupRoot, procPath), noRoot: cgroupRoot == ""}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("raising RLIMIT_MEMLOCK for BPF maps (kernels before 5.11): %w", err)
	}
	if s.counts, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "stall_wb_pause", Type: ebpf.Hash, KeySize: pauseKeySize, ValueSize: pauseValueSize, MaxEntries: uint32(entries),
	}); err != nil {
		return nil, fmt.Errorf("creating the BPF map: %w", err)
	}
	if s.overflow, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "stall_wb_ovf", Type: ebpf.Array, KeySize: 4, ValueSize: overflowValueSize, MaxEntries: 1,
	}); err != nil {
		return nil, fmt.Errorf("creating the BPF map: %w", err)
	}
	var withID error
	for _, cgroupID := range []bool{true, false} {
		s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "stall_wb_pause",
			Type:         ebpf.TracePoint,
			Instructions: pauseProgram(l, s.counts, s.overflow, cgroupID),
			License:      "Dual MIT/GPL",
		})
		if err == nil {
			break
		}
		if cgroupID {
			withID = err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loading the program: %w", err)
	}
	s.cgroupErr = withID
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

// attach opens the tracepoint as a perf event (PERF_TYPE_TRACEPOINT with
// the event's id, on one CPU: a tracepoint runs its programs on every CPU
// whichever CPU the event was opened on) and hands it the program
// (PERF_EVENT_IOC_SET_BPF, 4.7+). The event counts and does not sample,
// so the hits the program lets through to perf (it returns 1: see
// pauseProgram) cost an increment, not a record. cilium/ebpf's
// link.Tracepoint does the same but finds the id in a tracefs it looks
// for itself, which a host without one mounted lacks.
func (s *pauseSource) attach() error {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: s.layout.id}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("opening the tracepoint (perf_event_open, id %d; needs CAP_PERFMON or CAP_SYS_ADMIN): %w", s.layout.id, err)
	}
	s.event = fd
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, s.prog.FD()); err != nil {
		return fmt.Errorf("attaching the program to the tracepoint: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("enabling the tracepoint: %w", err)
	}
	return nil
}

// drain adds the pauses counted since the last drain to t, named by the
// process's name (/proc/<tgid>/comm: a JVM is "java" whichever thread was
// paused, told apart by what it runs) or, once the process is gone, by the
// comm the kernel recorded, and by its cgroup (the id the program
// recorded, resolved by cgroups). Entries of processes that are gone are
// deleted, so the map holds only live ones; the overflow slot's growth
// goes to "other". It returns the number of sleeps counted.
func (s *pauseSource) drain(t *proclabel.Table[counts]) (sleeps uint64, err error) {
	s.cgroups.StartDrain()
	var (
		k    pauseKey
		v    pauseValue
		dead []pauseKey
	)
	seen := make(map[pauseKey]seenPause, len(s.seen))
	it := s.counts.Iterate()
	for it.Next(&k, &v) {
		pid := strconv.FormatUint(uint64(k.Tgid), 10)
		name, live := proclabel.Comm(s.procPath(pid, "comm"))
		e := s.seen[k]
		switch {
		case !live:
			name = proclabel.CommBytes(v.Comm[:])
			dead = append(dead, k)
		case name != jvm.Comm:
			e.main = ""
		case !e.mainKnown:
			e.main, e.mainKnown = proclabel.Main(s.procPath(pid, "cmdline")), true
		}
		if v.Pauses < e.reported.Pauses || v.PauseMS < e.reported.PauseMS {
			e.reported = pauseValue{} // an entry made anew since the last drain
		}
		if d := v.Pauses - e.reported.Pauses; d > 0 {
			id := k.Cgroup
			if s.noRoot {
				id = 0
			}
			c := t.Entry(proclabel.Key{Comm: name, Main: e.main, Cgroup: s.cgroups.Name(id, k.Tgid, live)})
			sleeps += d
			c.pauses += d
			c.pauseMS += v.PauseMS - e.reported.PauseMS
		}
		e.reported = v
		seen[k] = e
	}
	if err := it.Err(); err != nil {
		return sleeps, fmt.Errorf("reading the BPF map: %w", err)
	}
	s.seen = seen
	for _, k := range dead {
		// A pause between the read above and this delete is lost; the
		// process has exited, so only a reused pid could make one.
		if err := s.counts.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return sleeps, fmt.Errorf("deleting from the BPF map: %w", err)
		}
		delete(s.seen, k)
	}
	var ovf overflowValue
	if err := s.overflow.Lookup(uint32(0), &ovf); err == nil && ovf.Pauses > s.lastOverflow.Pauses {
		o := t.Other()
		sleeps += ovf.Pauses - s.lastOverflow.Pauses
		o.pauses += ovf.Pauses - s.lastOverflow.Pauses
		o.pauseMS += ovf.PauseMS - s.lastOverflow.PauseMS
		s.lastOverflow = ovf
	}
	return sleeps, nil
}

// Close detaches the program and frees the maps.
func (s *pauseSource) Close() error {
	var errs []error
	if s.event >= 0 {
		errs = append(errs, unix.Close(s.event))
		s.event = -1
	}
	errs = append(errs, s.prog.Close(), s.counts.Close(), s.overflow.Close())
	s.prog, s.counts, s.overflow = nil, nil, nil
	return errors.Join(errs...)
}
