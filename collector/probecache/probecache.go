// Package probecache keeps what a /probe module knows of each target
// between requests — its connection, caches and counters — under one
// eviction rule, so that an allowlist pattern wide enough to admit many
// targets costs bounded memory and file descriptors.
//
// The rule, checked at every request and by a background trim every
// Limits.TrimEvery while the cache holds targets: a target not probed for
// Limits.Idle is dropped; beyond Limits.MaxTargets the least recently
// probed targets are dropped. A module whose targets hold a connection can
// also bound the idle connections: only the Limits.MaxConns most recently
// probed targets, probed within Limits.ConnIdle, keep theirs
// (Hooks.DropConn closes the others' and they reconnect on their next
// probe). So after the probes stop, idle connections are closed within
// ConnIdle plus one TrimEvery, and the targets dropped within Idle plus
// one TrimEvery.
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
	// TrimEvery is the period of the background trim. 0: a quarter of
	// ConnIdle (of Idle without ConnIdle), at least a second.
	TrimEvery time.Duration
}

// trimEvery is the background trim's period.
func (l Limits) trimEvery() time.Duration {
	if l.TrimEvery > 0 {
		return l.TrimEvery
	}
	d := l.Idle
	if l.ConnIdle > 0 {
		d = min(d, l.ConnIdle)
	}
	return max(d/4, time.Second)
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
	// now and ticker are the background trim's clock; tests replace them.
	now    func() time.Time
	ticker func(time.Duration) (<-chan time.Time, func())

	mu      sync.Mutex
	entries map[string]*entry[V]
	// stopTrim stops the background trim; nil while none runs. One
	// goroutine per cache, started by the Get that caches the first
	// target; it ends when the cache is empty, or at Reset.
	stopTrim chan struct{}
}

type entry[V any] struct {
	v          V
	lastProbed time.Time
	conn       bool // the value may hold a connection
}

// New returns an empty cache.
func New[V any](limits Limits, hooks Hooks[V]) *Cache[V] {
	return &Cache[V]{limits: limits, hooks: hooks, entries: map[string]*entry[V]{},
		now: time.Now, ticker: realTicker}
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
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
	if c.stopTrim == nil && len(c.entries) > 0 {
		c.stopTrim = make(chan struct{})
		ticks, stopTicker := c.ticker(c.limits.trimEvery())
		go c.trimLoop(ticks, stopTicker, c.stopTrim)
	}
	return e.v, nil
}

// trimLoop trims at every tick until the cache is empty or stop is
// closed, so idle limits hold without probes coming in.
func (c *Cache[V]) trimLoop(ticks <-chan time.Time, stopTicker func(), stop chan struct{}) {
	defer stopTicker()
	for {
		select {
		case <-stop:
			return
		case <-ticks:
		}
		c.mu.Lock()
		c.trim(c.now())
		if len(c.entries) == 0 && c.stopTrim == stop {
			c.stopTrim = nil
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// Trim applies the limits as of now; Get does it at every request, and a
// background trim every Limits.TrimEvery.
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

// Reset drops every target and stops the background trim.
func (c *Cache[V]) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		c.drop(k, e)
	}
	if c.stopTrim != nil {
		close(c.stopTrim)
		c.stopTrim = nil
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
