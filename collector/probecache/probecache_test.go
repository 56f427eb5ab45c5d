package probecache

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// value records what the cache did to it.
type value struct {
	name   string
	mu     sync.Mutex
	busy   bool // a scrape holds the connection
	conn   bool
	closed chan struct{}
}

func newValue(name string) *value { return &value{name: name, conn: true, closed: make(chan struct{})} }

func (v *value) hasConn() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.conn
}

func hooks() Hooks[*value] {
	return Hooks[*value]{
		Close: func(v *value) { close(v.closed) },
		DropConn: func(v *value) bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			if v.busy {
				return false
			}
			v.conn = false
			return true
		},
	}
}

func isClosed(t *testing.T, v *value) bool {
	t.Helper()
	select {
	case <-v.closed:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// The limits of the Redis module: 3 targets, 2 connections.
var limits = Limits{MaxTargets: 3, Idle: 10 * time.Minute, MaxConns: 2, ConnIdle: 2 * time.Minute}

func TestCacheKeepsOneValuePerKey(t *testing.T) {
	c := New(limits, hooks())
	now := time.Unix(1e9, 0)
	a, err := c.Get("a", now, func() (*value, error) { return newValue("a"), nil })
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.Get("a", now.Add(time.Second), func() (*value, error) { return newValue("a2"), nil })
	if again != a {
		t.Errorf("second Get made %q, want the cached %q", again.name, a.name)
	}
	bad := errors.New("refused")
	if _, err := c.Get("b", now, func() (*value, error) { return nil, bad }); !errors.Is(err, bad) {
		t.Errorf("Get = %v, want create's error", err)
	}
	if n := c.Len(); n != 1 {
		t.Errorf("%d cached after a failed create, want 1", n)
	}
}

// Beyond MaxTargets the least recently probed target goes, and beyond
// MaxConns the least recently probed keep their state but lose their
// connection, unless a scrape holds it.
func TestCacheEvictsLeastRecentlyProbed(t *testing.T) {
	c := New(limits, hooks())
	now := time.Unix(1e9, 0)
	vs := map[string]*value{}
	get := func(k string, at time.Duration) {
		t.Helper()
		if _, err := c.Get(k, now.Add(at), func() (*value, error) { vs[k] = newValue(k); return vs[k], nil }); err != nil {
			t.Fatal(err)
		}
	}
	get("a", 0)
	get("b", time.Second)
	vs["a"].busy = true
	get("c", 2*time.Second) // a is the oldest beyond 2 connections, but busy
	if !vs["a"].hasConn() || !vs["b"].hasConn() || !vs["c"].hasConn() {
		t.Errorf("connections a %v b %v c %v, want all three (a busy)", vs["a"].hasConn(), vs["b"].hasConn(), vs["c"].hasConn())
	}
	vs["a"].busy = false
	get("b", 3*time.Second)
	if vs["a"].hasConn() || !vs["b"].hasConn() || !vs["c"].hasConn() {
		t.Errorf("connections a %v b %v c %v, want b and c", vs["a"].hasConn(), vs["b"].hasConn(), vs["c"].hasConn())
	}
	get("d", 4*time.Second)
	if !isClosed(t, vs["a"]) {
		t.Error("a, the least recently probed of 4, is not closed")
	}
	if n := c.Len(); n != 3 {
		t.Errorf("%d cached, want 3", n)
	}
	for _, k := range []string{"b", "c", "d"} {
		select {
		case <-vs[k].closed:
			t.Errorf("%s closed", k)
		default:
		}
	}
}

// A target not probed for ConnIdle loses its connection and keeps its
// state; one not probed for Idle is dropped.
func TestCacheIdle(t *testing.T) {
	c := New(limits, hooks())
	now := time.Unix(1e9, 0)
	v, _ := c.Get("a", now, func() (*value, error) { return newValue("a"), nil })
	c.Trim(now.Add(limits.ConnIdle + time.Second))
	if v.hasConn() || c.Len() != 1 {
		t.Errorf("after ConnIdle: connection %v, %d cached; want none, 1", v.hasConn(), c.Len())
	}
	c.Trim(now.Add(limits.Idle + time.Second))
	if c.Len() != 0 || !isClosed(t, v) {
		t.Errorf("after Idle: %d cached, want 0 and the value closed", c.Len())
	}
}

// Without DropConn every cached target keeps its connection until it is
// dropped; Reset drops them all.
func TestCacheWithoutConnLimit(t *testing.T) {
	c := New(Limits{MaxTargets: 2, Idle: time.Minute}, Hooks[*value]{Close: func(v *value) { close(v.closed) }})
	now := time.Unix(1e9, 0)
	var vs []*value
	for i := range 3 {
		v, _ := c.Get(fmt.Sprint(i), now.Add(time.Duration(i)*time.Second), func() (*value, error) { return newValue(fmt.Sprint(i)), nil })
		vs = append(vs, v)
	}
	if !isClosed(t, vs[0]) || c.Len() != 2 {
		t.Errorf("%d cached, want 2 and the first closed", c.Len())
	}
	c.Reset()
	if c.Len() != 0 || !isClosed(t, vs[1]) || !isClosed(t, vs[2]) {
		t.Errorf("after Reset: %d cached, want 0 and every value closed", c.Len())
	}
}

// fakeTicker stands for the background trim's clock: the test sets the
// time and delivers the ticks.
type fakeTicker struct {
	mu      sync.Mutex
	now     time.Time
	periods []time.Duration
	ticks   chan time.Time
	stopped chan struct{} // closed when the trim stops its ticker
}

func useFakeTicker(c *Cache[*value], now time.Time) *fakeTicker {
	f := &fakeTicker{now: now}
	c.now = func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.now
	}
	c.ticker = func(d time.Duration) (<-chan time.Time, func()) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.periods = append(f.periods, d)
		f.ticks, f.stopped = make(chan time.Time), make(chan struct{})
		return f.ticks, func() { close(f.stopped) }
	}
	return f
}

// tick sets the time to at and delivers a tick; it returns once the trim
// it caused has finished (the loop took a second tick, or stopped).
func (f *fakeTicker) tick(t *testing.T, at time.Time) {
	t.Helper()
	f.mu.Lock()
	f.now = at
	ticks, stopped := f.ticks, f.stopped
	f.mu.Unlock()
	for range 2 {
		select {
		case ticks <- at:
		case <-stopped:
			return
		case <-time.After(5 * time.Second):
			t.Fatal("the background trim does not take ticks")
		}
	}
}

func (f *fakeTicker) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.stopped:
		return false
	default:
		return true
	}
}

// Without any probe coming in, the background trim closes a connection
// idle for ConnIdle and drops a target idle for Idle at its next tick
// (review 3, item 6); it stops when the cache is empty and starts again
// with the next target; Reset stops it.
func TestCacheBackgroundTrim(t *testing.T) {
	c := New(limits, hooks())
	start := time.Unix(1e9, 0)
	f := useFakeTicker(c, start)
	v, _ := c.Get("a", start, func() (*value, error) { return newValue("a"), nil })
	if len(f.periods) != 1 || f.periods[0] != limits.ConnIdle/4 {
		t.Fatalf("tickers started with periods %v, want one of %v (ConnIdle/4)", f.periods, limits.ConnIdle/4)
	}
	period := f.periods[0]
	f.tick(t, start.Add(limits.ConnIdle-time.Second))
	if !v.hasConn() {
		t.Error("connection closed before ConnIdle")
	}
	f.tick(t, start.Add(limits.ConnIdle+period))
	if v.hasConn() || c.Len() != 1 {
		t.Errorf("one tick after ConnIdle: connection %v, %d cached; want none, 1", v.hasConn(), c.Len())
	}
	if !f.running() {
		t.Error("the trim stopped with a target cached")
	}
	f.tick(t, start.Add(limits.Idle+period))
	if c.Len() != 0 || !isClosed(t, v) {
		t.Errorf("one tick after Idle: %d cached, want 0 and the value closed", c.Len())
	}
	if f.running() {
		t.Error("the trim still runs with the cache empty")
	}
	later := start.Add(time.Hour)
	c.Get("b", later, func() (*value, error) { return newValue("b"), nil })
	c.Get("c", later, func() (*value, error) { return newValue("c"), nil })
	if len(f.periods) != 2 || !f.running() {
		t.Fatalf("%d tickers started, running %v; want a second one, running", len(f.periods), f.running())
	}
	c.Reset()
	select {
	case <-f.stopped:
	case <-time.After(5 * time.Second):
		t.Error("Reset did not stop the trim")
	}
}
