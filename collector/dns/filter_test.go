package dns

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/net/dns/dnsmessage"
)

// TestCaptureFilter runs the filter body (without the loopback prologue,
// whose ancillary loads x/net/bpf's VM cannot run) on packets the kernel
// would hand it: what it keeps, and how many bytes. The whole filter runs
// in the kernel in TestCaptureIgnoresOtherTraffic.
func TestCaptureFilter(t *testing.T) {
	prog, err := captureFilter(0)
	if err != nil {
		t.Fatal(err)
	}
	ins := make([]bpf.Instruction, len(prog))
	for i, r := range prog {
		ins[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, 1, "4.3.2.1.in-addr.arpa.", dnsmessage.TypePTR)
	big := append(append([]byte(nil), q...), make([]byte, 1000)...)
	v4 := udpPacket("10.0.0.1", 40000, "10.0.0.53", 53, big)
	later := append([]byte(nil), v4...)
	binary.BigEndian.PutUint16(later[6:], 185)
	v4opts := append([]byte{0x46}, v4[1:20]...) // IHL 6: 4 bytes of options
	v4opts = append(append(v4opts, 1, 1, 1, 0), v4[20:]...)
	v6 := udpPacket("fd00::1", 40001, "fd00::53", 53, q)
	v6frag := append(append(append([]byte(nil), v6[:40]...), protoUDP, 0, 0, 1, 0, 0, 0, 9), v6[40:]...)
	v6frag[6] = ipv6FragmentHeader
	v6later := append([]byte(nil), v6frag...)
	binary.BigEndian.PutUint16(v6later[42:], 1480)
	for _, tc := range []struct {
		name string
		pkt  []byte
		want int
	}{
		{"ipv4 udp to 53 (snapped)", v4, udpSnap},
		{"ipv4 udp from 53", udpPacket("10.0.0.53", 53, "10.0.0.1", 40000, q), 20 + 8 + len(q)},
		{"ipv4 with options", v4opts, udpSnap},
		{"ipv4 tcp", tcpPacket("10.0.0.1", 40000, "10.0.0.53", 53, 1, tcpACK, framed(big)), 20 + 20 + 2 + len(big)},
		{"ipv4 later fragment", later, 0},
		{"ipv4 udp 5353", udpPacket("10.0.0.1", 5353, "224.0.0.251", 5353, q), 0},
		{"ipv4 tcp 80", tcpPacket("10.0.0.1", 40000, "10.0.0.2", 80, 1, tcpACK, q), 0},
		{"ipv4 icmp", ipPacket("10.0.0.1", "10.0.0.2", 1, make([]byte, 64)), 0},
		{"ipv6 udp", v6, len(v6)},
		{"ipv6 tcp from 53", tcpPacket("fd00::53", 53, "fd00::1", 1, 1, tcpACK, nil), 60},
		{"ipv6 first fragment", v6frag, len(v6frag)},
		{"ipv6 later fragment", v6later, 0},
		{"ipv6 udp 443", udpPacket("fd00::1", 40000, "fd00::2", 443, q), 0},
		{"arp-like", []byte{0, 1, 8, 0, 6, 4, 0, 1}, 0},
		{"short", []byte{0x45}, 0},
	} {
		got, err := vm.Run(tc.pkt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got = min(got, len(tc.pkt)) // the kernel keeps at most the packet
		if got != tc.want {
			t.Errorf("%s: filter kept %d bytes, want %d", tc.name, got, tc.want)
		}
	}
}
