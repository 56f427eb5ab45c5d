package collector

import (
	"context"
	"errors"
	"time"
)

// Backoff is the wait between two attempts of background work (a reader
// of a source, a periodic pass, a sample of a remote target): Min after the
// first failure, doubling after each further one up to Max, and Min again
// after a success (Retry: once an attempt got its source open).
type Backoff struct{ Min, Max time.Duration }

// Delay is the wait after the n-th failure in a row (n >= 1): Min doubled
// n-1 times, at most Max.
func (b Backoff) Delay(n int) time.Duration {
	d := b.Min
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// ErrStop, returned (possibly wrapped) by a Retry attempt, ends the loop:
// the source will never work on this host (a kernel whose /dev/kmsg
// cannot be read).
var ErrStop = errors.New("the source cannot work on this host")

// Retry keeps a background source going until ctx is done — the kernel log
// reader, the DNS capture. attempt opens the source, calls opened once it
// is open, reads it until it fails, and returns why it stopped. Retry then
// waits (b) and calls attempt again. Failures are logged through state as
// "<what> cannot be opened" (reason open) or "<what> stopped" (reason
// read), the first open after a failure as "<what> open again"; the
// attempt logs what only it knows (what a first open means, what is
// lost). An attempt whose error wraps ErrStop ends the loop.
func Retry(ctx context.Context, b Backoff, state *StateLog, what string, attempt func(ctx context.Context, opened func()) error) {
	failures := 0
	for ctx.Err() == nil {
		open := false
		err := attempt(ctx, func() {
			open = true
			failures = 0
			state.OK(what + " open again")
		})
		if ctx.Err() != nil || errors.Is(err, ErrStop) {
			return
		}
		failures++
		wait := b.Delay(failures)
		if open {
			state.Failed(what+" stopped; reopening with backoff", "read", err, "retry_in", wait)
		} else {
			state.Failed(what+" cannot be opened; retrying with backoff", "open", err, "retry_in", wait)
		}
		if !Sleep(ctx, wait) {
			return
		}
	}
}

// Sleep waits for d and reports true, or returns false as soon as ctx
// ends, so a shutdown never waits out a backoff.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
