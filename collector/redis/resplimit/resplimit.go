// Package resplimit bounds the memory a Redis server can make its client
// commit. go-redis reads a bulk string by allocating the length its header
// announces ("$838860800\r\n") before the first payload byte arrives, and an
// aggregate by allocating a slot per announced element, so a server — or
// anything answering on its port — that announces 800 MB costs 800 MB,
// whatever it sends afterwards. Counting reply bytes after go-redis has
// parsed them is too late.
//
// Conn sits under go-redis' buffered reader: it lexes the RESP stream (RESP2
// and RESP3 type bytes) as it arrives and fails the read that carries a
// header whose announced size, added to what the replies to the last
// command already cost, exceeds the budget. go-redis then never sees the
// header; it gets the error and discards the connection, which Conn has
// already closed.
//
// Within the budget, Conn still does not let go-redis allocate on a promise:
// a bulk string announced larger than HoldAbove is handed over only once all
// of its bytes have arrived (they are buffered as they come), so a server
// that announces a large reply and then stalls costs what it sent, not what
// it announced.
//
// One command's reply may be streamed instead (Stream): its bulk-string
// payload is written to a Sink as it arrives, never held whole, and go-redis
// receives an empty bulk string in its place. That is how a CLIENT LIST of
// 100,000 clients (30–45 MB) is read in a few kB.
//
// What a reply is charged, since the last Write (one command or one
// pipeline): every header and simple-line byte as it arrives; a bulk
// string's announced length (+2 for its CRLF) when its header arrives, its
// payload then being free; an aggregate's announced element count times
// ElementCost (map and attribute entries count twice). A streamed bulk
// string is checked against the Stream's own limit instead. A simple line
// (+, -, :, _, ',', #, '(') longer than MaxLine, a length header longer than
// maxHeader or not a number, and an unknown type byte are protocol errors.
package resplimit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrTooLarge is returned (wrapped) when a reply would exceed the budget.
var ErrTooLarge = errors.New("redis reply larger than the reply limit")

// ErrProtocol is returned (wrapped) for bytes that are not RESP.
var ErrProtocol = errors.New("malformed RESP reply")

// ElementCost is what one announced aggregate element is charged: go-redis
// allocates an interface value (16 bytes) per element before reading it,
// plus the value it boxes.
const ElementCost = 32

// MaxLine bounds a simple string, error, number or double line. Error
// messages and status replies are far shorter; go-redis accumulates a line
// until its CRLF, so an endless line would otherwise grow without bound.
const MaxLine = 64 << 10

// maxHeader bounds a length header: type byte, sign, 19 digits, CR, LF.
const maxHeader = 23

type state uint8

const (
	stType    state = iota // expecting a type byte
	stLine                 // inside a simple line, until LF
	stHeader               // inside a length header, until LF
	stPayload              // skipping a bulk payload and its CRLF
)

// HoldAbove is the default Options.HoldAbove: a bulk string up to this
// size may be allocated by go-redis as soon as its header arrives. Every
// reply a scrape reads except CLIENT LIST (streamed) and INFO is below it.
const HoldAbove = 64 << 10

// payloadMode says what happens to the payload the lexer is skipping.
type payloadMode uint8

const (
	plain    payloadMode = iota
	held                 // a bulk string announced larger than HoldAbove
	streamed             // the streamed bulk string of a Stream's reply
)

// Lexer follows a RESP byte stream and charges it against Limit. The zero
// value with a positive Limit is ready; it is not safe for concurrent use.
type Lexer struct {
	Limit int64 // bytes a command's replies may be charged; must be positive
	// HoldAbove marks bulk strings announced larger than it as held
	// (Holding), so that a reader can withhold them until complete; 0
	// marks none.
	HoldAbove int64

	charged int64
	st      state
	typ     byte  // type byte of the current header or line
	n       int   // bytes of the current line or header, type byte included
	num     int64 // header value so far
	neg     bool  // header value has a minus sign
	cr      bool  // header saw its CR
	payload int64 // payload bytes left to skip
	mode    payloadMode
	// streamLimit, when positive, makes the next value streamed if it is a
	// bulk string (StreamNext); streamTok marks its header.
	streamLimit int64
	streamTok   bool
	err         error // sticky
}

// Reset starts a new command: the charge goes back to zero. The position
// in the stream is kept (a reply is never cut in two by a command).
func (l *Lexer) Reset() {
	if l.err == nil {
		l.charged = 0
	}
}

// StreamNext makes the next value of the stream, when it is a bulk string
// of at most limit bytes, streamed: its length is checked against limit
// instead of being charged, and Streaming reports its payload. A bulk
// string over limit is an ErrTooLarge error. The value must start at the
// current position (AtBoundary).
func (l *Lexer) StreamNext(limit int64) { l.streamLimit = max(limit, 1) }

// AtBoundary reports whether the stream is between two values (nothing
// half-read), where a new reply starts.
func (l *Lexer) AtBoundary() bool { return l.st == stType && l.err == nil }

// StreamPending reports whether StreamNext was called and the value it
// applies to has not yet shown whether it is streamed: before its type
// byte, or inside the header of a bulk string.
func (l *Lexer) StreamPending() bool { return l.streamLimit > 0 }

// Holding reports whether the lexer is inside the payload of a held bulk
// string (announced larger than HoldAbove).
func (l *Lexer) Holding() bool { return l.st == stPayload && l.mode == held }

// Streaming reports whether the lexer is inside the payload of the bulk
// string StreamNext applied to.
func (l *Lexer) Streaming() bool { return l.st == stPayload && l.mode == streamed }

// PayloadLeft is the number of payload bytes still to come in the current
// bulk string, its final CRLF included; 0 outside a payload.
func (l *Lexer) PayloadLeft() int64 {
	if l.st != stPayload {
		return 0
	}
	return l.payload
}

// Err is the error that stopped the lexer, nil while it runs.
func (l *Lexer) Err() error { return l.err }

// Feed lexes the next bytes of the stream. It returns an error wrapping
// ErrTooLarge or ErrProtocol when p (together with what came before) breaks
// the limit or is not RESP; the error is sticky.
func (l *Lexer) Feed(p []byte) error {
	for len(p) > 0 {
		n, err := l.Next(p)
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return l.err
}

// Next lexes p like Feed, but returns early, after the header of a bulk
// string whose payload is held or streamed, so that a reader knows where
// that payload starts. It returns the number of bytes of p it consumed.
func (l *Lexer) Next(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	total := len(p)
	for len(p) > 0 {
		switch l.st {
		case stPayload:
			k := min(int64(len(p)), l.payload)
			l.payload -= k
			p = p[k:]
			if l.payload == 0 {
				l.st, l.mode = stType, plain
			}
		case stType:
			l.typ, l.n = p[0], 1
			p = p[1:]
			if err := l.charge(1); err != nil {
				return 0, err
			}
			l.streamTok = l.streamLimit > 0 && l.typ == '$'
			if !l.streamTok {
				l.streamLimit = 0
			}
			switch l.typ {
			case '+', '-', ':', '_', ',', '#', '(':
				l.st = stLine
			case '$', '!', '=', '*', '~', '>', '%', '|':
				l.st, l.num, l.neg, l.cr = stHeader, 0, false, false
			default:
				return 0, l.fail(fmt.Errorf("%w: unknown type byte %q", ErrProtocol, l.typ))
			}
		case stLine:
			i := bytes.IndexByte(p, '\n')
			k := int64(len(p))
			if i >= 0 {
				k = int64(i) + 1
			}
			// Stop at the first byte that breaks a bound, so that the
			// verdict does not depend on how the stream was cut.
			k = min(k, int64(MaxLine-l.n+1), l.Limit-l.charged+1)
			l.n += int(k)
			p = p[k:]
			if l.n > MaxLine {
				return 0, l.fail(fmt.Errorf("%w: a %q line longer than %d bytes", ErrProtocol, l.typ, MaxLine))
			}
			if err := l.charge(k); err != nil {
				return 0, err
			}
			if i >= 0 && k == int64(i)+1 {
				l.st = stType
			}
		case stHeader:
			b := p[0]
			p = p[1:]
			l.n++
			if l.n > maxHeader {
				return 0, l.fail(fmt.Errorf("%w: %q header longer than %d bytes", ErrProtocol, l.typ, maxHeader))
			}
			if err := l.charge(1); err != nil {
				return 0, err
			}
			if err := l.headerByte(b); err != nil {
				return 0, err
			}
			if l.st == stPayload && l.mode != plain {
				return total - len(p), nil
			}
		}
	}
	return total, nil
}

// headerByte takes one byte after a length header's type byte.
func (l *Lexer) headerByte(b byte) error {
	switch {
	case l.cr:
		if b != '\n' {
			return l.fail(fmt.Errorf("%w: %q header not ended by CRLF", ErrProtocol, l.typ))
		}
		return l.announce()
	case b == '\r' && (l.n > 3 || l.n == 3 && !l.neg):
		l.cr = true
	case b == '-' && l.n == 2:
		l.neg = true
	case b >= '0' && b <= '9':
		// 19 digits fit an int64 only below 9.22e18; stop well before.
		if l.num > (1<<62)/10 {
			return l.fail(fmt.Errorf("%w: %q length out of range", ErrProtocol, l.typ))
		}
		l.num = l.num*10 + int64(b-'0')
	default:
		return l.fail(fmt.Errorf("%w: %q header is not a number", ErrProtocol, l.typ))
	}
	return nil
}

// announce charges what a complete header promises.
func (l *Lexer) announce() error {
	l.st = stType
	streamLimit := l.streamLimit
	stream := l.streamTok
	l.streamLimit, l.streamTok = 0, false
	if l.neg {
		if l.num != 1 {
			return l.fail(fmt.Errorf("%w: %q length -%d", ErrProtocol, l.typ, l.num))
		}
		return nil // null bulk string or aggregate
	}
	left := l.Limit - l.charged
	switch {
	case stream:
		// Not charged: the payload goes to a Sink as it arrives.
		if l.num > streamLimit {
			return l.fail(fmt.Errorf("%w: the server announced a streamed bulk string of %d bytes (limit %d)",
				ErrTooLarge, l.num, streamLimit))
		}
		l.payload, l.st, l.mode = l.num+2, stPayload, streamed
	case l.typ == '$' || l.typ == '!' || l.typ == '=':
		if l.num+2 > left {
			return l.tooLarge(fmt.Sprintf("a bulk string of %d bytes", l.num))
		}
		l.charged += l.num + 2
		l.payload, l.st, l.mode = l.num+2, stPayload, plain
		if l.HoldAbove > 0 && l.num > l.HoldAbove {
			l.mode = held
		}
	default:
		per := int64(ElementCost)
		if l.typ == '%' || l.typ == '|' {
			per *= 2
		}
		if l.num > left/per {
			return l.tooLarge(fmt.Sprintf("an aggregate of %d elements", l.num))
		}
		l.charged += l.num * per
	}
	return nil
}

func (l *Lexer) charge(n int64) error {
	l.charged += n
	if l.charged > l.Limit {
		return l.tooLarge("more reply bytes")
	}
	return nil
}

func (l *Lexer) tooLarge(what string) error {
	return l.fail(fmt.Errorf("%w: the server announced %s after %d bytes of replies to the last command (limit %d)",
		ErrTooLarge, what, l.charged, l.Limit))
}

func (l *Lexer) fail(err error) error {
	l.err = err
	return err
}

// A Sink receives the payload of a streamed reply.
type Sink interface {
	// Begin starts a reply of size payload bytes. It is called again when
	// the command is retried on another connection: the sink starts over.
	Begin(size int64)
	// Write takes the next payload bytes, in order; it must not keep p.
	// An error fails the read (and closes the connection).
	Write(p []byte) (int, error)
}

// Stream names the command whose bulk-string reply is streamed, and the
// Sink its next replies go to. A Conn recognises the command by the bytes
// go-redis writes for it (one Write of exactly that RESP array), so a
// pipeline or another command is never streamed. It is safe for
// concurrent use.
type Stream struct {
	cmd   []byte
	limit int64
	mu    sync.Mutex
	sink  Sink
}

// NewStream returns a Stream for the command args (e.g. "client", "list")
// whose reply may be up to limit payload bytes; a longer one is refused
// with ErrTooLarge.
func NewStream(limit int64, args ...string) *Stream {
	cmd := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		cmd = fmt.Appendf(cmd, "$%d\r\n%s\r\n", len(a), a)
	}
	return &Stream{cmd: cmd, limit: limit}
}

// Arm sends the replies to the command to sink until Disarm; an unarmed
// command's reply reaches go-redis like any other.
func (s *Stream) Arm(sink Sink) {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
}

// Disarm stops streaming the command's replies.
func (s *Stream) Disarm() { s.Arm(nil) }

// sinkFor returns the armed sink when p is the command.
func (s *Stream) sinkFor(p []byte) Sink {
	if !bytes.Equal(p, s.cmd) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sink
}

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
	// Budget, if set, is shared by the connections whose held bulk
	// strings it bounds together (see Budget); nil bounds them only one by
	// one (Limit).
	Budget *Budget
	// OnBudget, if set, is called when a read fails with ErrBudget.
	OnBudget func()
}

// emptyBulk is what go-redis reads in place of a streamed reply.
var emptyBulk = []byte("$0\r\n\r\n")

// Conn is a net.Conn whose reads are lexed against a budget. A Write starts
// a new command's budget. When the budget or the protocol is broken, the
// read fails, the connection is closed and OnLimit (if set) is called once
// for ErrTooLarge.
type Conn struct {
	net.Conn
	lex    Lexer
	stream *Stream
	reset  atomic.Bool            // set by Write, applied by the next Read
	armed  atomic.Pointer[armedW] // the sink for the reply to the command just written
	// OnLimit is called once when a reply breaks its limit.
	OnLimit  func()
	budget   *Budget
	onBudget func()
	taken    atomic.Int64              // bytes of budget this connection holds
	deadline atomic.Pointer[time.Time] // the last read deadline set

	// The read side; go-redis reads a connection from one goroutine.
	out  []byte // lexed bytes the reader may take now (a released hold, emptyBulk)
	hold []byte // lexed bytes withheld until the held bulk string they end in is complete
	sink Sink   // the sink of the reply being streamed
	rerr error  // a read error to return once out is drained
}

type armedW struct{ sink Sink }

// NewConn wraps c. The result also implements syscall.Conn when c does, so
// go-redis' idle-connection health check (a non-blocking peek at the
// socket) keeps working; a peeked byte is not consumed, so the lexer still
// sees it.
func NewConn(c net.Conn, o Options) net.Conn {
	lc := &Conn{Conn: c, lex: Lexer{Limit: o.Limit, HoldAbove: o.HoldAbove}, stream: o.Stream, OnLimit: o.OnLimit, budget: o.Budget, onBudget: o.OnBudget}
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
				if errors.Is(lerr, ErrTooLarge) && c.OnLimit != nil {
					c.OnLimit()
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

// takeBudget takes n bytes from the shared budget, if any, waiting until
// the read deadline at most.
func (c *Conn) takeBudget(n int64) error {
	if c.budget == nil {
		return nil
	}
	var deadline time.Time
	if d := c.deadline.Load(); d != nil {
		deadline = *d
	}
	got, err := c.budget.take(n, deadline)
	c.taken.Add(got)
	if err != nil && c.onBudget != nil {
		c.onBudget()
	}
	return err
}

// giveBack returns what the connection took from the budget: the reader
// has taken every held byte.
func (c *Conn) giveBack() {
	if c.budget != nil {
		c.budget.give(c.taken.Swap(0))
	}
}

// SetDeadline records the read deadline, which bounds the wait for budget.
func (c *Conn) SetDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline records the read deadline, which bounds the wait for
// budget.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetReadDeadline(t)
}

// Close closes the connection and gives its budget back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.giveBack()
	return err
}

type sysConn struct {
	*Conn
	sc syscall.Conn
}

func (s *sysConn) SyscallConn() (syscall.RawConn, error) { return s.sc.SyscallConn() }
