package probecache

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// value records what the cache did to it.
type value struct {
	name   string
	mu     sync.Mutex
	busy   bool // a scrape holds the connection: CloseIdle refuses
	conn   bool
	closed bool
}

func newValue(name string) *value { return &value{name: name, conn: true} }

func (v *value) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	return nil
}

func (v *value) CloseIdle() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.busy {
		return false
	}
	v.conn = false
	return true
}

func (v *value) hasConn() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.conn
}

// isClosed reports whether the cache closed v; Close runs in a goroutine
// of its own, so the bubble is let settle first.
func (v *value) isClosed() bool {
	synctest.Wait()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closed
}

var limits = Limits{MaxTargets: 3, Idle: 10 * time.Minute, MaxConns: 2, ConnIdle: 2 * time.Minute}

// values keeps the values a test's Gets created, by name.
type values map[string]*value

func (vs values) get(c *Cache[string, *value], k string) *value {
	return c.Get(k, func() *value { vs[k] = newValue(k); return vs[k] })
}

// drain lets the background trim empty the cache, after which its
// goroutine ends and the bubble can finish.
func drain(t *testing.T, c *Cache[string, *value]) {
	t.Helper()
	collectortest.Advance(limits.Idle + limits.trimEvery())
	synctest.Wait()
	if n := c.Len(); n != 0 {
		t.Errorf("%d targets kept after %v without a Get", n, limits.Idle+limits.trimEvery())
	}
}

// One value per key: a second Get of a key returns the kept value and
// does not create another.
func TestCacheKeepsOneValuePerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New[string, *value](limits)
		vs := values{}
		a := vs.get(c, "a")
		if again := c.Get("a", func() *value { return newValue("a2") }); again != a {
			t.Errorf("second Get made %q, want the kept %q", again.name, a.name)
		}
		if n := c.Len(); n != 1 {
			t.Errorf("%d kept, want 1", n)
		}
		drain(t, c)
	})
}

// Beyond MaxTargets the least recently used target goes (and is closed);
// beyond MaxConns the least recently used keep their state but lose their
// connection, unless a scrape holds it, which keeps it to a later trim.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New[string, *value](limits)
		vs := values{}
		vs.get(c, "a")
		collectortest.Advance(time.Second)
		vs.get(c, "b")
		collectortest.Advance(time.Second)
		vs["a"].busy = true
		vs.get(c, "c") // a is the oldest beyond 2 connections, but busy
		if !vs["a"].hasConn() || !vs["b"].hasConn() || !vs["c"].hasConn() {
			t.Errorf("connections a %v b %v c %v, want all three (a busy)", vs["a"].hasConn(), vs["b"].hasConn(), vs["c"].hasConn())
		}
		vs["a"].busy = false
		collectortest.Advance(time.Second)
		vs.get(c, "b")
		if vs["a"].hasConn() || !vs["b"].hasConn() || !vs["c"].hasConn() {
			t.Errorf("connections a %v b %v c %v, want b and c", vs["a"].hasConn(), vs["b"].hasConn(), vs["c"].hasConn())
		}
		collectortest.Advance(time.Second)
		vs.get(c, "d")
		if !vs["a"].isClosed() {
			t.Error("a, the least recently used of 4, is not closed")
		}
		if n := c.Len(); n != 3 {
			t.Errorf("%d kept, want 3", n)
		}
		for _, k := range []string{"b", "c", "d"} {
			if vs[k].isClosed() {
				t.Errorf("%s closed", k)
			}
		}
		drain(t, c)
	})
}

// Without any Get coming in, the background trim closes the connection of
// a target idle for ConnIdle (keeping the target) and drops a target idle
// for Idle, each at its next tick; it ends when the cache is empty and
// starts again with the next target.
func TestCacheBackgroundTrim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New[string, *value](limits)
		period := limits.trimEvery()
		if period != limits.ConnIdle/4 {
			t.Fatalf("trim period %v, want %v (a quarter of ConnIdle)", period, limits.ConnIdle/4)
		}
		vs := values{}
		v := vs.get(c, "a")
		collectortest.Advance(limits.ConnIdle - time.Second)
		synctest.Wait()
		if !v.hasConn() {
			t.Error("connection closed before ConnIdle")
		}
		collectortest.Advance(time.Second + period)
		synctest.Wait()
		if v.hasConn() || c.Len() != 1 {
			t.Errorf("a trim period after ConnIdle: connection %v, %d kept; want none, 1", v.hasConn(), c.Len())
		}
		collectortest.Advance(limits.Idle - limits.ConnIdle)
		synctest.Wait()
		if c.Len() != 0 || !v.isClosed() {
			t.Errorf("a trim period after Idle: %d kept, want 0 and the value closed", c.Len())
		}
		c.mu.Lock()
		trimming := c.trimming
		c.mu.Unlock()
		if trimming {
			t.Error("the trim still runs with the cache empty")
		}
		// The next target starts it again, and it empties the cache again.
		vs.get(c, "b")
		c.mu.Lock()
		trimming = c.trimming
		c.mu.Unlock()
		if !trimming {
			t.Error("no trim runs with a target kept")
		}
		drain(t, c)
	})
}

// A value without connections to close (no CloseIdle) is only dropped by
// the target limits.
func TestCacheValueWithoutConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New[string, plainValue](Limits{MaxTargets: 2, Idle: time.Minute, MaxConns: 1, ConnIdle: time.Second})
		closed := make(chan string, 3)
		for i := range 3 {
			name := fmt.Sprint(i)
			c.Get(name, func() plainValue { return plainValue{name, closed} })
			collectortest.Advance(time.Second)
		}
		synctest.Wait()
		if len(closed) != 1 || <-closed != "0" || c.Len() != 2 {
			t.Errorf("%d kept, want 2 and the first closed", c.Len())
		}
		collectortest.Advance(2 * time.Minute)
		synctest.Wait()
		if len(closed) != 2 || c.Len() != 0 {
			t.Errorf("after Idle: %d kept, %d more closed; want 0 and 2", c.Len(), len(closed))
		}
	})
}

type plainValue struct {
	name   string
	closed chan string
}

func (p plainValue) Close() error { p.closed <- p.name; return nil }
