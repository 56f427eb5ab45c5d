package remoting

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// ErrBudget is returned (wrapped) when a reply frame could not get the
// bytes of its buffer from the client's Budget before the request's
// deadline, or needs more than the whole budget.
var ErrBudget = errors.New("remoting reply memory budget exhausted")

// Budget bounds the bytes of reply-frame buffers that every Client sharing
// it holds at once. Without it the transient memory is the number of
// requests reading at once — one per /probe request in flight, which
// nothing else bounds — times the frame limit. A frame's buffer is taken
// from the budget as it is allocated (readFrame: the first chunk, then each
// doubling, which gives back the buffer it replaces once it has its own
// bytes), so a peer that announces a large frame and stalls holds only
// what it made the client allocate, and a complete frame of n bytes holds
// n, and at most 1.5n while it grows. The bytes are
// given back when the reply has been decoded and parsed. A request that
// cannot get them before its deadline fails with ErrBudget and closes its
// connection (the stream is out of step); the other requests go on.
// Waiting requests do not read their sockets, so their peers wait too (TCP
// flow control). It is safe for concurrent use.
type Budget struct {
	size  int64
	sem   *semaphore.Weighted
	inUse atomic.Int64
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget {
	return &Budget{size: size, sem: semaphore.NewWeighted(size)}
}

// Size is the budget's capacity in bytes.
func (b *Budget) Size() int64 { return b.size }

// InUse is the number of bytes taken and not given back.
func (b *Budget) InUse() int64 { return b.inUse.Load() }

// frameHold is what one request has taken from a budget.
type frameHold struct {
	b    *Budget
	held int64
}

// take waits until n more bytes are free or ctx ends, then gives back
// replaced bytes (the buffer the new one replaces). A frame whose buffers
// would need more than the whole budget is refused at once: it could never
// fit.
func (h *frameHold) take(ctx context.Context, n, replaced int) error {
	if h.b == nil {
		return nil
	}
	if h.held+int64(n) > h.b.size {
		return fmt.Errorf("%w: a frame buffer of %d bytes (%d already held) does not fit in the %d-byte budget of reply frames read at once",
			ErrBudget, n, h.held, h.b.size)
	}
	if err := h.b.sem.Acquire(ctx, int64(n)); err != nil {
		return fmt.Errorf("%w: a frame buffer of %d bytes found no room in the %d-byte budget of reply frames read at once before the deadline (%v)",
			ErrBudget, n, h.b.size, err)
	}
	h.held += int64(n)
	h.b.inUse.Add(int64(n))
	if r := min(int64(replaced), h.held-int64(n)); r > 0 {
		h.held -= r
		h.b.inUse.Add(-r)
		h.b.sem.Release(r)
	}
	return nil
}

// release gives back everything taken.
func (h *frameHold) release() {
	if h.b == nil || h.held == 0 {
		return
	}
	h.b.inUse.Add(-h.held)
	h.b.sem.Release(h.held)
	h.held = 0
}
