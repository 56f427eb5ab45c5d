package resplimit

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// Options configure a Conn.
type Options struct {
	// Limit is the budget of the replies to one command or pipeline
	// (bytes, as charged by Lexer); it must be positive.
	Limit int64
	// HoldAbove: bulk strings announced larger are handed to the reader
	// only once complete (HoldAbove, the constant, is a good value); 0
	// hands every byte over as it arrives.
	HoldAbove int64
	// Stream, if set, is the command whose reply is streamed.
	Stream *Stream
	// OnLimit, if set, is called once when a reply breaks its limit.
	OnLimit func()
	// Budget, if set, bounds the held bulk strings of every connection
	// that shares it: a held bulk string takes its size when its header
	// arrives and gives it back once the reader has taken all of it (or
	// the connection is closed); one that finds no room before the read
	// deadline fails the read with remote.ErrBudget and is closed.
	Budget *remote.Budget
	// OnBudget, if set, is called when a read fails with remote.ErrBudget.
	OnBudget func()
}

// Conn is a net.Conn whose reads are lexed against a budget; a Write
// starts a new command's. When the budget or the protocol is broken, the
// read fails and the connection is closed.
type Conn struct {
	net.Conn
	lex      Lexer
	stream   *Stream
	reset    atomic.Bool            // set by Write, applied by the next Read
	armed    atomic.Pointer[armedW] // the sink for the reply to the command just written
	onLimit  func()
	onBudget func()
	deadline atomic.Pointer[time.Time] // the last read deadline set

	// taken is what the held bulk strings hold of Options.Budget; a wait
	// for it ends at the read deadline or on Close (stop).
	mu     sync.Mutex
	taken  remote.Hold
	closed bool
	wait   context.Context
	stop   context.CancelFunc

	// The read side; go-redis reads a connection from one goroutine.
	out  []byte // lexed bytes the reader may take now (a released hold, emptyBulk)
	hold []byte // lexed bytes withheld until the held bulk string they end in is complete
	sink Sink   // the sink of the reply being streamed
	rerr error  // a read error to return once out is drained
}

type armedW struct{ sink Sink }

// NewConn wraps c. The result implements syscall.Conn when c does, for
// go-redis' idle-connection check (a peek, which the lexer still sees).
func NewConn(c net.Conn, o Options) net.Conn {
	lc := &Conn{Conn: c, lex: Lexer{Limit: o.Limit, HoldAbove: o.HoldAbove}, stream: o.Stream,
		onLimit: o.OnLimit, onBudget: o.OnBudget, taken: o.Budget.NewHold()}
	lc.wait, lc.stop = context.WithCancel(context.Background())
	if sc, ok := c.(syscall.Conn); ok {
		return &sysConn{Conn: lc, sc: sc}
	}
	return lc
}

func (c *Conn) Read(p []byte) (int, error) {
	if c.reset.Swap(false) {
		c.lex.Reset()
		if a := c.armed.Swap(nil); a != nil && c.lex.AtBoundary() && len(c.hold) == 0 && len(c.out) == 0 {
			c.sink = a.sink
			c.lex.StreamNext(c.stream.limit)
		}
	}
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			if len(c.out) == 0 {
				c.out = nil // a released hold can be large: do not keep it
				if len(c.hold) == 0 && !c.lex.Holding() {
					c.giveBack()
				}
			}
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		if len(p) == 0 {
			return 0, nil
		}
		n, err := c.Conn.Read(p)
		k := 0
		if n > 0 {
			var lerr error
			if k, lerr = c.take(p[:n]); lerr != nil {
				_ = c.Close()
				if errors.Is(lerr, ErrTooLarge) && c.onLimit != nil {
					c.onLimit()
				}
				c.rerr, c.out, c.hold, c.sink = lerr, nil, nil, nil
				return 0, lerr
			}
		}
		if err != nil && (k > 0 || len(c.out) > 0) {
			c.rerr, err = err, nil // after what was read before it
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}

// take lexes b, the bytes just read into the reader's buffer, and returns
// how many of them, from the start, the reader may take now. The others
// are withheld (c.hold), streamed to the sink, or queued after those
// (c.out); the order of the bytes the reader sees is the stream's, with a
// streamed payload replaced by an empty bulk string.
func (c *Conn) take(b []byte) (int, error) {
	k, inPlace := 0, true // inPlace: nothing of b was diverted yet
	deliver := func(seg []byte) {
		if inPlace {
			k += len(seg)
		} else {
			c.out = append(c.out, seg...)
		}
	}
	for len(b) > 0 {
		switch {
		case c.lex.Streaming():
			left := c.lex.PayloadLeft()
			n := int(min(int64(len(b)), left))
			data := int(min(int64(n), max(left-2, 0))) // the last two bytes are the CRLF
			if data > 0 {
				if _, err := c.sink.Write(b[:data]); err != nil {
					return 0, err
				}
			}
			if _, err := c.lex.Next(b[:n]); err != nil {
				return 0, err
			}
			b, inPlace = b[n:], false
			if !c.lex.Streaming() {
				c.sink = nil
				c.out = append(c.out, emptyBulk...)
			}
		case c.lex.StreamPending():
			// The first value of the streamed command's reply is withheld
			// until it shows whether it is a bulk string: its header must
			// not reach go-redis, which would allocate what it announces.
			if _, err := c.lex.Next(b[:1]); err != nil {
				return 0, err
			}
			c.hold = grow(c.hold, b[:1])
			b, inPlace = b[1:], false
			switch {
			case c.lex.Streaming():
				c.hold = nil // the header: go-redis reads emptyBulk instead
				c.sink.Begin(c.lex.PayloadLeft() - 2)
			case !c.lex.StreamPending(): // an error reply, a null: the reader's
				c.sink = nil
				c.release()
			}
		default:
			wasHolding := c.lex.Holding()
			n, err := c.lex.Next(b)
			if err != nil {
				return 0, err
			}
			seg := b[:n]
			b = b[n:]
			switch {
			case wasHolding: // a held payload, and what followed it
				c.hold = grow(c.hold, seg)
				inPlace = false
				if !c.lex.Holding() {
					c.release()
				}
			case c.lex.Holding(): // seg ends with the LF of a held bulk string's header
				if err := c.takeBudget(c.lex.PayloadLeft()); err != nil {
					return 0, err
				}
				deliver(seg[:n-1])
				c.hold = grow(c.hold, seg[n-1:])
				inPlace = false
			default:
				deliver(seg)
			}
		}
	}
	return k, nil
}

// grow appends p to b, doubling b's capacity when it is full: append grows
// large slices by a quarter at a time, which for a held bulk string of
// 1 MiB allocates 5 MiB in all; doubling allocates at most 2 MiB.
func grow(b, p []byte) []byte {
	if len(b)+len(p) > cap(b) {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+len(p), 4<<10))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

// release queues the withheld bytes for the reader.
func (c *Conn) release() {
	if len(c.out) == 0 {
		c.out = c.hold
	} else {
		c.out = append(c.out, c.hold...)
	}
	c.hold = nil
}

func (c *Conn) Write(p []byte) (int, error) {
	var a *armedW
	if c.stream != nil {
		if s := c.stream.sinkFor(p); s != nil {
			a = &armedW{s}
		}
	}
	c.armed.Store(a)
	c.reset.Store(true)
	return c.Conn.Write(p)
}

// takeBudget takes n bytes from the shared budget, waiting until the read
// deadline at most.
func (c *Conn) takeBudget(n int64) error {
	ctx := c.wait
	if d := c.deadline.Load(); d != nil && !d.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, *d)
		defer cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	err := c.taken.Take(ctx, n, 0)
	switch {
	case err != nil && c.wait.Err() != nil:
		return net.ErrClosed // closed while it waited
	case err != nil && c.onBudget != nil:
		c.onBudget()
	}
	return err
}

// giveBack returns the budget once the reader has taken every held byte.
func (c *Conn) giveBack() {
	c.mu.Lock()
	c.taken.Release()
	c.mu.Unlock()
}

// SetDeadline and SetReadDeadline record the deadline that bounds the wait
// for budget.
func (c *Conn) SetDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetReadDeadline(t)
}

// Close closes the connection, ends a wait for budget and gives it back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.stop()
	c.mu.Lock()
	c.closed = true
	c.taken.Release()
	c.mu.Unlock()
	return err
}

type sysConn struct {
	*Conn
	sc syscall.Conn
}

func (s *sysConn) SyscallConn() (syscall.RawConn, error) { return s.sc.SyscallConn() }
