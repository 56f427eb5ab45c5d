package host

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The parsers of the rtnetlink replies the egress collector and the
// sampler read (include/uapi/linux/rtnetlink.h, if_link.h,
// pkt_sched.h, gen_stats.h): pure functions over the bytes of one
// datagram, so they are unit-tested and fuzzed without a socket. Netlink
// is in the host's byte order; every length is checked before it is used,
// so a truncated or garbled reply is an error, never a panic, and an
// attribute this code does not know is skipped.

// errNetlinkShort is wrapped by every error about a message or attribute
// shorter than its header says (a truncated reply).
var errNetlinkShort = errors.New("netlink message truncated")

// nlaTypeMask clears NLA_F_NESTED and NLA_F_NET_BYTEORDER off an
// attribute's type (NLA_TYPE_MASK).
const nlaTypeMask = 0x3fff

// tcHRoot is TC_H_ROOT, the parent of an interface's root qdisc.
const tcHRoot = 0xffffffff

func nlAlign(n int) int { return (n + 3) &^ 3 }

// nlAttrs iterates the attributes (struct nlattr: len u16, type u16, value,
// 4-byte aligned) of b. The type has the nested and byte-order flags
// masked off.
type nlAttrs struct {
	b   []byte
	Typ uint16
	Val []byte
	err error
}

func (a *nlAttrs) Next() bool {
	if len(a.b) == 0 || a.err != nil {
		return false
	}
	if len(a.b) < 4 {
		a.err = fmt.Errorf("%w: %d bytes of an attribute header", errNetlinkShort, len(a.b))
		return false
	}
	n := int(binary.NativeEndian.Uint16(a.b))
	if n < 4 || n > len(a.b) {
		a.err = fmt.Errorf("%w: attribute length %d, %d bytes left", errNetlinkShort, n, len(a.b))
		return false
	}
	a.Typ = binary.NativeEndian.Uint16(a.b[2:]) & nlaTypeMask
	a.Val = a.b[4:n]
	if al := nlAlign(n); al < len(a.b) {
		a.b = a.b[al:]
	} else {
		a.b = nil
	}
	return true
}

// Err is the error that stopped the iteration, nil at a clean end.
func (a *nlAttrs) Err() error { return a.err }

// cString is a NUL-terminated attribute value without its terminator.
func cString(v []byte) []byte {
	for i, c := range v {
		if c == 0 {
			return v[:i]
		}
	}
	return v
}

// linkStats are the transmit fields of struct rtnl_link_stats64, the
// counters the kernel keeps per interface (dev_get_stats()): what ip -s
// link prints as TX.
type linkStats struct {
	TxPackets, TxBytes, TxErrors, TxDropped uint64
}

// Offsets in struct rtnl_link_stats64 (all __u64): rx_packets,
// tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors, rx_dropped,
// tx_dropped, …; the struct has grown at its end since 2.6.35, never in
// front.
const (
	stats64TxPackets = 8
	stats64TxBytes   = 24
	stats64TxErrors  = 40
	stats64TxDropped = 56
	stats64MinLen    = 64
)

func parseStats64(v []byte) (linkStats, error) {
	if len(v) < stats64MinLen {
		return linkStats{}, fmt.Errorf("%w: rtnl_link_stats64 of %d bytes, want at least %d", errNetlinkShort, len(v), stats64MinLen)
	}
	return linkStats{
		TxPackets: binary.NativeEndian.Uint64(v[stats64TxPackets:]),
		TxBytes:   binary.NativeEndian.Uint64(v[stats64TxBytes:]),
		TxErrors:  binary.NativeEndian.Uint64(v[stats64TxErrors:]),
		TxDropped: binary.NativeEndian.Uint64(v[stats64TxDropped:]),
	}, nil
}

// netLink is one interface of an RTM_NEWLINK message: its index, its name
// (aliasing the message) and its transmit counters (HasStats false when
// the message carries no IFLA_STATS64).
type netLink struct {
	Index    int32
	Name     []byte
	Stats    linkStats
	HasStats bool
}

// parseLinkMessage parses the body of an RTM_NEWLINK message: struct
// ifinfomsg (16 bytes: family, pad, type, index i32, flags, change), then
// attributes, of which IFLA_IFNAME and IFLA_STATS64 are read.
func parseLinkMessage(body []byte) (netLink, error) {
	var l netLink
	if len(body) < unix.SizeofIfInfomsg {
		return l, fmt.Errorf("%w: ifinfomsg of %d bytes", errNetlinkShort, len(body))
	}
	l.Index = int32(binary.NativeEndian.Uint32(body[4:]))
	a := nlAttrs{b: body[unix.SizeofIfInfomsg:]}
	for a.Next() {
		switch a.Typ {
		case unix.IFLA_IFNAME:
			l.Name = cString(a.Val)
		case unix.IFLA_STATS64:
			s, err := parseStats64(a.Val)
			if err != nil {
				return l, err
			}
			l.Stats, l.HasStats = s, true
		}
	}
	if err := a.Err(); err != nil {
		return l, err
	}
	if len(l.Name) == 0 {
		return l, fmt.Errorf("interface %d: no IFLA_IFNAME", l.Index)
	}
	return l, nil
}

// sizeofIfStatsMsg is struct if_stats_msg: family u8, pad u8, pad u16,
// ifindex u32, filter_mask u32 (RTM_GETSTATS, 4.7+).
const sizeofIfStatsMsg = 12

// parseStatsMessage parses the body of an RTM_NEWSTATS message asked for
// with the IFLA_STATS_LINK_64 filter: the interface's index and its
// rtnl_link_stats64.
func parseStatsMessage(body []byte) (index int32, s linkStats, err error) {
	if len(body) < sizeofIfStatsMsg {
		return 0, s, fmt.Errorf("%w: if_stats_msg of %d bytes", errNetlinkShort, len(body))
	}
	index = int32(binary.NativeEndian.Uint32(body[4:]))
	a := nlAttrs{b: body[sizeofIfStatsMsg:]}
	found := false
	for a.Next() {
		if a.Typ == unix.IFLA_STATS_LINK_64 {
			if s, err = parseStats64(a.Val); err != nil {
				return index, s, err
			}
			found = true
		}
	}
	if err := a.Err(); err != nil {
		return index, s, err
	}
	if !found {
		return index, s, fmt.Errorf("interface %d: no IFLA_STATS_LINK_64", index)
	}
	return index, s, nil
}

// qdiscStats are a qdisc's counters from TCA_STATS2 (struct
// gnet_stats_queue: qlen, backlog, drops, requeues, overlimits, all
// __u32, so they wrap at 2^32 on a long-lived qdisc).
type qdiscStats struct {
	Backlog, Qlen, Drops, Requeues, Overlimits uint32
}

// netQdisc is one qdisc of an RTM_NEWQDISC message: its interface, handle
// and parent, kind (aliasing the message) and queue statistics (HasStats
// false without TCA_STATS2/TCA_STATS_QUEUE).
type netQdisc struct {
	Index          int32
	Handle, Parent uint32
	Kind           []byte
	Stats          qdiscStats
	HasStats       bool
}

// Root reports whether the qdisc is its interface's root (egress) qdisc,
// not a class's child or the ingress qdisc.
func (q netQdisc) Root() bool { return q.Parent == tcHRoot }

// sizeofTcMsg is struct tcmsg: family u8, pad [3]u8, ifindex i32, handle
// u32, parent u32, info u32.
const sizeofTcMsg = 20

// Attributes of include/uapi/linux/gen_stats.h, nested in TCA_STATS2.
const (
	tcaStatsQueue   = 3 // TCA_STATS_QUEUE: struct gnet_stats_queue
	gnetQueueMinLen = 20
)

// parseQdiscMessage parses the body of an RTM_NEWQDISC message: struct
// tcmsg, then TCA_KIND and TCA_STATS2, whose TCA_STATS_QUEUE gives
// backlog, qlen, drops, requeues and overlimits. For mq and mqprio the
// kernel sums the child queues' counters into the root's (mq_dump()).
func parseQdiscMessage(body []byte) (netQdisc, error) {
	var q netQdisc
	if len(body) < sizeofTcMsg {
		return q, fmt.Errorf("%w: tcmsg of %d bytes", errNetlinkShort, len(body))
	}
	q.Index = int32(binary.NativeEndian.Uint32(body[4:]))
	q.Handle = binary.NativeEndian.Uint32(body[8:])
	q.Parent = binary.NativeEndian.Uint32(body[12:])
	a := nlAttrs{b: body[sizeofTcMsg:]}
	for a.Next() {
		switch a.Typ {
		case unix.TCA_KIND:
			q.Kind = cString(a.Val)
		case unix.TCA_STATS2:
			s := nlAttrs{b: a.Val}
			for s.Next() {
				if s.Typ != tcaStatsQueue {
					continue
				}
				v := s.Val
				if len(v) < gnetQueueMinLen {
					return q, fmt.Errorf("%w: gnet_stats_queue of %d bytes", errNetlinkShort, len(v))
				}
				q.Stats = qdiscStats{
					Qlen:       binary.NativeEndian.Uint32(v[0:]),
					Backlog:    binary.NativeEndian.Uint32(v[4:]),
					Drops:      binary.NativeEndian.Uint32(v[8:]),
					Requeues:   binary.NativeEndian.Uint32(v[12:]),
					Overlimits: binary.NativeEndian.Uint32(v[16:]),
				}
				q.HasStats = true
			}
			if err := s.Err(); err != nil {
				return q, err
			}
		}
	}
	if err := a.Err(); err != nil {
		return q, err
	}
	if len(q.Kind) == 0 {
		return q, fmt.Errorf("qdisc %x on interface %d: no TCA_KIND", q.Handle, q.Index)
	}
	return q, nil
}
