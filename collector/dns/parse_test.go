package dns

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// TestParsePacket guards the IP and UDP/TCP parser on what the capture
// filter passes (first fragments, IPv6 fragment headers, snapped packets)
// and on what it must refuse, each with its fixed error.
func TestParsePacket(t *testing.T) {
	q := query(t, 7, "4.3.2.1.in-addr.arpa.", dnsmessage.TypePTR)
	v4 := udpPacket("10.0.0.1", 40000, "10.0.0.53", 53, q)

	// The first fragment of a fragmented datagram: MF set, offset 0, the
	// UDP length larger than what the packet carries.
	firstFrag := append([]byte(nil), v4...)
	firstFrag[6] = 0x20
	binary.BigEndian.PutUint16(firstFrag[24:], 3000)
	laterFrag := append([]byte(nil), v4...)
	binary.BigEndian.PutUint16(laterFrag[6:], 185) // offset 1480

	// IPv6 with a fragment header (first fragment) before UDP.
	v6 := udpPacket("fd00::1", 40001, "fd00::53", 53, q)
	v6frag := append(append(append([]byte(nil), v6[:40]...), protoUDP, 0, 0, 1, 0, 0, 0, 9), v6[40:]...)
	v6frag[6] = ipv6FragmentHeader
	binary.BigEndian.PutUint16(v6frag[4:], uint16(len(v6frag)-40))
	v6later := append([]byte(nil), v6frag...)
	binary.BigEndian.PutUint16(v6later[42:], 1480)

	icmp := ipPacket("10.0.0.1", "10.0.0.2", 1, make([]byte, 8))
	notDNS := udpPacket("10.0.0.1", 40000, "10.0.0.2", 5353, q)
	tcp := tcpPacket("10.0.0.53", 53, "10.0.0.1", 40002, 1000, tcpACK, framed(q))

	for _, tc := range []struct {
		name  string
		pkt   []byte
		err   *parseError
		sport uint16
		proto uint8
		plen  int
	}{
		{"ipv4 udp", v4, nil, 40000, protoUDP, len(q)},
		{"ipv4 first fragment", firstFrag, nil, 40000, protoUDP, len(q)},
		{"ipv4 later fragment", laterFrag, errIPFragment, 0, 0, 0},
		{"ipv4 cut by snap length", v4[:40], nil, 40000, protoUDP, 12},
		{"ipv6 udp", v6, nil, 40001, protoUDP, len(q)},
		{"ipv6 first fragment", v6frag, nil, 40001, protoUDP, len(q)},
		{"ipv6 later fragment", v6later, errIPFragment, 0, 0, 0},
		{"tcp", tcp, nil, 53, protoTCP, len(q) + 2},
		{"icmp", icmp, errIPProtocol, 0, 0, 0},
		{"not port 53", notDNS, errL4Port, 0, 0, 0},
		{"empty", nil, errIPShort, 0, 0, 0},
		{"ipv4 short", v4[:19], errIPShort, 0, 0, 0},
		{"udp header cut", v4[:25], errL4Short, 0, 0, 0},
		{"version 5", append([]byte{0x50}, v4[1:]...), errIPVersion, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p packetInfo
			err := parsePacket(tc.pkt, &p)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if p.SPort != tc.sport || p.Proto != tc.proto || len(p.Payload) != tc.plen {
				t.Errorf("sport %d proto %d payload %d bytes, want %d %d %d", p.SPort, p.Proto, len(p.Payload), tc.sport, tc.proto, tc.plen)
			}
		})
	}
}

// TestParseDNS guards the header and first question: reverse names in any
// case, responses without a question, and malformed questions refused.
func TestParseDNS(t *testing.T) {
	// A question whose name is a compression pointer to itself.
	loop := query(t, 1, "a.", dnsmessage.TypeA)
	loop = append(loop[:12], 0xc0, 12, 0, 1, 0, 1)
	// A label length running past the end.
	badLen := append(query(t, 1, "a.", dnsmessage.TypeA)[:12], 40, 'x', 'y')
	noQuestion := query(t, 1, "", dnsmessage.TypeA)
	formerr := response(t, 9, "", dnsmessage.TypeA, dnsmessage.RCodeFormatError, false)

	for _, tc := range []struct {
		name string
		msg  []byte
		err  *parseError
		want dnsInfo
	}{
		{"reverse v4", query(t, 1, "4.3.2.1.In-Addr.ARPA.", dnsmessage.TypePTR), nil,
			dnsInfo{ID: 1, HasQuestion: true, QType: 12, Reverse: true}},
		{"reverse v6", query(t, 2, "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dnsmessage.TypePTR), nil,
			dnsInfo{ID: 2, HasQuestion: true, QType: 12, Reverse: true}},
		{"forward", query(t, 3, "example.com.", dnsmessage.TypeAAAA), nil,
			dnsInfo{ID: 3, HasQuestion: true, QType: 28}},
		{"nxdomain truncated", response(t, 4, "x.arpa.", dnsmessage.TypePTR, dnsmessage.RCodeNameError, true), nil,
			dnsInfo{ID: 4, Response: true, Truncated: true, RCode: 3, HasQuestion: true, QType: 12}},
		{"response without question", formerr, nil, dnsInfo{ID: 9, Response: true, RCode: 1}},
		{"query without question", noQuestion, errDNSNoQuestion, dnsInfo{}},
		{"short header", []byte{1, 2, 3}, errDNSHeader, dnsInfo{}},
		{"compression loop", loop, errDNSQuestion, dnsInfo{}},
		{"label past end", badLen, errDNSQuestion, dnsInfo{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p dnsmessage.Parser
			var got dnsInfo
			err := parseDNS(&p, tc.msg, &got)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzParsePacket feeds arbitrary bytes through both parsers: no panic, and
// an accepted packet's payload lies inside it.
func FuzzParsePacket(f *testing.F) {
	q := query(f, 7, "4.3.2.1.in-addr.arpa.", dnsmessage.TypePTR)
	f.Add(udpPacket("10.0.0.1", 40000, "10.0.0.53", 53, q))
	f.Add(udpPacket("fd00::1", 40000, "fd00::53", 53, response(f, 7, "a.b.", dnsmessage.TypeA, 3, true)))
	f.Add(tcpPacket("10.0.0.53", 53, "10.0.0.1", 1, 1, tcpACK, framed(q, q)))
	f.Add(udpPacket("10.0.0.1", 40000, "10.0.0.53", 53, append(q[:12:12], 0xc0, 12, 0, 12, 0, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p packetInfo
		if parsePacket(b, &p) != nil {
			return
		}
		if len(p.Payload) > len(b) {
			t.Fatalf("payload %d bytes from a %d-byte packet", len(p.Payload), len(b))
		}
		var parser dnsmessage.Parser
		var m dnsInfo
		if err := parseDNS(&parser, p.Payload, &m); err != nil && err.kind == "" {
			t.Fatalf("unclassified error %v", err)
		}
	})
}
