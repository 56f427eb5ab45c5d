package proclabel

import (
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
)

// Key is a process's series labels: its comm, what a JVM runs (Main; ""
// for other processes) and its cgroup's name (Cgroup).
type Key struct{ Comm, Main, Cgroup string }

// OtherKey labels the remainder: processes without a series of their own.
var OtherKey = Key{"other", "", "other"}

// Table turns per-process counts (V, one per series) into bounded series:
// at most max processes (Key) have their own; the rest count as OtherKey.
// When the table is full, a new process takes the place of the one idle
// longest if that one has been idle for idle — so a JVM that starts a
// storm after a quiet hour gets a series. A process that loses its place
// stops being exported (its series goes stale); its past counts are not
// moved to "other". Label values are bounded (collector.LabelValue) on the
// way in. Not safe for concurrent use.
type Table[V any] struct {
	max   int
	idle  time.Duration
	names map[Key]*slot[V]
	other V
}

type slot[V any] struct {
	v    V
	last time.Time
}

// NewTable returns a table of at most size processes; idle (positive) is
// how long a process must have had nothing counted to give its place up.
func NewTable[V any](size int, idle time.Duration) *Table[V] {
	return &Table[V]{max: size, idle: idle, names: map[Key]*slot[V]{}}
}

// Entry returns the counts of process k, admitting it if there is room
// (or an idle process to replace), else the "other" counts. A process
// without a comm, or named "other" (indistinguishable from the
// remainder), counts as other; one without a cgroup name is "unknown".
func (t *Table[V]) Entry(k Key) *V {
	k = Key{collector.Label(k.Comm), collector.LabelValue(k.Main, MaxMainLen), collector.LabelValue(k.Cgroup, MaxCgroupLen)}
	if k.Comm == "" || k.Comm == OtherKey.Comm {
		return &t.other
	}
	if k.Cgroup == "" {
		k.Cgroup = Unknown
	}
	now := time.Now()
	if s, ok := t.names[k]; ok {
		s.last = now
		return &s.v
	}
	if len(t.names) >= t.max {
		oldest, at := Key{}, now // idle is positive: at == now admits nothing
		for key, s := range t.names {
			if s.last.Before(at) {
				oldest, at = key, s.last
			}
		}
		if now.Sub(at) < t.idle {
			return &t.other
		}
		delete(t.names, oldest)
	}
	s := &slot[V]{last: now}
	t.names[k] = s
	return &s.v
}

// Other returns the remainder's counts.
func (t *Table[V]) Other() *V { return &t.other }

// Lookup returns the counts of process k (labels as Entry stored them)
// without admitting it or marking it active.
func (t *Table[V]) Lookup(k Key) (*V, bool) {
	s, ok := t.names[k]
	if !ok {
		return nil, false
	}
	return &s.v, true
}

// Len is the number of processes with a series of their own.
func (t *Table[V]) Len() int { return len(t.names) }

// Each calls fn for every process with a series of its own, in no
// particular order (the exporter's gatherer sorts every family), then for
// OtherKey.
func (t *Table[V]) Each(fn func(Key, *V)) {
	for k, s := range t.names {
		fn(k, &s.v)
	}
	fn(OtherKey, &t.other)
}
