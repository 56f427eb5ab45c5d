package inetdiag

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BufferSize is the receive buffer Conn needs: the kernel fills a dump's
// datagrams up to 32 KiB (netlink_recvmsg caps max_recvmsg_len there), so
// one twice that size is never truncated.
const BufferSize = 64 << 10

// Conn is a NETLINK_SOCK_DIAG socket of the calling thread's network
// namespace (fixed when it is opened), with its receive buffer. It is not
// safe for concurrent use.
type Conn struct {
	fd  int
	buf []byte
	req []byte
	seq uint32
}

// Open opens a sock_diag socket. buf is the receive buffer to use (at
// least BufferSize; a new one when nil), so that a caller that dumps on
// every scrape allocates it once.
func Open(buf []byte) (*Conn, error) {
	if len(buf) < BufferSize {
		buf = make([]byte, BufferSize)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_NETLINK, NETLINK_SOCK_DIAG): %w", err)
	}
	return &Conn{fd: fd, buf: buf, seq: uint32(time.Now().UnixNano())}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Dump sends r and reads the replies until the dump ends, calling fn with
// each socket. The reads end at deadline (a zero deadline waits as long
// as the kernel takes). The problems of every datagram are returned with
// the first error: an Errno when the kernel refused the request (EINVAL
// for a filter it does not take), ErrTruncated (wrapped) when a datagram
// did not fit the buffer — the rest of the dump is still read —, or a
// socket error, which ends the dump.
func (c *Conn) Dump(r Request, deadline time.Time, fn func(Socket)) (Problems, error) {
	var p Problems
	c.seq++
	var err error
	if c.req, err = r.Append(c.req[:0], c.seq); err != nil {
		return p, err
	}
	if err := c.setDeadline(deadline); err != nil {
		return p, err
	}
	if _, err := unix.Write(c.fd, c.req); err != nil {
		return p, fmt.Errorf("sock_diag request: %w", err)
	}
	var first error
	for {
		n, err := c.recv()
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				err = fmt.Errorf("sock_diag dump: no reply before the deadline: %w", err)
			}
			return p, errors.Join(first, err)
		}
		if n > len(c.buf) {
			if first == nil {
				first = fmt.Errorf("%w: %d bytes, buffer %d", ErrTruncated, n, len(c.buf))
			}
			n = len(c.buf)
		}
		done, q, err := Parse(c.buf[:n], c.seq, fn)
		p.Add(q)
		if done {
			return p, errors.Join(first, err)
		}
	}
}

// recv reads one datagram into c.buf and returns its full length
// (MSG_TRUNC), which is larger than the buffer when it did not fit.
// recvfrom with no source address does not allocate, unlike
// unix.Recvfrom, which returns one per datagram.
func (c *Conn) recv() (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(c.fd),
			uintptr(unsafe.Pointer(&c.buf[0])), uintptr(len(c.buf)), unix.MSG_TRUNC, 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		default:
			return 0, errno
		}
	}
}

// setDeadline sets the socket's receive timeout to the time left before
// deadline (SO_RCVTIMEO; 0 waits for ever). A deadline already past gets
// the shortest timeout, so the dump fails at once.
func (c *Conn) setDeadline(deadline time.Time) error {
	var tv unix.Timeval
	if !deadline.IsZero() {
		tv = unix.NsecToTimeval(max(time.Until(deadline), time.Microsecond).Nanoseconds())
	}
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("sock_diag socket: SO_RCVTIMEO: %w", err)
	}
	return nil
}

// Buffer is the receive buffer, for the next Open.
func (c *Conn) Buffer() []byte { return c.buf }
