package writeback

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"

	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector/host"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/jvm"
)

// dirtiers counts who fills the page cache: the bytes each process
// dirtied (/proc/<pid>/io write_bytes), read only while the host's dirty
// and writeback pages are past the background threshold, or while some
// task was paused since the last read — which balance_dirty_pages() does
// only past a domain's background threshold, the host's or a memory
// cgroup's (a container at its own throttle point while the host's dirty
// pages are few) — so an idle host pays one read of /proc/vmstat per
// scrape and nothing more.
//
// write_bytes grows when a page of a file the process writes turns dirty
// (folio_account_dirtied() → task_io_account_write() in
// mm/page-writeback.c; account_page_dirtied() before 5.16), in the task
// that dirties it: a write(2), and equally a store through a shared
// writable mmap (the fault that makes the page writable marks it dirty:
// fault_dirty_shared_page()), as RocketMQ's CommitLog writes. A page
// dirtied again before it is written back counts once, and bytes of pages
// truncated while dirty are not subtracted (cancelled_write_bytes).
//
// The first read past the threshold only takes each process's count;
// every later one, while the host stays past it (or tasks are paused),
// counts the growth since the read before, and a process that appeared
// in between counts whole: it was started since. Processes that start and
// exit between two reads are not seen. Falling back below the threshold
// with nobody paused forgets the counts.
// Not safe for concurrent use.
type dirtiers struct {
	fs       procfs.FS
	vmstat   string
	procPath func(elem ...string) string
	top      int // processes named per read; the rest count as other

	last  map[int]uint64 // pid → write_bytes at the last read; nil below the threshold
	mains map[int]string // pid → what a JVM runs, read once while past the threshold
}

// dirtied is one process's growth since the last read.
type dirtied struct {
	pid   int
	bytes uint64
}

// read counts into t what processes dirtied since the last read, if the
// host is past its background threshold or paused says tasks were paused
// since the last read; active says whether it read the processes. Processes whose io file cannot be read are skipped: gone
// since the listing, or another user's without CAP_SYS_PTRACE (and CAP_DAC_READ_SEARCH
// for a non-root exporter; docs/writeback.md) (counted in
// unreadable).
func (d *dirtiers) read(t *proclabel.Table[counts], paused bool) (active bool, unreadable int, err error) {
	var v host.VMStat
	if err := host.ReadVMStat(d.vmstat, &v); err != nil {
		return false, 0, err
	}
	past, ok := v.PastBackground()
	if !ok {
		return false, 0, fmt.Errorf("%s lacks nr_dirty, nr_writeback or nr_dirty_background_threshold", d.vmstat)
	}
	if !past && !paused {
		d.last, d.mains = nil, nil
		return false, 0, nil
	}
	procs, err := d.fs.AllProcs()
	if err != nil {
		return false, 0, fmt.Errorf("listing processes: %w", err)
	}
	now := make(map[int]uint64, len(procs))
	var grew []dirtied
	for _, p := range procs {
		io, err := p.IO()
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				unreadable++
			}
			continue // or gone since the listing
		}
		now[p.PID] = io.WriteBytes
		if d.last == nil {
			continue
		}
		before, known := d.last[p.PID]
		switch {
		case !known:
			before = 0 // started since the last read
		case io.WriteBytes < before:
			before = 0 // a pid reused since: the new process counts whole
		}
		if n := io.WriteBytes - before; n > 0 {
			grew = append(grew, dirtied{p.PID, n})
		}
	}
	if d.mains == nil {
		d.mains = map[int]string{}
	}
	for pid := range d.mains {
		if _, ok := now[pid]; !ok {
			delete(d.mains, pid)
		}
	}
	d.last = now
	slices.SortFunc(grew, func(a, b dirtied) int { return cmp.Compare(b.bytes, a.bytes) })
	for i, g := range grew {
		if i >= d.top {
			t.Other().dirtied += g.bytes
			continue
		}
		t.Entry(d.name(g.pid)).dirtied += g.bytes
	}
	return true, unreadable, nil
}

// name labels a live process: comm, a JVM's main class, cgroup. A process
// gone since its io was read has no comm and counts as other.
func (d *dirtiers) name(pid int) proclabel.Key {
	id := strconv.Itoa(pid)
	p, err := d.fs.Proc(pid)
	if err != nil {
		return proclabel.OtherKey
	}
	comm, err := p.Comm()
	if err != nil {
		return proclabel.OtherKey
	}
	k := proclabel.Key{Comm: comm}
	if comm == jvm.Comm {
		// Once per process: reading its cmdline takes its mmap lock.
		main, ok := d.mains[pid]
		if !ok {
			main = proclabel.Main(d.procPath(id, "cmdline"))
			d.mains[pid] = main
		}
		k.Main = main
	}
	if path, ok := proclabel.ProcCgroup(d.procPath(id, "cgroup")); ok {
		k.Cgroup = proclabel.Cgroup(path)
	}
	return k
}
