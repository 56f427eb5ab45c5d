package dns

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/jvm"
)

// procAttribution is the fallback when eBPF is unavailable: every
// --dns.proc-interval it lists the sockets of the exporter's network
// namespace connected to port 53 (/proc/net/{udp,udp6,tcp,tcp6}) and, only
// if there are any, finds their owners through /proc/<pid>/fd; each socket
// is counted once. A sample sees only the sockets open at that moment, so
// its counts are a lower bound (docs/dns.md, "Which process asked");
// unconnected UDP sockets have no remote port in /proc/net/udp and are not
// seen.
type procAttribution struct {
	fs       procfs.FS                   // processes
	netfs    procfs.FS                   // socket tables: net/*
	procPath func(elem ...string) string // for /proc/<pid>/cgroup
	seen     map[uint64]bool             // sockets counted in the previous sample
}

// newProcAttribution samples the processes of fs and the socket tables of
// netfs (the same procfs, whose net/ is the reader's network namespace;
// tests name a process of another namespace).
func newProcAttribution(fs, netfs procfs.FS, procPath func(elem ...string) string) (*procAttribution, error) {
	if _, err := netfs.NetUDP(); err != nil {
		return nil, fmt.Errorf("reading net/udp: %w", err)
	}
	return &procAttribution{fs: fs, netfs: netfs, procPath: procPath, seen: map[uint64]bool{}}, nil
}

func (a *procAttribution) mode() string { return "proc" }
func (a *procAttribution) Close() error { return nil }

// dnsSockets returns the inodes of sockets whose remote port is 53.
func (a *procAttribution) dnsSockets() map[uint64]bool {
	out := map[uint64]bool{}
	// A family may be absent (no IPv6): the others still count.
	add := func(lines procfs.NetIPSocket, _ error) {
		for _, l := range lines {
			if l.RemPort == 53 && l.Inode != 0 {
				out[l.Inode] = true
			}
		}
	}
	udp, err := a.netfs.NetUDP()
	add(procfs.NetIPSocket(udp), err)
	udp6, err := a.netfs.NetUDP6()
	add(procfs.NetIPSocket(udp6), err)
	// procfs deprecates these for netlink's sock_diag; this mode is the fallback for hosts
	// without eBPF, read every few seconds, where the /proc tables are what such a host has.
	tcp, err := a.netfs.NetTCP() //nolint:staticcheck // SA1019, see above
	add(procfs.NetIPSocket(tcp), err)
	tcp6, err := a.netfs.NetTCP6() //nolint:staticcheck // SA1019, see above
	add(procfs.NetIPSocket(tcp6), err)
	return out
}

// drain takes one sample and counts the sockets not counted before. A
// socket whose owner is not found (it exited between the two reads) stays a
// candidate for the next sample.
func (a *procAttribution) drain(pt *processTable) error {
	now := a.dnsSockets()
	counted := make(map[uint64]bool, len(now))
	want := 0
	for ino := range now {
		if a.seen[ino] {
			counted[ino] = true
		} else {
			want++
		}
	}
	defer func() { a.seen = counted }()
	if want == 0 {
		return nil
	}
	procs, err := a.fs.AllProcs()
	if err != nil {
		return err
	}
	for _, p := range procs {
		targets, err := p.FileDescriptorTargets()
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, t := range targets {
			ino, ok := socketInode(t)
			if !ok || !now[ino] || counted[ino] {
				continue
			}
			comm, err := p.Comm()
			if err != nil {
				continue
			}
			main := ""
			if comm == jvm.Comm {
				main = proclabel.Main(a.procPath(strconv.Itoa(p.PID), "cmdline"))
			}
			cgroup, ok := proclabel.ProcCgroup(a.procPath(strconv.Itoa(p.PID), "cgroup"))
			if ok {
				cgroup = proclabel.Cgroup(cgroup)
			}
			pt.add(processKey{comm, main, cgroup}, 1)
			counted[ino] = true // a socket shared by several processes counts once
			if want--; want == 0 {
				return nil
			}
		}
	}
	return nil
}

// socketInode parses a /proc/<pid>/fd link target "socket:[12345]".
func socketInode(target string) (uint64, bool) {
	s, ok := strings.CutPrefix(target, "socket:[")
	if !ok || !strings.HasSuffix(s, "]") {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	return n, err == nil
}
