// Package inetdiag is a small codec for the kernel's socket diagnostics
// over netlink (NETLINK_SOCK_DIAG, inet_diag: linux/inet_diag.h): it builds
// the dump request of one address family's TCP sockets in given states,
// filtered in the kernel by local port (INET_DIAG_REQ_BYTECODE), and reads
// the fixed part of each reply (struct inet_diag_msg: ports, state, receive
// and send queue) in place, without allocating per socket. Dump runs one
// request on a netlink socket; Parse decodes one datagram of replies and is
// what the fuzz test exercises.
//
// Ours rather than a library's: github.com/vishvananda/netlink v1.3.1's
// SocketDiagTCP returns every TCP socket of a family as a []*Socket (an
// allocation per socket, and a copy of each message) with no port
// filter, so a host with 10,000 client connections would pay for all of
// them on every scrape; this reads them in a reused 64 KiB buffer, and the
// kernel returns only the watched ports' sockets (docs/benchmarks.md).
package inetdiag

import (
	"encoding/binary"
	"fmt"

	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

// inet_diag constants (linux/sock_diag.h, linux/inet_diag.h). They have
// not changed since inet_diag_req_v2 (3.3).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY

	msgLen = 72 // struct inet_diag_msg

	attrBytecode = 1 // INET_DIAG_REQ_BYTECODE

	// Bytecode operations (enum inet_diag_bc_op_code). S_GE and S_LE
	// exist since the first inet_diag; S_EQ only from 4.16, so an exact
	// port is written as both.
	bcJmp = 1
	bcSGE = 2
	bcSLE = 3

	// lastKnownAttr is INET_DIAG_SOCKOPT (5.10), the last of enum
	// inet_diag_attrs in 6.x. A larger type is an attribute this codec
	// does not know; the fixed part of the message is still read.
	lastKnownAttr = 22
)

// StateEstablished is TCP_ESTABLISHED (include/net/tcp_states.h):
// Socket.State's value, and 1 << StateEstablished in Request.States.
const StateEstablished = 1

// MaxPorts bounds the ports of one request's filter: each costs 20 bytes
// of bytecode and a comparison per socket in the kernel.
const MaxPorts = 64

// Request is one dump: TCP sockets of Family (unix.AF_INET or AF_INET6)
// whose state is in the bitmask States (1 << StateEstablished …) and,
// when Ports is not empty, whose local port is one of Ports.
type Request struct {
	Family uint8
	States uint32
	Ports  []uint16
}

// Append appends the request's payload to b: struct inet_diag_req_v2
// and the bytecode filter (INET_DIAG_REQ_BYTECODE), what
// netlinkdump.Conn.Dump sends after its nlmsghdr.
func (r Request) Append(b []byte) ([]byte, error) {
	if len(r.Ports) > MaxPorts {
		return b, fmt.Errorf("%d ports in one filter, at most %d", len(r.Ports), MaxPorts)
	}
	bc := bytecode(r.Ports)
	ne := binary.NativeEndian
	// struct inet_diag_req_v2: family, protocol, ext (no extensions: the
	// queues are in the fixed part), pad, states, then a zero sockid.
	b = append(b, r.Family, 6 /* IPPROTO_TCP */, 0, 0)
	b = ne.AppendUint32(b, r.States)
	b = append(b, make([]byte, 48)...)
	if len(bc) > 0 {
		b = ne.AppendUint16(b, uint16(4+len(bc)))
		b = ne.AppendUint16(b, attrBytecode)
		b = append(b, bc...)
	}
	return b, nil
}

// bytecode is the filter "sport == p1 || sport == p2 || …" in the
// kernel's inet_diag bytecode, as ss compiles an OR: every condition's
// "yes" goes on to the next operation and its "no" jumps forward, because
// the kernel's audit (inet_diag_bc_audit) follows the yes chain and wants
// every "no" target on it. Per port, [S_GE p][S_LE p] and, but for the
// last, a JMP whose "no" (a JMP always takes it) lands on the end: accept.
// A failed condition jumps to the next port, and the last port's past
// the end: reject. The port is in the "no" field of the operation after
// the condition, in host order.
func bytecode(ports []uint16) []byte {
	if len(ports) == 0 {
		return nil
	}
	const block = 20 // S_GE + port, S_LE + port, JMP
	total := block*len(ports) - 4
	ne := binary.NativeEndian
	op := func(b []byte, code, yes uint8, no uint16) []byte {
		b = append(b, code, yes)
		return ne.AppendUint16(b, no)
	}
	b := make([]byte, 0, total)
	for i, p := range ports {
		left := total - len(b) // bytes from this block's start to the end
		// A failed condition goes to the next block; the last block's
		// "next" (its length 16 + 4) is past the end: reject.
		next := uint16(block)
		b = op(b, bcSGE, 8, next)
		b = op(b, 0, 0, p)
		b = op(b, bcSLE, 8, next-8)
		b = op(b, 0, 0, p)
		if i < len(ports)-1 {
			b = op(b, bcJmp, 4, uint16(left-16))
		}
	}
	return b
}

// Socket is the fixed part of one reply (struct inet_diag_msg).
type Socket struct {
	Family  uint8
	State   uint8  // TCP state number (1 = ESTABLISHED)
	SrcPort uint16 // local port
	DstPort uint16 // peer port
	// RecvQueue is, for an established socket, the bytes received and
	// not yet read by the application (ss's Recv-Q); SendQueue the bytes
	// written and not yet acknowledged by the peer (write_seq − snd_una,
	// ss's Send-Q).
	RecvQueue uint32
	SendQueue uint32
	Inode     uint32
}

// Problems counts what Parse found wrong in a datagram and skipped or
// read around.
type Problems struct {
	// Truncated: a message header or its inet_diag_msg runs past the
	// datagram, or an attribute past its message. What precedes it is
	// kept; a truncated message's socket is dropped, the datagram's
	// remaining messages too.
	Truncated int
	// UnknownAttrs: messages carrying an attribute type this codec does
	// not know (a newer kernel); their sockets are kept.
	UnknownAttrs int
	// Interrupted: messages flagged NLM_F_DUMP_INTR (the socket table
	// changed during the dump, so a socket may be missing or twice).
	Interrupted int
	// OtherMessages: messages of a type that is not a socket, an error
	// or the end (skipped).
	OtherMessages int
}

// Add adds q's counts to p.
func (p *Problems) Add(q Problems) {
	p.Truncated += q.Truncated
	p.UnknownAttrs += q.UnknownAttrs
	p.Interrupted += q.Interrupted
	p.OtherMessages += q.OtherMessages
}

// addDump adds what netlinkdump counted in a dump: datagrams cut short,
// messages flagged NLM_F_DUMP_INTR.
func (p *Problems) addDump(st netlinkdump.Stats) {
	p.Truncated += st.Truncated
	p.Interrupted += st.Interrupted
}

// decode reads one reply message of type typ (payload m, as
// netlinkdump.Walk gives it), calling fn with its socket, and returns
// what was wrong with it. It never reads outside m.
func decode(typ uint16, m []byte, fn func(Socket)) (p Problems) {
	if typ != sockDiagByFamily {
		p.OtherMessages++
		return p
	}
	if len(m) < msgLen {
		p.Truncated++
		return p
	}
	ne, be := binary.NativeEndian, binary.BigEndian
	fn(Socket{
		Family: m[0], State: m[1],
		SrcPort:   be.Uint16(m[4:]),
		DstPort:   be.Uint16(m[6:]),
		RecvQueue: ne.Uint32(m[56:]),
		SendQueue: ne.Uint32(m[60:]),
		Inode:     ne.Uint32(m[68:]),
	})
	switch checkAttrs(m[msgLen:]) {
	case attrsTruncated:
		p.Truncated++
	case attrsUnknown:
		p.UnknownAttrs++
	}
	return p
}

// parse walks one datagram b of replies to the request with sequence
// number seq as Dump does (netlinkdump.Walk), decoding each message.
// done reports the end of the dump; err is the walk's (a
// netlinkdump.Errno for a refusal).
func parse(b []byte, seq uint32, fn func(Socket)) (done bool, p Problems, err error) {
	var st netlinkdump.Stats
	done, err = netlinkdump.Walk(b, seq, &st, func(typ uint16, m []byte) error {
		p.Add(decode(typ, m, fn))
		return nil
	})
	p.addDump(st)
	return done, p, err
}

type attrCheck int

const (
	attrsOK attrCheck = iota
	attrsTruncated
	attrsUnknown
)

// checkAttrs walks the attributes after an inet_diag_msg: the queues are
// in the fixed part, so attributes are only checked, never read.
func checkAttrs(b []byte) attrCheck {
	ne := binary.NativeEndian
	res := attrsOK
	for len(b) > 0 {
		if len(b) < 4 {
			return attrsTruncated
		}
		l, typ := int(ne.Uint16(b)), ne.Uint16(b[2:])&0x3fff // without NLA_F_NESTED / NET_BYTEORDER
		if l < 4 || l > len(b) {
			return attrsTruncated
		}
		if typ > lastKnownAttr {
			res = attrsUnknown
		}
		if a := align4(l); a < len(b) {
			b = b[a:]
		} else {
			b = nil
		}
	}
	return res
}

func align4(n int) int { return (n + 3) &^ 3 }
