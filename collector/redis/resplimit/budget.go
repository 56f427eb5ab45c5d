package resplimit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBudget is returned (wrapped) when a held bulk string could not get
// its bytes from the connection's Budget before the read deadline.
var ErrBudget = errors.New("redis reply memory budget exhausted")

// noDeadlineWait is how long a read without a deadline waits for budget.
const noDeadlineWait = 5 * time.Second

// Budget bounds the bytes of held bulk strings (Options.HoldAbove) that
// every Conn sharing it holds at once: each is buffered whole by the Conn
// and then copied whole by go-redis, so without a bound the transient
// memory is the number of connections reading at once times the reply
// limit, whatever the process' memory limit. A Conn takes a held bulk
// string's size from the budget when its header arrives, before reading
// its payload, and gives it back once the reader has taken the whole
// string (or the connection is closed). A Conn that cannot get it before
// its read deadline fails the read with ErrBudget and closes the
// connection: that target's scrape fails, the others go on. Waiting
// readers do not read their sockets, so the servers wait too (TCP flow
// control). It is safe for concurrent use.
type Budget struct {
	size int64
	mu   sync.Mutex
	free int64
	wake chan struct{} // closed, and replaced, whenever bytes are given back
	// Refused counts reads that failed with ErrBudget.
	Refused atomic.Uint64
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget {
	return &Budget{size: size, free: size, wake: make(chan struct{})}
}

// Size is the budget's capacity in bytes.
func (b *Budget) Size() int64 { return b.size }

// InUse is the number of bytes taken and not given back.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size - b.free
}

// take waits until n bytes (at most the budget's size) are free, or until
// deadline (a zero deadline: noDeadlineWait from now), and returns what it
// took. Waiters are not served in order: every reply is at most the
// reply limit, far below the budget, so none waits for a large gap.
func (b *Budget) take(n int64, deadline time.Time) (int64, error) {
	n = min(n, b.size)
	if deadline.IsZero() {
		deadline = time.Now().Add(noDeadlineWait)
	}
	var timer *time.Timer
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return n, nil
		}
		wake := b.wake
		b.mu.Unlock()
		wait := time.Until(deadline)
		if wait <= 0 {
			b.Refused.Add(1)
			return 0, fmt.Errorf("%w: a bulk string of %d bytes found no room in %d bytes of replies held at once by all connections before the read deadline",
				ErrBudget, n, b.size)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-wake:
		case <-timer.C:
		}
	}
}

// give returns n bytes taken before.
func (b *Budget) give(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.free += n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
