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
// What a reply is charged, since the last Write (one command or one
// pipeline): every header and simple-line byte as it arrives; a bulk
// string's announced length (+2 for its CRLF) when its header arrives, its
// payload then being free; an aggregate's announced element count times
// ElementCost (map and attribute entries count twice). A simple line (+, -,
// :, _, ',', #, '(') longer than MaxLine, a length header longer than
// maxHeader or not a number, and an unknown type byte are protocol errors.
package resplimit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
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

// Lexer follows a RESP byte stream and charges it against Limit. The zero
// value with a positive Limit is ready; it is not safe for concurrent use.
type Lexer struct {
	Limit int64 // bytes a command's replies may be charged; must be positive

	charged int64
	st      state
	typ     byte  // type byte of the current header or line
	n       int   // bytes of the current line or header, type byte included
	num     int64 // header value so far
	neg     bool  // header value has a minus sign
	cr      bool  // header saw its CR
	payload int64 // payload bytes left to skip
	err     error // sticky
}

// Reset starts a new command: the charge goes back to zero. The position
// in the stream is kept (a reply is never cut in two by a command).
func (l *Lexer) Reset() {
	if l.err == nil {
		l.charged = 0
	}
}

// Charged is what the replies since the last Reset cost so far.
func (l *Lexer) Charged() int64 { return l.charged }

// Err is the error that stopped the lexer, nil while it runs.
func (l *Lexer) Err() error { return l.err }

// Feed lexes the next bytes of the stream. It returns an error wrapping
// ErrTooLarge or ErrProtocol when p (together with what came before) breaks
// the limit or is not RESP; the error is sticky.
func (l *Lexer) Feed(p []byte) error {
	if l.err != nil {
		return l.err
	}
	for len(p) > 0 {
		switch l.st {
		case stPayload:
			k := min(int64(len(p)), l.payload)
			l.payload -= k
			p = p[k:]
			if l.payload == 0 {
				l.st = stType
			}
		case stType:
			l.typ, l.n = p[0], 1
			p = p[1:]
			if err := l.charge(1); err != nil {
				return err
			}
			switch l.typ {
			case '+', '-', ':', '_', ',', '#', '(':
				l.st = stLine
			case '$', '!', '=', '*', '~', '>', '%', '|':
				l.st, l.num, l.neg, l.cr = stHeader, 0, false, false
			default:
				return l.fail(fmt.Errorf("%w: unknown type byte %q", ErrProtocol, l.typ))
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
				return l.fail(fmt.Errorf("%w: a %q line longer than %d bytes", ErrProtocol, l.typ, MaxLine))
			}
			if err := l.charge(k); err != nil {
				return err
			}
			if i >= 0 && k == int64(i)+1 {
				l.st = stType
			}
		case stHeader:
			b := p[0]
			p = p[1:]
			l.n++
			if l.n > maxHeader {
				return l.fail(fmt.Errorf("%w: %q header longer than %d bytes", ErrProtocol, l.typ, maxHeader))
			}
			if err := l.charge(1); err != nil {
				return err
			}
			if err := l.headerByte(b); err != nil {
				return err
			}
		}
	}
	return nil
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
	if l.neg {
		if l.num != 1 {
			return l.fail(fmt.Errorf("%w: %q length -%d", ErrProtocol, l.typ, l.num))
		}
		return nil // null bulk string or aggregate
	}
	left := l.Limit - l.charged
	switch l.typ {
	case '$', '!', '=':
		if l.num+2 > left {
			return l.tooLarge(fmt.Sprintf("a bulk string of %d bytes", l.num))
		}
		l.charged += l.num + 2
		l.payload = l.num + 2
		l.st = stPayload
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

// Conn is a net.Conn whose reads are lexed against a budget. A Write starts
// a new command's budget. When the budget or the protocol is broken, the
// read fails, the connection is closed and OnLimit (if set) is called once
// for ErrTooLarge.
type Conn struct {
	net.Conn
	lex     Lexer
	reset   atomic.Bool // set by Write, applied by the next Read
	OnLimit func()
}

// NewConn wraps c with a budget of limit bytes per command. The result
// also implements syscall.Conn when c does, so go-redis' idle-connection
// health check (a non-blocking peek at the socket) keeps working; a
// peeked byte is not consumed, so the lexer still sees it.
func NewConn(c net.Conn, limit int64, onLimit func()) net.Conn {
	lc := &Conn{Conn: c, lex: Lexer{Limit: limit}, OnLimit: onLimit}
	if sc, ok := c.(syscall.Conn); ok {
		return &sysConn{Conn: lc, sc: sc}
	}
	return lc
}

func (c *Conn) Read(p []byte) (int, error) {
	if c.reset.Swap(false) {
		c.lex.Reset()
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if c.lex.Err() != nil {
			return 0, c.lex.Err()
		}
		if lerr := c.lex.Feed(p[:n]); lerr != nil {
			_ = c.Conn.Close()
			if errors.Is(lerr, ErrTooLarge) && c.OnLimit != nil {
				c.OnLimit()
			}
			return 0, lerr
		}
	}
	return n, err
}

func (c *Conn) Write(p []byte) (int, error) {
	c.reset.Store(true)
	return c.Conn.Write(p)
}

type sysConn struct {
	*Conn
	sc syscall.Conn
}

func (s *sysConn) SyscallConn() (syscall.RawConn, error) { return s.sc.SyscallConn() }
