package inetdiag

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

// Conn is a NETLINK_SOCK_DIAG socket of the calling thread's network
// namespace (fixed when it is opened), on internal/netlinkdump, with the
// buffer of its requests. It is not safe for concurrent use.
type Conn struct {
	nl  *netlinkdump.Conn
	req []byte
}

// Open opens a sock_diag socket. buf is the receive buffer to use (at
// least netlinkdump.BufferSize; a new one when shorter), so that a caller
// that dumps on every scrape allocates it once.
func Open(buf []byte) (*Conn, error) {
	nl, err := netlinkdump.Open(unix.NETLINK_SOCK_DIAG, buf)
	if err != nil {
		return nil, err
	}
	return &Conn{nl: nl}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.nl.Close() }

// Buffer is the receive buffer, for the next Open.
func (c *Conn) Buffer() []byte { return c.nl.Buffer() }

// Dump sends r and reads the replies until the dump ends, calling fn with
// each socket. Each receive waits until deadline (a zero deadline:
// netlinkdump.DefaultTimeout). The problems of every message are counted
// in Problems, and the error is netlinkdump.Dump's: a netlinkdump.Errno
// when the kernel refused the request (EINVAL for a filter it does not
// take), netlinkdump.ErrTruncated (wrapped) when a datagram did not fit
// the buffer — the rest of the dump is still read —, or a socket error
// or the deadline, which end the dump.
func (c *Conn) Dump(r Request, deadline time.Time, fn func(Socket)) (Problems, error) {
	var p Problems
	var err error
	if c.req, err = r.Append(c.req[:0]); err != nil {
		return p, err
	}
	st, err := c.nl.Dump(sockDiagByFamily, c.req, deadline, func(typ uint16, m []byte) error {
		p.Add(decode(typ, m, fn))
		return nil
	})
	p.addDump(st)
	return p, err
}
