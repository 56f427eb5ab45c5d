package collector

import (
	"bytes"
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	Register("meminfo", true, newMeminfoCollector)
}

var (
	memTotal     = NewMetric("memory_total_bytes", "Usable RAM (MemTotal in /proc/meminfo), in bytes.", prometheus.GaugeValue)
	memAvailable = NewMetric("memory_available_bytes", "Kernel's estimate of memory available to start new work without swapping (MemAvailable in /proc/meminfo, 3.14+), in bytes.", prometheus.GaugeValue)
	memCached    = NewMetric("memory_cached_bytes", "Page cache excluding swap cache (Cached in /proc/meminfo), in bytes.", prometheus.GaugeValue)
	memDirty     = NewMetric("memory_dirty_bytes", "Memory waiting to be written back to disk (Dirty in /proc/meminfo), in bytes; the same counter as stall_vm_dirty_bytes, rounded to KiB.", prometheus.GaugeValue)
	memWriteback = NewMetric("memory_writeback_bytes", "Memory being written back to disk (Writeback in /proc/meminfo), in bytes.", prometheus.GaugeValue)
)

// meminfoFields are the /proc/meminfo lines the collector exports, in the
// order of Meminfo's fields.
var meminfoFields = [...]struct {
	name string
	m    Metric
}{
	{"MemTotal", memTotal},
	{"MemAvailable", memAvailable},
	{"Cached", memCached},
	{"Dirty", memDirty},
	{"Writeback", memWriteback},
}

// Meminfo holds the /proc/meminfo values the collector exports, in bytes.
type Meminfo struct {
	Bytes [len(meminfoFields)]uint64
	Has   [len(meminfoFields)]bool // the kernel printed the line (MemAvailable from 3.14)
}

// ParseMeminfo parses /proc/meminfo ("Name:   value kB" per line) into m,
// which it resets first. Only the exported lines are decoded; a value
// without a unit is bytes (the HugePages_ counts have none, and are not
// exported). An exported line whose value is not an unsigned integer
// followed by nothing or "kB" is counted in bad, described by firstErr, and
// skipped; the other lines are kept. It does not allocate unless a line is
// malformed.
func ParseMeminfo(data []byte, m *Meminfo) (bad int, firstErr error) {
	*m = Meminfo{}
	n := 0
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		n++
		name, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue // not a line of any field we export
		}
		i := -1
		for k := range meminfoFields {
			if string(name) == meminfoFields[k].name {
				i = k
				break
			}
		}
		if i < 0 {
			continue
		}
		v, ok := parseMeminfoValue(rest)
		if !ok {
			bad++
			if firstErr == nil {
				firstErr = &ParseError{File: "meminfo", Line: n, Text: truncate(line), Msg: "want an unsigned integer and an optional kB"}
			}
			continue
		}
		m.Bytes[i], m.Has[i] = v, true
	}
	return bad, firstErr
}

// parseMeminfoValue reads " 1234 kB" (KiB, returned in bytes) or " 1234".
func parseMeminfoValue(b []byte) (uint64, bool) {
	num := samplerNextField(&b)
	unit := samplerNextField(&b)
	if len(samplerNextField(&b)) != 0 {
		return 0, false
	}
	v, ok := parseUint(num)
	switch {
	case !ok:
		return 0, false
	case len(unit) == 0:
		return v, true
	case string(unit) == "kB" && v <= (1<<64-1)/1024:
		return v * 1024, true
	}
	return 0, false
}

type meminfoCollector struct {
	problems *Problems

	mu   sync.Mutex // concurrent scrapes share the file and buffer
	file *ProcFile
	buf  []byte
}

func newMeminfoCollector(cfg Config) (Collector, error) {
	return &meminfoCollector{file: NewProcFile(cfg.Paths.Proc("meminfo")), problems: cfg.Problems}, nil
}

// Update reads /proc/meminfo. Fields the kernel lacks (MemAvailable before
// 3.14) are absent, not 0. A missing file means a wrong --path.procfs, not
// "no data".
func (c *meminfoCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := c.file.Read(c.buf)
	c.buf = data[:0]
	if err != nil {
		return err
	}
	var m Meminfo
	if bad, perr := ParseMeminfo(data, &m); bad > 0 {
		c.problems.Add("meminfo", bad, perr)
	}
	for i, f := range meminfoFields {
		if m.Has[i] {
			f.m.Send(ch, float64(m.Bytes[i]))
		}
	}
	return nil
}
