package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The supervision collector counts the processes this exporter watches — the
// RocketMQ broker and name server JVMs and redis-server — by how they are
// supervised, from world-readable /proc files only. Incident 1 (a broker
// started in the foreground of a shell died when the session ended) is
// visible while the session is still alive: the process has a controlling
// terminal and does not ignore SIGHUP. See docs/supervision.md.

func init() {
	register("supervision",
		"How the RocketMQ broker, name server and redis-server processes are supervised (controlling terminal, SIGHUP), from /proc/<pid>",
		newSupervision)
}

var (
	watchedProcessesDesc = collector.NewMetric("watched_processes",
		"RocketMQ broker, name server and redis-server processes on this host by supervision state, from /proc/<pid>.",
		prometheus.GaugeValue, "service", "supervision")
	supervisionScannedDesc = collector.NewMetric("supervision_scanned_processes",
		"Processes listed under --path.procfs at the last supervision scan; few means a private PID namespace or hidepid.",
		prometheus.GaugeValue)
	supervisionUnreadableDesc = collector.NewMetric("supervision_unreadable_processes",
		"Processes whose /proc/<pid> files the last supervision scan was refused (hidepid=1); missing from stall_watched_processes.",
		prometheus.GaugeValue)
)

// errProcHidden and errProcUnreadable fail the collector's scrape (the counts
// are still exported) because an incomplete scan could miss a broker in a
// terminal: the alert built on stall_watched_processes would be blind.
var (
	errProcHidden     = errors.New("other users' processes are hidden (/proc mounted with hidepid=2/invisible?): run the exporter as root or in the group named by the mount's gid= option")
	errProcUnreadable = errors.New("/proc/<pid> files refused (/proc mounted with hidepid=1?): run the exporter as root or in the group named by the mount's gid= option")
	errProcEmpty      = errors.New("no process directories: --path.procfs is not a procfs")
)

type supervisionCollector struct {
	fs       procfs.FS
	paths    collector.Paths
	problems *collector.Problems
	interval time.Duration // --supervision.scan-interval

	mu        sync.Mutex
	last      *supervisionScan
	scannedAt time.Time
	// known caches each candidate's identity by PID and start time, so a
	// process's cmdline is read once in its life, not every scan.
	known map[int]knownProc
}

type knownProc struct {
	start   uint64 // stat field 22, starttime: tells a reused PID apart
	service string // "" for a java/redis-server process that is not watched
}

// supervisionScan is the result of one walk over /proc.
type supervisionScan struct {
	counts     [len(watchedServices)][len(supervisionStates)]int
	cgroups    []watchedCgroup // the watched processes' cgroups, for cgroup_dirty and the sampler
	scanned    int
	unreadable int
	hidden     bool
}

func newSupervision(cfg collector.Config, s settings) *supervisionCollector {
	return &supervisionCollector{
		fs: cfg.ProcFS, paths: cfg.Paths, problems: cfg.Problems, interval: s.supervisionInterval,
		known: map[int]knownProc{},
	}
}

// Update exports the counts of the last scan, scanning first when it is
// older than the interval. Concurrent scrapes wait for one scan and share
// it. A scan that saw processes it could not read still exports its counts
// but fails the scrape.
func (c *supervisionCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || time.Since(c.scannedAt) >= c.interval {
		s, err := c.scan(ctx)
		if err != nil {
			return err
		}
		c.last, c.scannedAt = s, time.Now()
	}
	s := c.last
	for i, svc := range watchedServices {
		for j, state := range supervisionStates {
			watchedProcessesDesc.Send(ch, float64(s.counts[i][j]), svc, state)
		}
	}
	supervisionScannedDesc.Send(ch, float64(s.scanned))
	supervisionUnreadableDesc.Send(ch, float64(s.unreadable))
	switch {
	case s.scanned == 0:
		return errProcEmpty
	case s.hidden:
		return errProcHidden
	case s.unreadable > 0:
		return fmt.Errorf("%d processes: %w", s.unreadable, errProcUnreadable)
	}
	return nil
}

// scan walks /proc once. Only processes whose comm names a watched binary
// are read further (stat; cmdline once per process; status and cgroup for
// the watched ones). Processes that exit during the walk (ENOENT, ESRCH) are
// skipped silently: that is normal churn, not an error.
func (c *supervisionCollector) scan(ctx context.Context) (*supervisionScan, error) {
	procs, err := c.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	s := &supervisionScan{scanned: len(procs), hidden: len(procs) > 0}
	known := make(map[int]knownProc, len(c.known))
	for i, p := range procs {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if p.PID == 1 {
			// PID 1 exists in every PID namespace and belongs to root; not
			// seeing it means hidepid hides the processes of other users.
			s.hidden = false
		}
		svc, state, cg, err := c.inspectProc(p, known)
		switch {
		case err != nil && errors.Is(err, fs.ErrPermission):
			s.unreadable++
		case err != nil && !gone(err):
			c.problems.Add(inspectKind(err), 1, err)
		case svc != "":
			s.add(svc, state)
			s.cgroups = append(s.cgroups, cg)
		}
	}
	c.known = known
	watchedAt(c.paths.Procfs).publish(s.cgroups)
	return s, nil
}

func (s *supervisionScan) add(service, state string) {
	s.counts[slices.Index(watchedServices[:], service)][slices.Index(supervisionStates[:], state)]++
}

// pfKthread is PF_KTHREAD in stat's flags field: a kernel thread, which has
// no command line and is never a watched service whatever its name.
const pfKthread = 0x00200000

// inspectError names the /proc file a malformed value came from, the kind
// under which Problems counts and logs it.
type inspectError struct {
	file string
	err  error
}

func (e *inspectError) Error() string { return e.file + ": " + e.err.Error() }
func (e *inspectError) Unwrap() error { return e.err }

func inspectKind(err error) string {
	var ie *inspectError
	if errors.As(err, &ie) {
		return "supervision_" + ie.file
	}
	return "supervision_proc"
}

// gone reports whether err means the process exited while it was read.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// inspect returns the service and state of one process, or "" when it is
// not a watched service (or is a zombie, a kernel thread, or gone). Its
// identity is recorded in known.
func (c *supervisionCollector) inspect(p procfs.Proc, known map[int]knownProc) (service, state string, err error) {
	service, state, _, err = c.inspectProc(p, known)
	return service, state, err
}

// inspectProc is inspect that also returns a watched process's cgroups.
func (c *supervisionCollector) inspectProc(p procfs.Proc, known map[int]knownProc) (service, state string, cg watchedCgroup, err error) {
	var buf [64]byte
	b, err := readComm(c.paths.Proc(strconv.Itoa(p.PID), "comm"), buf[:])
	if err != nil {
		return "", "", cg, &inspectError{"comm", err}
	}
	var comm string
	switch string(b) { // no allocation for the thousands of other processes
	case commJava, commRedis, commValkey:
		comm = string(b)
	default:
		return "", "", cg, nil
	}
	st, err := p.Stat()
	if err != nil {
		return "", "", cg, &inspectError{"stat", err}
	}
	// A zombie has exited and only waits for its parent to collect its
	// status; "X" is a task being torn down. Neither is running any more.
	if st.State == "Z" || st.State == "X" || st.Flags&pfKthread != 0 {
		return "", "", cg, nil
	}
	k, ok := c.known[p.PID]
	if !ok || k.start != st.Starttime {
		argv, err := p.CmdLine()
		if err != nil {
			return "", "", cg, &inspectError{"cmdline", err}
		}
		if len(argv) == 0 {
			return "", "", cg, nil // exiting: its memory is already gone
		}
		k = knownProc{start: st.Starttime, service: watchedService(comm, argv)}
	}
	known[p.PID] = k
	if k.service == "" {
		return "", "", cg, nil
	}
	raw, err := os.ReadFile(c.paths.Proc(strconv.Itoa(p.PID), "status"))
	if err != nil {
		return "", "", cg, &inspectError{"status", err}
	}
	status, err := parseStatusFields(raw)
	if err != nil {
		return "", "", cg, &inspectError{"status", err}
	}
	owner := ownerUnknown
	cgroups, err := p.Cgroups()
	switch {
	case err == nil:
		owner = ownerOf(cgroups)
		cg = watchedCgroupOf(k.service, cgroups)
	case errors.Is(err, fs.ErrNotExist):
		// A kernel without CONFIG_CGROUPS has no cgroup file; the process
		// itself was there a moment ago (status).
	default:
		return "", "", cg, &inspectError{"cgroup", err}
	}
	return k.service, classify(procFacts{TTY: st.TTY, Status: status, Owner: owner}), cg, nil
}

// readComm reads /proc/<pid>/comm (the name and a newline; the kernel
// returns it whole in one read) with three system calls. It is the one read
// made for every process, so it avoids os.Open's fstat and io.ReadAll's
// second read, which made procfs' Proc.Comm twice as expensive
// (docs/benchmarks.md).
func readComm(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	for {
		n, err := syscall.Read(fd, buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		return bytes.TrimSuffix(buf[:n], []byte{'\n'}), nil
	}
}
