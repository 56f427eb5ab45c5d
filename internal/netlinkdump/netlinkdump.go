// Package netlinkdump is the exporter's one netlink socket and dump loop:
// it opens a netlink socket of a given protocol in the calling thread's
// network namespace, sends one dump request (NLM_F_REQUEST|NLM_F_DUMP)
// and walks the replies message by message into a callback with each
// message's type and payload, in a receive buffer kept between dumps, so
// that a dump allocates nothing. The protocols' decoders are their
// collectors' (collector/host/egress_parse.go for rtnetlink,
// collector/tcpqueues/inetdiag for sock_diag); this package knows only
// struct nlmsghdr (include/uapi/linux/netlink.h).
//
// What a dump guards against, from both collectors' first loops: a kernel
// that does not answer (the deadline, SO_RCVTIMEO), a reply that never
// ends (MaxMessages), a refused request (NLMSG_ERROR, returned as Errno),
// a table that changed during the dump (NLM_F_DUMP_INTR, counted), a
// datagram larger than the buffer (MSG_TRUNC) or cut inside a message
// (counted; the dump reads on to its end), and the rest of an earlier
// dump a callback error stopped (another sequence number, skipped).
//
// Ours rather than github.com/mdlayher/netlink v1.11.2: its receive path
// has no caller's buffer. Per datagram it either peeks (MSG_PEEK|MSG_TRUNC,
// one more syscall) and allocates a buffer of the datagram's size, or,
// with Config.MessageBufferSize, takes a pooled buffer and copies the
// datagram into a new one; an RTM_GETSTATS dump of 1,001 interfaces
// (1,003 messages, 217 KB) cost 340 KB and 1,783 allocations, or 245 KB
// and 155 allocations pooled, against 0 here (docs/benchmarks.md).
package netlinkdump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BufferSize is the receive buffer a Conn needs: the kernel fills one
// datagram of a dump up to 32 KiB (netlink_dump(), or the first recv's
// size when it is larger, which netlink_recvmsg caps there), so a
// buffer twice that size is never truncated.
const BufferSize = 64 << 10

// DefaultTimeout bounds each receive of a dump given no deadline: a
// kernel that does not answer must not hold a sampler tick or a scrape
// forever.
const DefaultTimeout = 5 * time.Second

// MaxMessages bounds one dump: a reply that never ends (a bug) is an
// error after this many messages rather than a loop.
const MaxMessages = 1 << 20

// headerLen is NLMSG_HDRLEN, struct nlmsghdr: len u32, type u16, flags
// u16, seq u32, pid u32.
const headerLen = unix.NLMSG_HDRLEN

// ErrTruncated is returned (wrapped, after the dump has been read to its
// end) when a datagram was larger than the receive buffer: the messages
// that fit were still passed on.
var ErrTruncated = errors.New("netlink datagram larger than the receive buffer")

// Errno is the error number of an NLMSG_ERROR reply: the kernel refused
// the request (EINVAL for a filter it does not take, ENOENT for a family
// it does not have). errors.Is(err, unix.EINVAL) holds for Errno(EINVAL).
type Errno syscall.Errno

func (e Errno) Error() string {
	return fmt.Sprintf("netlink request refused: %v (errno %d)", syscall.Errno(e), int(e))
}

// Unwrap returns the syscall.Errno.
func (e Errno) Unwrap() error { return syscall.Errno(e) }

// Stats counts what a dump read and read around.
type Stats struct {
	// Messages: the dump's messages before its end (NLMSG_DONE or
	// NLMSG_ERROR), the callback's and NLMSG_NOOP.
	Messages int
	// Interrupted: the dump's messages flagged NLM_F_DUMP_INTR (the table
	// changed during the dump: each message is consistent, the whole is
	// not one snapshot, and an entry may be missing or twice).
	Interrupted int
	// Truncated: datagrams larger than the receive buffer (MSG_TRUNC;
	// also returned as ErrTruncated) or with a message header running
	// past the datagram's end. The messages before the cut were passed
	// on; the rest of that datagram is skipped, the next one read.
	Truncated int
}

// Conn is one netlink socket of the network namespace of the thread that
// opened it, with its receive buffer and request buffer. Not safe for
// concurrent use: each reader has its own.
type Conn struct {
	fd  int
	seq uint32
	buf []byte
	req []byte
}

// Open opens a netlink socket of protocol (unix.NETLINK_ROUTE,
// unix.NETLINK_SOCK_DIAG …) in the calling thread's network namespace.
// buf is the receive buffer to use (a new one when shorter than
// BufferSize), so that a caller that opens a socket per scrape allocates
// it once; Buffer returns it.
func Open(protocol int, buf []byte) (*Conn, error) {
	if len(buf) < BufferSize {
		buf = make([]byte, BufferSize)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, protocol)
	if err != nil {
		return nil, fmt.Errorf("netlink socket (protocol %d): %w", protocol, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind (protocol %d): %w", protocol, err)
	}
	// A sequence number from the clock: a socket reopened in the same
	// process does not start where the last one did.
	return &Conn{fd: fd, buf: buf, seq: uint32(time.Now().UnixNano())}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Buffer is the receive buffer, for the next Open.
func (c *Conn) Buffer() []byte { return c.buf }

// Dump sends a dump request of type typ with payload (the fixed header
// of the protocol's request and any attributes, after the nlmsghdr),
// then reads the replies until NLMSG_DONE, calling fn with the type and
// payload of each other message of this dump. The payload aliases the
// receive buffer: valid until fn returns. Each receive waits until
// deadline (DefaultTimeout from now when zero).
//
// The error is, the dump having stopped there: fn's error (the rest of
// the dump is skipped by the next Dump, by sequence number), an Errno
// (an NLMSG_ERROR reply, or a DONE carrying the errno of a dump the
// kernel failed; an acknowledgement, errno 0, ends the dump without
// error), a send or receive error (wrapping unix.EAGAIN when no
// reply came before the deadline), or more than MaxMessages messages. A
// datagram larger than the buffer is counted and ErrTruncated returned
// with the dump's end. Stats counts what was read in every case.
func (c *Conn) Dump(typ uint16, payload []byte, deadline time.Time, fn func(typ uint16, payload []byte) error) (Stats, error) {
	var st Stats
	c.seq++
	c.req = binary.NativeEndian.AppendUint32(c.req[:0], uint32(headerLen+len(payload)))
	c.req = binary.NativeEndian.AppendUint16(c.req, typ)
	c.req = binary.NativeEndian.AppendUint16(c.req, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	c.req = binary.NativeEndian.AppendUint32(c.req, c.seq)
	c.req = binary.NativeEndian.AppendUint32(c.req, 0) // port 0: the kernel
	c.req = append(c.req, payload...)
	if err := c.setDeadline(deadline); err != nil {
		return st, err
	}
	// No address: a netlink socket sends to the kernel by default, and a
	// Sockaddr would be one allocation per dump.
	if _, err := unix.Write(c.fd, c.req); err != nil {
		return st, fmt.Errorf("netlink send: %w", err)
	}
	var truncated error
	for {
		n, err := c.recv()
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				err = fmt.Errorf("netlink recv: no reply before the deadline: %w", err)
			} else {
				err = fmt.Errorf("netlink recv: %w", err)
			}
			return st, joinTruncated(truncated, err)
		}
		cut := n > len(c.buf)
		if cut {
			if truncated == nil {
				truncated = fmt.Errorf("%w: %d bytes, buffer %d", ErrTruncated, n, len(c.buf))
			}
			n = len(c.buf)
		}
		before := st.Truncated
		done, err := Walk(c.buf[:n], c.seq, &st, fn)
		if cut && st.Truncated == before {
			st.Truncated++ // once per datagram, the walk's cut message or not
		}
		if done || err != nil {
			return st, joinTruncated(truncated, err)
		}
	}
}

// joinTruncated returns err, with truncated when a datagram was cut.
// (errors.Join(nil, err) would wrap err: a callback's error is returned
// as it is.)
func joinTruncated(truncated, err error) error {
	if truncated == nil {
		return err
	}
	return errors.Join(truncated, err)
}

// Walk walks one datagram b of replies to the request with sequence
// number seq, as Dump does: fn gets each message of that number that is
// not NLMSG_DONE, NLMSG_ERROR or NLMSG_NOOP; messages of another number
// are skipped; st counts the messages, the interrupted ones and a header
// running past b (the rest of b skipped, st.Truncated). done reports the
// end of the dump (NLMSG_DONE; NLMSG_ERROR with err an Errno, or nil for
// an acknowledgement; a DONE carrying a negative errno is an Errno too). err is also fn's error, or more than
// MaxMessages messages counted in st. It never reads outside b.
func Walk(b []byte, seq uint32, st *Stats, fn func(typ uint16, payload []byte) error) (done bool, err error) {
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < headerLen {
			st.Truncated++
			return false, nil
		}
		l := int(ne.Uint32(b))
		if l < headerLen || l > len(b) {
			st.Truncated++
			return false, nil
		}
		typ, flags, s := ne.Uint16(b[4:]), ne.Uint16(b[6:]), ne.Uint32(b[8:])
		m := b[headerLen:l]
		if a := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1); a < len(b) {
			b = b[a:]
		} else {
			b = nil
		}
		if s != seq {
			continue // the rest of a dump a callback error stopped reading
		}
		if flags&unix.NLM_F_DUMP_INTR != 0 {
			st.Interrupted++
		}
		switch typ {
		case unix.NLMSG_DONE:
			// A dump the kernel failed after it started ends in a DONE
			// whose payload is the negative errno (netlink_dump_done()).
			if len(m) >= 4 {
				if e := int32(ne.Uint32(m)); e < 0 {
					return true, Errno(-e)
				}
			}
			return true, nil
		case unix.NLMSG_ERROR:
			// struct nlmsgerr: a negative errno, then the request's header.
			if len(m) < 4 {
				st.Truncated++
				return true, fmt.Errorf("netlink: NLMSG_ERROR of %d bytes", len(m))
			}
			if e := int32(ne.Uint32(m)); e != 0 {
				return true, Errno(-e)
			}
			return true, nil
		}
		if st.Messages++; st.Messages > MaxMessages {
			return true, fmt.Errorf("netlink dump longer than %d messages", MaxMessages)
		}
		if typ == unix.NLMSG_NOOP {
			continue
		}
		if err := fn(typ, m); err != nil {
			return true, err
		}
	}
	return false, nil
}

// recv reads one datagram into c.buf, retrying when a signal interrupts
// the call, and returns its full length (MSG_TRUNC), which is larger
// than the buffer when it did not fit. recvfrom with no source address
// does not allocate, unlike unix.Recvfrom, which returns one per
// datagram.
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

// setDeadline sets the socket's receive timeout (SO_RCVTIMEO) to the time
// left before deadline, DefaultTimeout when it is zero. A deadline
// already past gets the shortest timeout, so the dump fails at once.
func (c *Conn) setDeadline(deadline time.Time) error {
	d := DefaultTimeout
	if !deadline.IsZero() {
		d = max(time.Until(deadline), time.Microsecond)
	}
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("netlink socket: SO_RCVTIMEO: %w", err)
	}
	return nil
}
