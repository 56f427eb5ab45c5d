package dns

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

// processTable is the bounded table of per-process lookup counts
// (proclabel.Table: at most --dns.max-processes series, the rest
// comm="other"). Not safe for concurrent use.
type processTable struct {
	*proclabel.Table[processCount]
}

// processKey is a series' labels: the process's comm, what a JVM runs
// (proclabel.Main; "" for other processes) and its cgroup's name
// (proclabel.Cgroup).
type processKey struct{ comm, main, cgroup string }

func (k processKey) labels() proclabel.Key {
	return proclabel.Key{Comm: k.comm, Main: k.main, Cgroup: k.cgroup}
}

type processCount struct {
	n       uint64
	queries [numQTypes]uint64
}

func newProcessTable(size int, idle time.Duration) *processTable {
	return &processTable{proclabel.NewTable[processCount](size, idle)}
}

// add counts n lookups (connect/sendmsg to port 53) of process k.
func (p *processTable) add(k processKey, n uint64) { p.Entry(k.labels()).n += n }

// addQueries counts n queries of label index qtype sent by process k.
func (p *processTable) addQueries(k processKey, qtype int, n uint64) {
	p.Entry(k.labels()).queries[qtype] += n
}

func (p *processTable) addOther(n uint64) { p.Other().n += n }

// send sends the series in no particular order: the exporter's gatherer
// sorts every family.
func (p *processTable) send(ch chan<- prometheus.Metric) {
	p.Each(func(k proclabel.Key, c *processCount) {
		processLookupsDesc.Send(ch, float64(c.n), k.Comm, k.Main, k.Cgroup)
		for q, n := range c.queries {
			if n > 0 {
				processQueriesDesc.Send(ch, float64(n), k.Comm, k.Main, k.Cgroup, qtypeNames[q])
			}
		}
	})
}
