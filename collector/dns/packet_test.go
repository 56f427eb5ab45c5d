package dns

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Builders of real wire-format packets for the unit tests, fuzz seeds and
// benchmarks: IPv4/IPv6 + UDP/TCP headers (checksums are not verified by the
// collector and left zero) around DNS messages built with dnsmessage.

func dnsMsg(t testing.TB, h dnsmessage.Header, name string, qtype dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, h)
	if name != "" {
		if err := b.StartQuestions(); err != nil {
			t.Fatal(err)
		}
		if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qtype, Class: dnsmessage.ClassINET}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func query(t testing.TB, id uint16, name string, qtype dnsmessage.Type) []byte {
	return dnsMsg(t, dnsmessage.Header{ID: id, RecursionDesired: true}, name, qtype)
}

func response(t testing.TB, id uint16, name string, qtype dnsmessage.Type, rcode dnsmessage.RCode, tc bool) []byte {
	return dnsMsg(t, dnsmessage.Header{ID: id, Response: true, RCode: rcode, Truncated: tc, RecursionAvailable: true}, name, qtype)
}

// ipPacket wraps an L4 segment in an IPv4 or IPv6 header, by the family of src.
func ipPacket(src, dst string, proto uint8, l4 []byte) []byte {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	if s.Is4() {
		b := make([]byte, 20, 20+len(l4))
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[2:], uint16(20+len(l4)))
		b[8], b[9] = 64, proto
		s4, d4 := s.As4(), d.As4()
		copy(b[12:], s4[:])
		copy(b[16:], d4[:])
		return append(b, l4...)
	}
	b := make([]byte, 40, 40+len(l4))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(l4)))
	b[6], b[7] = proto, 64
	s16, d16 := s.As16(), d.As16()
	copy(b[8:], s16[:])
	copy(b[24:], d16[:])
	return append(b, l4...)
}

func udpPacket(src string, sport uint16, dst string, dport uint16, payload []byte) []byte {
	l4 := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint16(l4[4:], uint16(8+len(payload)))
	return ipPacket(src, dst, protoUDP, append(l4, payload...))
}

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

func tcpPacket(src string, sport uint16, dst string, dport uint16, seq uint32, flags uint8, payload []byte) []byte {
	l4 := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint32(l4[4:], seq)
	l4[12] = 5 << 4
	l4[13] = flags
	return ipPacket(src, dst, protoTCP, append(l4, payload...))
}

// framed prefixes each message with its 2-byte TCP length.
func framed(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}
