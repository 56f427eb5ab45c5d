package collectortest

import (
	"testing"
	"time"
)

// WaitFor polls cond until it returns nil, every 20 ms for the first
// second and every 200 ms after, and fails the test with what and cond's
// last error once limit has passed. It is for real sockets and processes,
// which keep real time; clock-driven code is tested with testing/synctest.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() error) {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return
		}
		elapsed := time.Since(start)
		if elapsed > limit {
			t.Fatalf("waited %v for %s: %v", limit, what, err)
		}
		if elapsed < time.Second {
			time.Sleep(20 * time.Millisecond)
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Advance moves the fake clock of the testing/synctest bubble the caller
// runs in by d, once every other goroutine of the bubble is blocked: what
// a clock-driven test calls instead of waiting. Outside a bubble it would
// really sleep; call it only inside synctest.Test.
func Advance(d time.Duration) {
	time.Sleep(d) // in a bubble: the fake clock, no real time passes
}
