package dns

import (
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/jvm"
)

// processTable turns per-process lookup counts into bounded series: at
// most max (process name, cgroup) pairs have their own
// stall_dns_process_lookups_total series; the rest count as
// comm="other", cgroup="other". A pair keeps its series while it is
// active; when the table is full, a new pair takes the place of the pair
// idle longest, if that one has been idle for at least idle — so a JVM
// that starts a lookup storm after a quiet hour gets a series even if max
// other processes were seen before it. A pair that loses its place just
// stops being exported (its series goes stale, which rate() handles); its
// past counts are not moved to "other", which therefore only grows. Not
// safe for concurrent use.
type processTable struct {
	max   int
	idle  time.Duration
	names map[processKey]*processCount
	other processCount
}

// processKey is a series' labels: the process's comm, what a JVM runs
// (jvmName; "" for other processes) and its cgroup's name (cgroupName).
type processKey struct{ comm, main, cgroup string }

var otherProcess = processKey{"other", "", "other"}

// maxMainLen bounds the main label.
const maxMainLen = 64

// jvmName reads what a JVM runs (jvm.ShortName: its main class without the
// package, or its jar's file name) from its command line, at most
// maxMainLen bytes; "" when it cannot be read. It is read once per process:
// reading another process's cmdline takes its mmap lock, which a process
// stalled in reclaim may hold.
func jvmName(cmdline string) string {
	b, err := os.ReadFile(cmdline)
	if err != nil {
		return ""
	}
	return collector.LabelValue(jvm.ShortName(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")), maxMainLen)
}

type processCount struct {
	n       uint64
	queries [numQTypes]uint64
	last    time.Time
}

func newProcessTable(max int, idle time.Duration) *processTable {
	return &processTable{max: max, idle: idle, names: map[processKey]*processCount{}}
}

// entry returns the counts of process k, admitting it if there is room
// (or an idle process to replace), else the "other" counts.
func (p *processTable) entry(k processKey) *processCount {
	k = processKey{collector.LabelValue(k.comm, collector.MaxLabelBytes), collector.LabelValue(k.main, maxMainLen), collector.LabelValue(k.cgroup, maxCgroupLen)}
	if k.comm == "" || k.comm == "other" { // a process named "other" is indistinguishable from the remainder
		return &p.other
	}
	if k.cgroup == "" {
		k.cgroup = unknownCgroup
	}
	now := time.Now()
	if c, ok := p.names[k]; ok {
		c.last = now
		return c
	}
	if len(p.names) >= p.max {
		var oldest processKey
		var at time.Time
		found := false
		for key, c := range p.names {
			if !found || c.last.Before(at) {
				oldest, at, found = key, c.last, true
			}
		}
		if now.Sub(at) < p.idle {
			return &p.other
		}
		delete(p.names, oldest)
	}
	c := &processCount{last: now}
	p.names[k] = c
	return c
}

// add counts n lookups (connect/sendmsg to port 53) of process k.
func (p *processTable) add(k processKey, n uint64) { p.entry(k).n += n }

// addQueries counts n queries of label index qtype sent by process k.
func (p *processTable) addQueries(k processKey, qtype int, n uint64) {
	p.entry(k).queries[qtype] += n
}

func (p *processTable) addOther(n uint64) { p.other.n += n }

func (p *processTable) send(ch chan<- prometheus.Metric) {
	keys := make([]processKey, 0, len(p.names))
	for k := range p.names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.comm < b.comm || a.comm == b.comm && (a.main < b.main || a.main == b.main && a.cgroup < b.cgroup)
	})
	send := func(c *processCount, k processKey) {
		processLookupsDesc.Send(ch, float64(c.n), k.comm, k.main, k.cgroup)
		for q, n := range c.queries {
			if n > 0 {
				processQueriesDesc.Send(ch, float64(n), k.comm, k.main, k.cgroup, qtypeNames[q])
			}
		}
	}
	for _, k := range keys {
		send(p.names[k], k)
	}
	send(&p.other, otherProcess)
}
