package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/exposition"
	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// The exporter's own process metrics: the nine process_* series
// client_golang's process collector exports, with the same names, types and
// values, read at a fraction of its cost. client_golang's collector opens
// and parses five files per scrape with procfs, including all of /proc/stat
// (one line per CPU plus every interrupt counter) only to learn the boot
// time, and was about 40 % of the CPU of a scrape without collectors. Here
// the start time is computed once, the limits come from getrlimit, and
// /proc/self/stat, /proc/self/net/netstat and /proc/self/fd stay open and are
// re-read in place without allocating. The three descriptors held open count
// in process_open_fds.

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, 100 on every
// Linux architecture (what procfs and client_golang assume too).
const userHZ = 100

var (
	procCPU = exposition.NewDesc("process_cpu_seconds_total",
		"CPU time the exporter process has used, user plus system, in seconds (utime + stime in /proc/self/stat).",
		prometheus.CounterValue)
	procOpenFDs = exposition.NewDesc("process_open_fds",
		"File descriptors the exporter process has open (entries of /proc/self/fd).",
		prometheus.GaugeValue)
	procMaxFDs = exposition.NewDesc("process_max_fds",
		"Soft limit on the exporter process's open file descriptors (RLIMIT_NOFILE).",
		prometheus.GaugeValue)
	procVsize = exposition.NewDesc("process_virtual_memory_bytes",
		"Virtual memory size of the exporter process, in bytes (vsize in /proc/self/stat).",
		prometheus.GaugeValue)
	procMaxVsize = exposition.NewDesc("process_virtual_memory_max_bytes",
		"Soft limit on the exporter process's address space, in bytes (RLIMIT_AS; 2^64-1 means unlimited).",
		prometheus.GaugeValue)
	procRSS = exposition.NewDesc("process_resident_memory_bytes",
		"Resident memory of the exporter process, in bytes (rss in /proc/self/stat × page size).",
		prometheus.GaugeValue)
	procStart = exposition.NewDesc("process_start_time_seconds",
		"Start time of the exporter process, in seconds since the Unix epoch (btime in /proc/stat + starttime in /proc/self/stat).",
		prometheus.GaugeValue)
	procNetIn = exposition.NewDesc("process_network_receive_bytes_total",
		"Bytes received in the exporter's network namespace (IpExt InOctets in /proc/self/net/netstat).",
		prometheus.CounterValue)
	procNetOut = exposition.NewDesc("process_network_transmit_bytes_total",
		"Bytes sent in the exporter's network namespace (IpExt OutOctets in /proc/self/net/netstat).",
		prometheus.CounterValue)
)

// processMetrics reads the process_* series. Safe for concurrent use.
type processMetrics struct {
	logger *slog.Logger

	mu       sync.Mutex
	stat     *collector.ProcFile
	netstat  *collector.ProcFile
	fdDir    int // /proc/self/fd, -1 until opened
	buf      []byte
	dents    []byte
	start    float64
	hasStart bool
	warned   map[string]bool
}

func newProcessMetrics(logger *slog.Logger) *processMetrics {
	p := &processMetrics{
		logger:  logger,
		stat:    collector.NewProcFile("/proc/self/stat"),
		netstat: collector.NewProcFile("/proc/self/net/netstat"),
		fdDir:   -1,
		buf:     make([]byte, 0, 8<<10),
		dents:   make([]byte, 8<<10),
		warned:  map[string]bool{},
	}
	p.start, p.hasStart = p.startTime()
	return p
}

// fail logs the first error of each kind at warn level and later ones at
// debug; the series of that kind are left out of the scrape, as
// client_golang's collector leaves them out.
func (p *processMetrics) fail(kind string, err error) {
	if p.warned[kind] {
		p.logger.Debug("cannot read own process metrics", "kind", kind, "err", err)
		return
	}
	p.warned[kind] = true
	p.logger.Warn("cannot read own process metrics; repeats are logged at debug level", "kind", kind, "err", err)
}

// add appends the process_* samples to sc.
func (p *processMetrics) add(sc *exposition.Scrape) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, err := p.readStat(); err != nil {
		p.fail("stat", err)
	} else {
		sc.Add(exposition.MustNewSample(procCPU, float64(f.utime+f.stime)/userHZ))
		sc.Add(exposition.MustNewSample(procVsize, float64(f.vsize)))
		sc.Add(exposition.MustNewSample(procRSS, float64(f.rss)*float64(os.Getpagesize())))
		if p.hasStart {
			sc.Add(exposition.MustNewSample(procStart, p.start))
		}
	}
	if n, err := p.openFDs(); err != nil {
		p.fail("fd", err)
	} else {
		sc.Add(exposition.MustNewSample(procOpenFDs, float64(n)))
	}
	var nofile, as syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		p.fail("rlimit", err)
	} else if err := syscall.Getrlimit(syscall.RLIMIT_AS, &as); err != nil {
		p.fail("rlimit", err)
	} else {
		sc.Add(exposition.MustNewSample(procMaxFDs, float64(nofile.Cur)))
		sc.Add(exposition.MustNewSample(procMaxVsize, float64(as.Cur)))
	}
	if in, out, err := p.readNetstat(); err != nil {
		p.fail("netstat", err)
	} else {
		sc.Add(exposition.MustNewSample(procNetIn, in))
		sc.Add(exposition.MustNewSample(procNetOut, out))
	}
}

type procStat struct {
	utime, stime, starttime, vsize, rss uint64
}

// readStat reads the fields of /proc/self/stat after the command name
// (which may contain spaces and parentheses, hence the last ')').
func (p *processMetrics) readStat() (procStat, error) {
	var st procStat
	b, err := p.stat.Read(p.buf)
	p.buf = b[:0]
	if err != nil {
		return st, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, errors.New("/proc/self/stat: no ')' after the command name")
	}
	rest := b[i+1:]
	// Field numbers as in proc(5): 3 is the state, right after the ')'.
	for n := 3; n <= 24; n++ {
		f := scan.Field(&rest)
		if len(f) == 0 {
			return st, fmt.Errorf("/proc/self/stat: %d fields, want at least 24", n-1)
		}
		var dst *uint64
		switch n {
		case 14:
			dst = &st.utime
		case 15:
			dst = &st.stime
		case 22:
			dst = &st.starttime
		case 23:
			dst = &st.vsize
		case 24:
			dst = &st.rss
		}
		if dst != nil {
			v, ok := scan.Uint(f)
			if !ok {
				return st, fmt.Errorf("/proc/self/stat field %d is not an unsigned integer", n)
			}
			*dst = v
		}
	}
	return st, nil
}

// startTime is btime from /proc/stat plus the process's starttime: fixed for
// the life of the process, so read once.
func (p *processMetrics) startTime() (float64, bool) {
	st, err := p.readStat()
	if err != nil {
		p.fail("stat", err)
		return 0, false
	}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		p.fail("btime", err)
		return 0, false
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			if btime, ok := scan.Uint(bytes.TrimSpace(v)); ok {
				return float64(btime) + float64(st.starttime)/userHZ, true
			}
		}
	}
	p.fail("btime", errors.New("/proc/stat has no btime line"))
	return 0, false
}

// openFDs counts the entries of /proc/self/fd (this directory's own
// descriptor included, as a listing by any other means would).
func (p *processMetrics) openFDs() (int, error) {
	if p.fdDir < 0 {
		fd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		p.fdDir = fd
	}
	if _, err := syscall.Seek(p.fdDir, 0, 0); err != nil {
		p.closeFDDir()
		return 0, err
	}
	count := 0
	for {
		n, err := syscall.Getdents(p.fdDir, p.dents)
		if err != nil {
			p.closeFDDir()
			return 0, err
		}
		if n <= 0 {
			return count, nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for off := 0; off+19 < n; {
			reclen := int(binary.NativeEndian.Uint16(p.dents[off+16:]))
			if reclen == 0 {
				break
			}
			name := p.dents[off+19 : off+reclen]
			if name[0] != '.' { // "." and ".."; fd names are digits
				count++
			}
			off += reclen
		}
	}
}

func (p *processMetrics) closeFDDir() {
	syscall.Close(p.fdDir)
	p.fdDir = -1
}

// readNetstat returns InOctets and OutOctets of the IpExt lines of
// /proc/self/net/netstat (a header line of names, then a line of values);
// a field the kernel lacks is 0, as for client_golang.
func (p *processMetrics) readNetstat() (in, out float64, err error) {
	b, err := p.netstat.Read(p.buf)
	p.buf = b[:0]
	if err != nil {
		return 0, 0, err
	}
	prefix := []byte("IpExt:")
	var names []byte
	for line := range bytes.Lines(b) {
		if !bytes.HasPrefix(line, prefix) {
			continue
		}
		if names == nil {
			names = line[len(prefix):]
			continue
		}
		values := line[len(prefix):]
		for {
			name, v := scan.Field(&names), scan.Field(&values)
			if len(name) == 0 || len(v) == 0 {
				return in, out, nil
			}
			switch string(name) { // no allocation: a comparison
			case "InOctets":
				x, _ := scan.Uint(v)
				in = float64(x)
			case "OutOctets":
				x, _ := scan.Uint(v)
				out = float64(x)
			}
		}
	}
	return 0, 0, errors.New("/proc/self/net/netstat has no IpExt lines")
}
