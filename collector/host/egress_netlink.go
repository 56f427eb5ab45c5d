package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rtnlConn is one NETLINK_ROUTE socket that asks the kernel for dumps
// (links, link statistics, qdiscs) and reads the replies into one buffer
// it keeps: after the first dump, a dump allocates nothing. The socket
// belongs to the network namespace it was opened in, as the kernel's
// netlink sockets do. Not safe for concurrent use: each user (the scrape,
// the sampler) has its own.
//
// Why not a library: github.com/jsimonetti/rtnetlink/v2 v2.3.0 and
// github.com/vishvananda/netlink v1.3.1 decode every attribute of every
// link into new values: listing 1,000 interfaces allocated 5.8 MB (76,000
// objects) and 7.5 MB (18,000 objects) per call, while the sampler reads
// the statistics every second. This reader keeps its buffer, asks for
// the statistics alone (RTM_GETSTATS) and decodes only the fields it
// exports (egress_parse.go), as the /proc readers do (source.go): 0
// allocations and 0.3 ms of CPU per dump of 1,000 interfaces
// (docs/benchmarks.md).
type rtnlConn struct {
	fd  int
	seq uint32
	buf []byte
}

// rtnlRecvBytes is the receive buffer. The kernel fills one datagram of a
// dump up to 32 KiB (netlink_dump(), or the first recv's size when it is
// larger), so a datagram never needs more.
const rtnlRecvBytes = 64 << 10

// rtnlTimeout bounds one recv: a kernel that does not answer must not
// hold a sampler tick or a scrape forever.
const rtnlTimeout = 5 * time.Second

// rtnlMaxMessages bounds one dump: a reply that never ends (a bug) is an
// error after this many messages rather than a loop.
const rtnlMaxMessages = 1 << 20

// openRTNL opens a NETLINK_ROUTE socket in the calling thread's network
// namespace.
func openRTNL() (*rtnlConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(rtnlTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink socket: SO_RCVTIMEO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &rtnlConn{fd: fd, buf: make([]byte, rtnlRecvBytes)}, nil
}

func (c *rtnlConn) Close() error { return unix.Close(c.fd) }

// Dump requests the kernel's RTM_GETLINK, RTM_GETSTATS or RTM_GETQDISC
// table (typ) with the fixed header hdr after the nlmsghdr, and calls each
// with the type and body of every reply message until NLMSG_DONE. Each
// body aliases the buffer, valid until each returns. interrupted reports
// NLM_F_DUMP_INTR: the table changed during the dump (an interface came
// or went), so the messages are each consistent but not one snapshot. An
// error from each stops the dump (the socket is drained on the next
// Dump, by sequence number); a NLMSG_ERROR reply is the kernel's errno.
func (c *rtnlConn) Dump(typ uint16, hdr []byte, each func(typ uint16, body []byte) error) (interrupted bool, err error) {
	c.seq++
	req := c.buf[:unix.NLMSG_HDRLEN+len(hdr)]
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], c.seq)
	binary.NativeEndian.PutUint32(req[12:], 0)
	copy(req[unix.NLMSG_HDRLEN:], hdr)
	// No address: a netlink socket sends to the kernel (port 0) by
	// default, and a Sockaddr would be one allocation per dump.
	if _, err := unix.Write(c.fd, req); err != nil {
		return false, fmt.Errorf("netlink send: %w", err)
	}
	messages := 0
	for {
		n, err := c.recv()
		if err != nil {
			return interrupted, err
		}
		b := c.buf[:n]
		for len(b) > 0 {
			m, rest, err := nextNetlinkMessage(b)
			if err != nil {
				return interrupted, err
			}
			b = rest
			if m.Seq != c.seq {
				continue // the rest of a dump an earlier error stopped reading
			}
			if messages++; messages > rtnlMaxMessages {
				return interrupted, fmt.Errorf("netlink dump longer than %d messages", rtnlMaxMessages)
			}
			if m.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch m.Type {
			case unix.NLMSG_DONE:
				return interrupted, nil
			case unix.NLMSG_ERROR:
				return interrupted, netlinkErrno(m.Body)
			case unix.NLMSG_NOOP:
				continue
			}
			if err := each(m.Type, m.Body); err != nil {
				return interrupted, err
			}
		}
	}
}

// recv reads one datagram, retrying when a signal interrupts the call.
func (c *rtnlConn) recv() (int, error) {
	for {
		n, err := unix.Read(c.fd, c.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				return 0, fmt.Errorf("netlink recv: no answer in %s", rtnlTimeout)
			}
			return 0, fmt.Errorf("netlink recv: %w", err)
		}
		return n, nil
	}
}

// netlinkErrno is the error of a NLMSG_ERROR body (struct nlmsgerr: a
// negative errno, then the request's header).
func netlinkErrno(body []byte) error {
	if len(body) < 4 {
		return fmt.Errorf("%w: nlmsgerr of %d bytes", errNetlinkShort, len(body))
	}
	errno := int32(binary.NativeEndian.Uint32(body))
	if errno == 0 {
		return errors.New("netlink: acknowledgement where a dump was expected")
	}
	return fmt.Errorf("netlink: %w", syscall.Errno(-errno))
}

// The fixed headers of the three dumps.
var (
	// struct ifinfomsg, all zero: every interface of every family.
	dumpLinksHdr = make([]byte, unix.SizeofIfInfomsg)
	// struct if_stats_msg with filter_mask IFLA_STATS_LINK_64 only: per
	// interface, its index and rtnl_link_stats64, ~220 bytes instead of
	// RTM_GETLINK's kilobyte and more.
	dumpStatsHdr = func() []byte {
		b := make([]byte, sizeofIfStatsMsg)
		binary.NativeEndian.PutUint32(b[8:], 1<<(unix.IFLA_STATS_LINK_64-1))
		return b
	}()
	// struct tcmsg, all zero: every qdisc of every interface.
	dumpQdiscsHdr = make([]byte, sizeofTcMsg)
)
