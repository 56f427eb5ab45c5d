// Package resplimit bounds the memory a Redis server can make its client
// commit. go-redis reads a bulk string by allocating the length its header
// announces ("$838860800\r\n") before the first payload byte arrives, and an
// aggregate by allocating a slot per announced element, so a server — or
// anything answering on its port — that announces 800 MB costs 800 MB,
// whatever it sends afterwards. Counting reply bytes after go-redis has
// parsed them is too late.
//
// Conn sits under go-redis' buffered reader: it lexes the RESP stream (RESP2
// and RESP3 type bytes) as it arrives and fails, and closes, the read that
// carries a header whose announced size, added to what the replies to the
// last command already cost, exceeds the budget.
//
// Within the budget, Conn still does not let go-redis allocate on a promise:
// a bulk string announced larger than HoldAbove is handed over only once all
// of its bytes have arrived (they are buffered as they come), so a server
// that announces a large reply and then stalls costs what it sent, not what
// it announced. Held bulk strings of every connection together take their
// bytes from one remote.Budget (Options.Budget).
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

// Reset starts a new command's charge; the position in the stream is kept.
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

// StreamPending reports whether the value StreamNext applies to has not
// yet shown whether it is streamed (before its type byte, or inside a
// bulk string's header).
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

// Next lexes the next bytes of the stream, p, and returns the number of
// them it consumed: all of p, or fewer when it stops early, after the
// header of a bulk string whose payload is held or streamed, so that a
// reader knows where that payload starts. It returns an error wrapping
// ErrTooLarge or ErrProtocol when p (together with what came before) breaks
// the limit or is not RESP; the error is sticky.
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
