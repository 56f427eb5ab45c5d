package dns

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

// processTable turns per-process counts into bounded series: at most max
// processes (processKey) have their own; the rest count as comm="other".
// When the table is full, a new process takes the place of the one idle
// longest if that one has been idle for idle — so a JVM that starts a
// lookup storm after a quiet hour gets a series. A process that loses its
// place stops being exported (its series goes stale); its past counts are
// not moved to "other". Not safe for concurrent use.
type processTable struct {
	max   int
	idle  time.Duration
	names map[processKey]*processCount
	other processCount
}

// processKey is a series' labels: the process's comm, what a JVM runs
// (proclabel.Main; "" for other processes) and its cgroup's name
// (proclabel.Cgroup).
type processKey struct{ comm, main, cgroup string }

var otherProcess = processKey{"other", "", "other"}

type processCount struct {
	n       uint64
	queries [numQTypes]uint64
	last    time.Time
}

func newProcessTable(size int, idle time.Duration) *processTable {
	return &processTable{max: size, idle: idle, names: map[processKey]*processCount{}}
}

// entry returns the counts of process k, admitting it if there is room
// (or an idle process to replace), else the "other" counts.
func (p *processTable) entry(k processKey) *processCount {
	k = processKey{collector.LabelValue(k.comm, collector.MaxLabelBytes), collector.LabelValue(k.main, proclabel.MaxMainLen), collector.LabelValue(k.cgroup, proclabel.MaxCgroupLen)}
	if k.comm == "" || k.comm == "other" { // a process named "other" is indistinguishable from the remainder
		return &p.other
	}
	if k.cgroup == "" {
		k.cgroup = proclabel.Unknown
	}
	now := time.Now()
	if c, ok := p.names[k]; ok {
		c.last = now
		return c
	}
	if len(p.names) >= p.max {
		oldest, at := processKey{}, now // idle is positive: at == now admits nothing
		for key, c := range p.names {
			if c.last.Before(at) {
				oldest, at = key, c.last
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

// send sends the series in no particular order: the exporter's gatherer
// sorts every family.
func (p *processTable) send(ch chan<- prometheus.Metric) {
	send := func(c *processCount, k processKey) {
		processLookupsDesc.Send(ch, float64(c.n), k.comm, k.main, k.cgroup)
		for q, n := range c.queries {
			if n > 0 {
				processQueriesDesc.Send(ch, float64(n), k.comm, k.main, k.cgroup, qtypeNames[q])
			}
		}
	}
	for k, c := range p.names {
		send(c, k)
	}
	send(&p.other, otherProcess)
}
