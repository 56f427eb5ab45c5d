package dns

import (
	"encoding/binary"
	"errors"

	"golang.org/x/net/dns/dnsmessage"
)

// This file parses what the capture socket delivers: an IPv4 or IPv6 packet
// from its network header on (SOCK_DGRAM packet sockets strip the link
// layer), its UDP or TCP header, and the DNS header and first question of a
// message. Nothing here touches Prometheus or the socket, so it is unit-tested
// and fuzzed on its own. Every error is one of the fixed values below, so a
// flood of hostile packets costs no allocation and is counted by kind.

const (
	protoTCP = 6
	protoUDP = 17

	ipv6FragmentHeader = 44
)

// parseError is an error of parsePacket or parseDNS: a fixed value, with
// the Problems kind it is counted under.
type parseError struct{ kind, msg string }

func (e *parseError) Error() string { return e.msg }

var (
	errIPShort       = &parseError{"dns_ip_length", "ip: packet shorter than its header"}
	errIPVersion     = &parseError{"dns_ip_version", "ip: version is neither 4 nor 6"}
	errIPLength      = &parseError{"dns_ip_length", "ip: total length shorter than the header"}
	errIPFragment    = &parseError{"dns_ip_fragment", "ip: non-first fragment"}
	errIPProtocol    = &parseError{"dns_ip_protocol", "ip: protocol is neither UDP nor TCP"}
	errL4Short       = &parseError{"dns_l4_header", "l4: UDP or TCP header cut short"}
	errL4Port        = &parseError{"dns_l4_header", "l4: neither port is 53"}
	errDNSHeader     = &parseError{"dns_header", "dns: message shorter than the 12-byte header"}
	errDNSNoQuestion = &parseError{"dns_no_question", "dns: query without a question"}
	errDNSQuestion   = &parseError{"dns_question", "dns: first question malformed (bad label, compression loop or pointer, cut short)"}
)

// addr is an IP address in 16 bytes; IPv4 addresses are stored v4-mapped
// (::ffff:a.b.c.d), as net/netip does, so one key type serves both families.
type addr [16]byte

// packetInfo is one parsed packet. Payload aliases the packet buffer.
type packetInfo struct {
	Src, Dst     addr
	SPort, DPort uint16
	Proto        uint8 // protoUDP or protoTCP
	// TCP only.
	Seq      uint32
	SYN, FIN bool
	RST      bool
	// Payload is the UDP or TCP payload as captured: a UDP datagram cut by
	// the capture's snap length, or the first fragment of a fragmented
	// one, is shorter than its UDP length says. DNS needs only the header
	// and the first question, which fit in any first fragment.
	Payload []byte
}

// parsePacket parses b, which starts at the IP header, into p. It accepts
// exactly what the capture filter accepts: IPv4 or IPv6 (directly or after
// one fragment header), not a non-first fragment, UDP or TCP, one port 53.
func parsePacket(b []byte, p *packetInfo) *parseError {
	if len(b) < 1 {
		return errIPShort
	}
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return errIPShort
		}
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:4]))
		if ihl < 20 || len(b) < ihl {
			return errIPShort
		}
		if total < ihl {
			return errIPLength
		}
		if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 {
			return errIPFragment
		}
		p.Proto = b[9]
		p.Src = addr{10: 0xff, 11: 0xff}
		p.Dst = addr{10: 0xff, 11: 0xff}
		copy(p.Src[12:], b[12:16])
		copy(p.Dst[12:], b[16:20])
		l4 = b[ihl:min(total, len(b))]
	case 6:
		if len(b) < 40 {
			return errIPShort
		}
		next := b[6]
		end := min(40+int(binary.BigEndian.Uint16(b[4:6])), len(b))
		copy(p.Src[:], b[8:24])
		copy(p.Dst[:], b[24:40])
		off := 40
		if next == ipv6FragmentHeader {
			if end < 48 {
				return errIPShort
			}
			if binary.BigEndian.Uint16(b[42:44])&0xfff8 != 0 {
				return errIPFragment
			}
			next = b[40]
			off = 48
		}
		p.Proto = next
		l4 = b[off:end]
	default:
		return errIPVersion
	}
	switch p.Proto {
	case protoUDP:
		if len(l4) < 8 {
			return errL4Short
		}
		p.SPort = binary.BigEndian.Uint16(l4[0:2])
		p.DPort = binary.BigEndian.Uint16(l4[2:4])
		ulen := int(binary.BigEndian.Uint16(l4[4:6]))
		if ulen < 8 {
			return errL4Short
		}
		p.Payload = l4[8:min(ulen, len(l4))]
	case protoTCP:
		if len(l4) < 20 {
			return errL4Short
		}
		doff := int(l4[12]>>4) * 4
		if doff < 20 || len(l4) < doff {
			return errL4Short
		}
		p.SPort = binary.BigEndian.Uint16(l4[0:2])
		p.DPort = binary.BigEndian.Uint16(l4[2:4])
		p.Seq = binary.BigEndian.Uint32(l4[4:8])
		flags := l4[13]
		p.FIN, p.SYN, p.RST = flags&0x01 != 0, flags&0x02 != 0, flags&0x04 != 0
		p.Payload = l4[doff:]
	default:
		return errIPProtocol
	}
	if p.SPort != 53 && p.DPort != 53 {
		return errL4Port
	}
	return nil
}

// dnsInfo is what the collector uses of a DNS message.
type dnsInfo struct {
	ID        uint16
	Response  bool
	Truncated bool
	RCode     uint8 // 0–15 (the header's 4 bits; extended RCODEs live in EDNS and are not read)
	// HasQuestion is false for a response with no question section (some
	// servers answer FORMERR or NOTIMP that way); the qtype is then the
	// matched query's.
	HasQuestion bool
	QType       uint16
	// Reverse is true when the question's name is under in-addr.arpa or
	// ip6.arpa: a lookup of an address's name.
	Reverse bool
}

// parseDNS reads the header and first question of msg with p, which the
// caller reuses across messages (a Parser holds no reference after the next
// Start). It allocates nothing on success.
func parseDNS(p *dnsmessage.Parser, msg []byte, out *dnsInfo) *parseError {
	h, err := p.Start(msg)
	if err != nil {
		return errDNSHeader
	}
	*out = dnsInfo{ID: h.ID, Response: h.Response, Truncated: h.Truncated, RCode: uint8(h.RCode & 0x0f)}
	q, err := p.Question()
	switch {
	case errors.Is(err, dnsmessage.ErrSectionDone):
		if !h.Response {
			return errDNSNoQuestion
		}
		return nil
	case err != nil:
		return errDNSQuestion
	}
	out.HasQuestion = true
	out.QType = uint16(q.Type)
	out.Reverse = isReverseName(q.Name.Data[:q.Name.Length])
	return nil
}

// isReverseName reports whether a presentation-format name ("4.3.2.1.in-
// addr.arpa.") is under in-addr.arpa or ip6.arpa, ignoring ASCII case (DNS
// names are case-insensitive and some resolvers randomise case).
func isReverseName(name []byte) bool {
	return hasSuffixFold(name, ".in-addr.arpa.") || hasSuffixFold(name, ".ip6.arpa.")
}

func hasSuffixFold(s []byte, suffix string) bool {
	if len(s) < len(suffix) {
		return false
	}
	s = s[len(s)-len(suffix):]
	for i := 0; i < len(suffix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != suffix[i] {
			return false
		}
	}
	return true
}
