// Package probecache keeps what a /probe module knows of each target
// between requests — its connection, caches and counters — under one
// eviction rule, so that an allowlist pattern wide enough to admit many
// targets costs bounded memory and file descriptors.
//
// The rule, checked at every request: a target not probed for Limits.Idle
// is dropped; beyond Limits.MaxTargets the least recently probed targets
// are dropped. A module whose targets hold a connection can also bound the
// idle connections: only the Limits.MaxConns most recently probed targets,
// probed within Limits.ConnIdle, keep theirs (Hooks.DropConn closes the
// others' and they reconnect on their next probe).
package probecache

import (
	"slices"
	"sync"
	"time"
)

// Limits bound a Cache. MaxTargets and Idle must be positive.
type Limits struct {
	// MaxTargets is the most targets kept; the least recently probed
	// one goes first.
	MaxTargets int
	// Idle is how long a target is kept after its last probe.
	Idle time.Duration
	// MaxConns is the most targets that keep their connection (the most
	// recently probed ones). 0: every kept target keeps it.
	MaxConns int
	// ConnIdle is how long a target keeps its connection after its last
	// probe. 0: until the target is dropped.
	ConnIdle time.Duration
}

// Hooks release what a cached value holds.
type Hooks[V any] struct {
	// Close releases a dropped value. It runs in its own goroutine, so it
	// may wait for a scrape of the value in progress.
	Close func(V)
	// DropConn closes the value's connection, which its next scrape opens
	// again, and reports whether it did: false while a scrape uses it (a
	// later request retries). Needed only when MaxConns or ConnIdle is set.
	DropConn func(V) bool
}

// Cache holds one value per target key. It is safe for concurrent use.
type Cache[V any] struct {
	limits Limits
	hooks  Hooks[V]

	mu      sync.Mutex
	entries map[string]*entry[V]
}

type entry[V any] struct {
	v          V
	lastProbed time.Time
	conn       bool // the value may hold a connection
}

// New returns an empty cache.
func New[V any](limits Limits, hooks Hooks[V]) *Cache[V] {
	return &Cache[V]{limits: limits, hooks: hooks, entries: map[string]*entry[V]{}}
}

// Get returns the value cached under key, or caches the one create returns
// (create's error is returned and nothing is cached), marks it probed at
// now and applies the limits. create runs under the cache's lock: it must
// not block on the network.
func (c *Cache[V]) Get(key string, now time.Time, create func() (V, error)) (V, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		v, err := create()
		if err != nil {
			return v, err
		}
		e = &entry[V]{v: v}
		c.entries[key] = e
	}
	e.lastProbed, e.conn = now, true
	c.trim(now)
	return e.v, nil
}

// Trim applies the limits as of now; Get does it at every request.
func (c *Cache[V]) Trim(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trim(now)
}

// Len is the number of targets cached.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Reset drops every target.
func (c *Cache[V]) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		c.drop(k, e)
	}
}

// trim drops the targets idle for Idle and the least recently probed ones
// beyond MaxTargets, then closes the connections of targets idle for
// ConnIdle and of the least recently probed ones beyond MaxConns. The
// caller holds c.mu.
func (c *Cache[V]) trim(now time.Time) {
	l := c.limits
	for k, e := range c.entries {
		if now.Sub(e.lastProbed) > l.Idle {
			c.drop(k, e)
		}
	}
	for len(c.entries) > l.MaxTargets { // one at most: a Get adds one
		oldest := ""
		for k, e := range c.entries {
			if oldest == "" || e.lastProbed.Before(c.entries[oldest].lastProbed) {
				oldest = k
			}
		}
		c.drop(oldest, c.entries[oldest])
	}
	if c.hooks.DropConn == nil {
		return
	}
	var connected []*entry[V]
	for _, e := range c.entries {
		switch {
		case !e.conn:
		case l.ConnIdle > 0 && now.Sub(e.lastProbed) > l.ConnIdle:
			e.conn = !c.hooks.DropConn(e.v)
		default:
			connected = append(connected, e)
		}
	}
	if l.MaxConns > 0 && len(connected) > l.MaxConns {
		slices.SortFunc(connected, func(a, b *entry[V]) int { return a.lastProbed.Compare(b.lastProbed) })
		for _, e := range connected[:len(connected)-l.MaxConns] {
			// A value whose scrape is running keeps its connection
			// until a later trim.
			e.conn = !c.hooks.DropConn(e.v)
		}
	}
}

// drop forgets a target and closes its value in the background. The
// caller holds c.mu.
func (c *Cache[V]) drop(k string, e *entry[V]) {
	delete(c.entries, k)
	if c.hooks.Close != nil {
		go c.hooks.Close(e.v)
	}
}
