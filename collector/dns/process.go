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
	other uint64
}

type processCount struct {
	n    uint64
	last time.Time
}

// maxCommLen bounds a label value: a comm is at most 15 bytes, but in proc
// mode it is read from a file.
const maxCommLen = 64

func newProcessTable(max int, idle time.Duration) *processTable {
	return &processTable{max: max, idle: idle, now: time.Now, names: map[string]*processCount{}}
}

func (p *processTable) add(name string, n uint64) {
	name = collector.LabelValue(name, maxCommLen)
	if name == "" || name == "other" { // a process named "other" is indistinguishable from the remainder
		p.other += n
		return
	}
	now := p.now()
	if c, ok := p.names[name]; ok {
		c.n += n
		c.last = now
		return
	}
	if len(p.names) >= p.max {
		var oldest string
		var at time.Time
		for k, c := range p.names {
			if oldest == "" || c.last.Before(at) {
				oldest, at = k, c.last
			}
		}
		if oldest == "" || now.Sub(at) < p.idle {
			p.other += n
			return
		}
		delete(p.names, oldest)
	}
	p.names[name] = &processCount{n: n, last: now}
}

func (p *processTable) addOther(n uint64) { p.other += n }

func (p *processTable) send(ch chan<- prometheus.Metric) {
	names := make([]string, 0, len(p.names))
	for k := range p.names {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		processLookupsDesc.Send(ch, float64(p.names[k].n), k)
	}
	processLookupsDesc.Send(ch, float64(p.other), "other")
}
