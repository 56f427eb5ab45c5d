package dns

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
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

// processKey is a series' labels: the process's comm and its cgroup's
// name (cgroupName).
type processKey struct{ comm, cgroup string }

var otherProcess = processKey{"other", "other"}

type processCount struct {
	n       uint64
	queries [numQTypes]uint64
	last    time.Time
}

func newProcessTable(max int, idle time.Duration) *processTable {
	return &processTable{max: max, idle: idle, names: map[processKey]*processCount{}}
}

// entry returns the counts of process name in cgroup, admitting the pair
// if there is room (or an idle pair to replace), else the "other" counts.
func (p *processTable) entry(name, cgroup string) *processCount {
	k := processKey{collector.LabelValue(name, collector.MaxLabelBytes), collector.LabelValue(cgroup, maxCgroupLen)}
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

// add counts n lookups (connect/sendmsg to port 53) of the named process
// in cgroup.
func (p *processTable) add(name, cgroup string, n uint64) { p.entry(name, cgroup).n += n }

// addQueries counts n queries of label index qtype sent by the named
// process in cgroup.
func (p *processTable) addQueries(name, cgroup string, qtype int, n uint64) {
	p.entry(name, cgroup).queries[qtype] += n
}

func (p *processTable) addOther(n uint64) { p.other.n += n }

func (p *processTable) send(ch chan<- prometheus.Metric) {
	keys := make([]processKey, 0, len(p.names))
	for k := range p.names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].comm < keys[j].comm || keys[i].comm == keys[j].comm && keys[i].cgroup < keys[j].cgroup
	})
	send := func(c *processCount, k processKey) {
		processLookupsDesc.Send(ch, float64(c.n), k.comm, k.cgroup)
		for q, n := range c.queries {
			if n > 0 {
				processQueriesDesc.Send(ch, float64(n), k.comm, k.cgroup, qtypeNames[q])
			}
		}
	}
	for _, k := range keys {
		send(p.names[k], k)
	}
	send(&p.other, otherProcess)
}
