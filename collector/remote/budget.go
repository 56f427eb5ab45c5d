package remote

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// ErrBudget is returned (wrapped) when a reply could not get its bytes
// from a Budget before its deadline, or needs more than the whole budget.
var ErrBudget = errors.New("reply memory budget exhausted")

// Budget bounds the bytes of replies that every connection sharing it
// holds at once; without it a protocol client's transient memory is the
// replies read at once (one per /probe request in flight, which nothing
// else bounds) times the reply limit. A reader takes a reply's bytes
// through a Hold before it allocates them and gives them back once the
// reply is parsed; one that cannot get them before its deadline fails with
// ErrBudget and drops its connection (the stream is out of step): that
// target's scrape fails, the others go on. Waiting readers do not read
// their sockets, so their peers wait too (TCP flow control). It is safe for
// concurrent use.
type Budget struct {
	size  int64
	sem   *semaphore.Weighted
	inUse atomic.Int64
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget {
	return &Budget{size: size, sem: semaphore.NewWeighted(size)}
}

// InUse is the number of bytes taken and not given back.
func (b *Budget) InUse() int64 { return b.inUse.Load() }

// Hold is what one reader has taken from a budget; the zero Hold of a nil
// budget takes nothing. Not safe for concurrent use.
type Hold struct {
	b    *Budget
	held int64
}

// NewHold returns an empty hold on b (nil: no budget).
func (b *Budget) NewHold() Hold { return Hold{b: b} }

// Held is the number of bytes the hold has taken.
func (h *Hold) Held() int64 { return h.held }

// Take waits until n more bytes are free or ctx ends, then gives back
// replaced bytes (a buffer the new one replaces, once the new one has its
// own). A reply whose buffers would need more than the whole budget is
// refused at once: it could never fit.
func (h *Hold) Take(ctx context.Context, n, replaced int64) error {
	if h.b == nil {
		return nil
	}
	if h.held+n > h.b.size {
		return fmt.Errorf("%w: a reply buffer of %d bytes (%d already held) does not fit in the %d-byte budget of replies held at once",
			ErrBudget, n, h.held, h.b.size)
	}
	if err := h.b.sem.Acquire(ctx, n); err != nil {
		// The budget is the cause, not the deadline that ended the wait: %v keeps it out of errors.Is.
		return fmt.Errorf("%w: a reply buffer of %d bytes found no room in the %d-byte budget of replies held at once before the deadline (%v)",
			ErrBudget, n, h.b.size, err) //nolint:errorlint // see above
	}
	h.held += n
	h.b.inUse.Add(n)
	if r := min(replaced, h.held-n); r > 0 {
		h.give(r)
	}
	return nil
}

// Give gives back n of the bytes taken (at most what is held).
func (h *Hold) Give(n int64) {
	if h.b != nil {
		h.give(min(n, h.held))
	}
}

func (h *Hold) give(n int64) {
	if n <= 0 {
		return
	}
	h.held -= n
	h.b.inUse.Add(-n)
	h.b.sem.Release(n)
}

// Release gives back everything taken.
func (h *Hold) Release() { h.Give(h.held) }
