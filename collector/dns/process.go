package dns

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// processTable turns per-process lookup counts into bounded series: at
// most max names have their own stall_dns_process_lookups_total series;
// the rest count as comm="other". A name keeps its series while it is
// active; when the table is full, a new name takes the place of the name
// idle longest, if that one has been idle for at least idle — so a JVM
// that starts a lookup storm after a quiet hour gets a series even if
// max other processes were seen before it. A name that loses its place
// just stops being exported (its series goes stale, which rate() handles);
// its past counts are not moved to "other", which therefore only grows.
// Not safe for concurrent use.
type processTable struct {
	max   int
	idle  time.Duration
	now   func() time.Time
	names map[string]*processCount
	other processCount
}

type processCount struct {
	n       uint64
	queries [numQTypes]uint64
	last    time.Time
}

// maxCommLen bounds a label value: a comm is at most 15 bytes, but in proc
// mode it is read from a file.
const maxCommLen = 64

func newProcessTable(max int, idle time.Duration) *processTable {
	return &processTable{max: max, idle: idle, now: time.Now, names: map[string]*processCount{}}
}

// entry returns the counts of name, admitting it if there is room (or an
// idle name to replace), else the "other" counts.
func (p *processTable) entry(name string) *processCount {
	name = collector.LabelValue(name, maxCommLen)
	if name == "" || name == "other" { // a process named "other" is indistinguishable from the remainder
		return &p.other
	}
	now := p.now()
	if c, ok := p.names[name]; ok {
		c.last = now
		return c
	}
	if len(p.names) >= p.max {
		var oldest string
		var at time.Time
		for k, c := range p.names {
			if oldest == "" || c.last.Before(at) {
				oldest, at = k, c.last
			}
		}
		if now.Sub(at) < p.idle {
			return &p.other
		}
		delete(p.names, oldest)
	}
	c := &processCount{last: now}
	p.names[name] = c
	return c
}

// add counts n lookups (connect/sendmsg to port 53) of the named process.
func (p *processTable) add(name string, n uint64) { p.entry(name).n += n }

// addQueries counts n queries of label index qtype sent by the named process.
func (p *processTable) addQueries(name string, qtype int, n uint64) {
	p.entry(name).queries[qtype] += n
}

func (p *processTable) addOther(n uint64) { p.other.n += n }

func (p *processTable) send(ch chan<- prometheus.Metric) {
	names := make([]string, 0, len(p.names))
	for k := range p.names {
		names = append(names, k)
	}
	sort.Strings(names)
	send := func(c *processCount, name string) {
		processLookupsDesc.Send(ch, float64(c.n), name)
		for q, n := range c.queries {
			if n > 0 {
				processQueriesDesc.Send(ch, float64(n), name, qtypeNames[q])
			}
		}
	}
	for _, k := range names {
		send(p.names[k], k)
	}
	send(&p.other, "other")
}
