// Package probecache keeps what /probe knows of each target between
// requests (its collector, with the connection, caches and counters it
// holds) under one eviction rule, so that a wide allowlist costs bounded
// memory and file descriptors. At every Get, and by a background trim while
// the cache holds targets: a target not asked for in Limits.Idle is dropped
// and closed, and beyond Limits.MaxTargets the least recently asked for goes
// first; of those kept, only the Limits.MaxConns most recently asked for,
// within Limits.ConnIdle, keep their connections, the others are told to
// close them (CloseIdle) and reconnect at their next use. Once requests stop,
// idle connections are closed within ConnIdle and targets dropped within
// Idle, each plus one trim period.
package probecache

import (
	"io"
	"slices"
	"sync"
	"time"
)

// Limits bound a Cache. Every field must be positive.
type Limits struct {
	MaxTargets int           // most targets kept
	Idle       time.Duration // how long a target is kept after it was last asked for
	MaxConns   int           // most targets that keep their connections: the most recently asked for
	ConnIdle   time.Duration // how long a target keeps its connections after it was last asked for
}

// trimEvery is the background trim's period: a quarter of the shorter
// idle limit, at least a second.
func (l Limits) trimEvery() time.Duration {
	return max(min(l.Idle, l.ConnIdle)/4, time.Second)
}

// Cache holds one value per key. A dropped value is closed in a goroutine
// of its own, so Close may wait for a use in progress; a value that is a
// collector.IdleCloser is asked to close its idle connections. It is safe
// for concurrent use.
type Cache[K comparable, V io.Closer] struct {
	limits Limits

	mu       sync.Mutex
	entries  map[K]*entry[V]
	trimming bool // the background trim runs: from the first Get until the cache is empty
}

type entry[V io.Closer] struct {
	v        V
	lastUsed time.Time
	conn     bool // the value may hold connections
}

// New returns an empty cache.
func New[K comparable, V io.Closer](limits Limits) *Cache[K, V] {
	return &Cache[K, V]{limits: limits, entries: map[K]*entry[V]{}}
}

// Get returns the value kept under key, or keeps and returns the one
// create makes, marks it used now and applies the limits. create runs
// under the cache's lock: it must not block on the network.
func (c *Cache[K, V]) Get(key K, create func() V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		e = &entry[V]{v: create()}
		c.entries[key] = e
	}
	now := time.Now()
	e.lastUsed, e.conn = now, true
	c.trim(now)
	if !c.trimming {
		c.trimming = true
		go c.trimLoop()
	}
	return e.v
}

// trimLoop trims every trim period until the cache is empty.
func (c *Cache[K, V]) trimLoop() {
	t := time.NewTicker(c.limits.trimEvery())
	defer t.Stop()
	for range t.C {
		c.mu.Lock()
		c.trim(time.Now())
		if len(c.entries) == 0 {
			c.trimming = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// Len is the number of targets kept.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// trim drops the targets idle for Idle and the least recently used beyond
// MaxTargets, then closes the connections of the targets idle for
// ConnIdle and of the least recently used beyond MaxConns. The caller
// holds c.mu.
func (c *Cache[K, V]) trim(now time.Time) {
	l := c.limits
	var oldest K
	var oldestAt time.Time
	for k, e := range c.entries {
		switch {
		case now.Sub(e.lastUsed) > l.Idle:
			c.drop(k, e)
		case oldestAt.IsZero() || e.lastUsed.Before(oldestAt):
			oldest, oldestAt = k, e.lastUsed
		}
	}
	if len(c.entries) > l.MaxTargets { // by one at most: a Get adds one
		c.drop(oldest, c.entries[oldest])
	}
	var connected []*entry[V]
	for _, e := range c.entries {
		switch {
		case !e.conn:
		case now.Sub(e.lastUsed) > l.ConnIdle:
			e.conn = !closeIdle(e.v)
		default:
			connected = append(connected, e)
		}
	}
	if len(connected) > l.MaxConns {
		slices.SortFunc(connected, func(a, b *entry[V]) int { return a.lastUsed.Compare(b.lastUsed) })
		for _, e := range connected[:len(connected)-l.MaxConns] {
			// A value in use keeps its connections until a later trim.
			e.conn = !closeIdle(e.v)
		}
	}
}

// closeIdle closes v's idle connections, if it keeps any, and reports
// whether none is left open.
func closeIdle(v io.Closer) bool {
	if ic, ok := v.(interface{ CloseIdle() bool }); ok {
		return ic.CloseIdle()
	}
	return true
}

// drop forgets a target and closes its value in the background. The
// caller holds c.mu.
func (c *Cache[K, V]) drop(k K, e *entry[V]) {
	delete(c.entries, k)
	go e.v.Close()
}
