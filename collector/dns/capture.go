package dns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// packetSource is an open capture: the AF_PACKET socket, or a test's fake.
// Only the capture goroutine calls read and Close; stats is safe for
// concurrent use.
type packetSource interface {
	// read hands fn the packets that arrive until deadline: each one's
	// bytes from its IP header on (valid during the call) and its kernel
	// timestamp in Unix ns. It returns a time before which every captured
	// packet has been handed over, for counting timeouts, or why the
	// capture failed.
	read(deadline time.Time, fn func(pkt []byte, ts int64)) (seen time.Time, err error)
	// stats returns the packets that passed the kernel filter and, of
	// those, the ones the kernel dropped, since the capture opened.
	stats() (passed, drops uint64)
	Close() error
}

// captureSocket is one AF_PACKET socket (SOCK_DGRAM, ETH_P_ALL so outgoing
// packets are seen too) with the port-53 filter attached before bind, so
// not one unfiltered packet is queued. Packets are read with recvmsg(2)
// into fixed buffers, with the kernel's receive timestamp (SO_TIMESTAMPNS):
// no allocation per packet, and latency measured where the packets passed,
// not when the exporter got to them.
type captureSocket struct {
	conn *packet.Conn
	rc   syscall.RawConn

	buf  []byte
	oob  []byte
	iov  unix.Iovec
	msg  unix.Msghdr
	recv func(fd uintptr) bool // built once: a closure per read would allocate
	n    int
	err  error

	mu            sync.Mutex
	drops, passed uint64 // PACKET_STATISTICS, accumulated
}

// openCapture opens the capture on the named interface, or on all
// interfaces when ifname is empty. rcvbuf is the socket receive buffer to
// ask for (SO_RCVBUFFORCE with CAP_NET_ADMIN, else SO_RCVBUF capped by
// net.core.rmem_max).
func openCapture(ifname string, rcvbuf int) (*captureSocket, error) {
	ifi := &net.Interface{} // index 0: every interface
	if ifname != "" {
		var err error
		if ifi, err = net.InterfaceByName(ifname); err != nil {
			return nil, fmt.Errorf("--dns.interface %q: %w", ifname, err)
		}
	}
	filter, err := captureFilter(loopbackIndex())
	if err != nil {
		return nil, err
	}
	conn, err := packet.Listen(ifi, packet.Datagram, unix.ETH_P_ALL, &packet.Config{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("opening the AF_PACKET capture socket (needs CAP_NET_RAW): %w", err)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		conn.Close()
		return nil, fmt.Errorf("configuring the capture socket: %w", errors.Join(err, serr))
	}
	c := &captureSocket{conn: conn, rc: rc, buf: make([]byte, tcpSnap), oob: make([]byte, 128)}
	c.iov.Base = &c.buf[0]
	c.iov.SetLen(len(c.buf))
	c.msg.Iov = &c.iov
	c.msg.Iovlen = 1
	c.recv = c.recvmsg
	return c, nil
}

// loopbackIndex returns the index of the loopback interface of the current
// network namespace (1 on Linux, LOOPBACK_IFINDEX), or 0 if there is none.
func loopbackIndex() int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 1
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return i.Index
		}
	}
	return 0
}

func (c *captureSocket) recvmsg(fd uintptr) bool {
	for {
		c.msg.Control = &c.oob[0]
		c.msg.SetControllen(len(c.oob))
		n, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), 0)
		switch errno {
		case 0:
			c.n, c.err = int(n), nil
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait for the poller
		default:
			c.n, c.err = 0, os.NewSyscallError("recvmsg", errno)
			return true
		}
	}
}

func (c *captureSocket) read(deadline time.Time, fn func([]byte, int64)) (time.Time, error) {
	if err := c.conn.SetReadDeadline(deadline); err != nil {
		return time.Time{}, err
	}
	for {
		b, ts, err := c.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return time.Now(), nil // the queue was empty
		}
		if err != nil {
			return time.Time{}, err
		}
		fn(b, ts)
	}
}

// next reads one packet: its bytes (valid until the next call) and its
// kernel timestamp in Unix ns (the time of reading when the kernel gave
// none). A read deadline (SetReadDeadline) ends it with os.ErrDeadlineExceeded.
func (c *captureSocket) next() ([]byte, int64, error) {
	if err := c.rc.Read(c.recv); err != nil {
		return nil, 0, err
	}
	if c.err != nil {
		return nil, 0, c.err
	}
	return c.buf[:c.n], c.timestamp(), nil
}

// timestamp finds SCM_TIMESTAMPNS in the control messages of the last read.
func (c *captureSocket) timestamp() int64 {
	oob := c.oob[:c.msg.Controllen]
	hdr := unix.CmsgLen(0)
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			break
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= hdr+16 {
			sec := int64(binary.NativeEndian.Uint64(oob[hdr:]))
			nsec := int64(binary.NativeEndian.Uint64(oob[hdr+8:]))
			if sec != 0 {
				return sec*1e9 + nsec
			}
		}
		oob = oob[min(unix.CmsgSpace(l-hdr), len(oob)):]
	}
	return time.Now().UnixNano()
}

// stats reads PACKET_STATISTICS, which the kernel resets on every read,
// and returns the totals since the socket was opened: packets that passed
// the filter, and of those the ones dropped for lack of buffer space.
func (c *captureSocket) stats() (passed, drops uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, err := c.conn.Stats(); err == nil {
		c.passed += uint64(s.Packets)
		c.drops += uint64(s.Drops)
	}
	return c.passed, c.drops
}

func (c *captureSocket) Close() error { return c.conn.Close() }
