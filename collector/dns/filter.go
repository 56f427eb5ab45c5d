package dns

import (
	"fmt"
	"net"

	"golang.org/x/net/bpf"
)

// The classic BPF filter of the capture socket. It runs in the kernel on
// every packet of every captured interface, so it is the reason non-DNS
// traffic never reaches user space. A SOCK_DGRAM packet socket runs its
// filter on the packet from the network header on, so offsets are from
// the IP header.

// Snap lengths: how much of an accepted packet is copied to user space. A
// UDP DNS message is parsed only up to its first question, which ends
// within 60 (IPv4 header with options) + 8 (UDP) + 12 + 259 bytes; TCP
// needs whole segments to follow the message framing.
const (
	udpSnap = 512
	tcpSnap = 1 << 18
)

// packetOutgoing is PACKET_OUTGOING, the pkttype of a packet this host sends.
const packetOutgoing = 4

// The filter is written with symbolic forward jumps: a label marks the
// next instruction, jumpIf and jump name labels ("" is the next
// instruction), and assemble resolves them to skips.
type label string

type jumpIf struct {
	cond            bpf.JumpTest
	val             uint32
	ifTrue, ifFalse label
}

type jump struct{ to label }

func assemble(prog []any) ([]bpf.RawInstruction, error) {
	at := map[label]int{} // the index of the instruction a label marks
	n := 0
	for _, x := range prog {
		if l, ok := x.(label); ok {
			at[l] = n
		} else {
			n++
		}
	}
	var out []bpf.Instruction
	var bad error
	skip := func(to label) uint32 {
		if to == "" {
			return 0
		}
		t, ok := at[to]
		if !ok || t <= len(out) {
			bad = fmt.Errorf("bpf filter: bad jump to %q", to)
		}
		return uint32(t - len(out) - 1)
	}
	for _, x := range prog {
		switch x := x.(type) {
		case jump:
			out = append(out, bpf.Jump{Skip: skip(x.to)})
		case jumpIf:
			out = append(out, bpf.JumpIf{Cond: x.cond, Val: x.val, SkipTrue: uint8(skip(x.ifTrue)), SkipFalse: uint8(skip(x.ifFalse))})
		case bpf.Instruction:
			out = append(out, x)
		}
	}
	if bad != nil {
		return nil, bad
	}
	return bpf.Assemble(out)
}

// captureFilter builds the filter: IPv4 or IPv6 (directly or behind one
// fragment header), not a non-first fragment, UDP or TCP with either port
// 53. If loopback > 0 (the loopback interface's index) it first drops the
// PACKET_OUTGOING copy of loopback packets: a packet sent on lo is seen
// leaving and again arriving, and must be counted once.
func captureFilter(loopback int) ([]bpf.RawInstruction, error) {
	var prog []any
	if loopback > 0 {
		prog = append(prog,
			bpf.LoadExtension{Num: bpf.ExtInterfaceIndex},
			jumpIf{bpf.JumpEqual, uint32(loopback), "", "body"},
			bpf.LoadExtension{Num: bpf.ExtType},
			jumpIf{bpf.JumpEqual, packetOutgoing, "drop", "body"},
		)
	}
	return assemble(append(prog,
		label("body"),
		bpf.LoadAbsolute{Off: 0, Size: 1}, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		jumpIf{bpf.JumpEqual, 0x40, "v4", ""},
		jumpIf{bpf.JumpEqual, 0x60, "v6", "drop"},

		label("v4"),
		bpf.LoadAbsolute{Off: 6, Size: 2},
		jumpIf{bpf.JumpBitsSet, 0x1fff, "drop", ""}, // fragment offset: not the first fragment
		bpf.LoadAbsolute{Off: 9, Size: 1}, bpf.StoreScratch{Src: bpf.RegA, N: 0},
		jumpIf{bpf.JumpEqual, protoUDP, "v4ports", ""},
		jumpIf{bpf.JumpEqual, protoTCP, "v4ports", "drop"},
		label("v4ports"),
		bpf.LoadMemShift{Off: 0}, // X = IHL * 4
		jump{"ports"},

		label("v6"),
		bpf.LoadAbsolute{Off: 6, Size: 1}, bpf.StoreScratch{Src: bpf.RegA, N: 0},
		jumpIf{bpf.JumpEqual, protoUDP, "v6direct", ""},
		jumpIf{bpf.JumpEqual, protoTCP, "v6direct", ""},
		jumpIf{bpf.JumpEqual, ipv6FragmentHeader, "v6frag", "drop"},
		label("v6direct"),
		bpf.LoadConstant{Dst: bpf.RegX, Val: 40},
		jump{"ports"},
		label("v6frag"),
		bpf.LoadAbsolute{Off: 42, Size: 2},
		jumpIf{bpf.JumpBitsSet, 0xfff8, "drop", ""},
		bpf.LoadAbsolute{Off: 40, Size: 1}, bpf.StoreScratch{Src: bpf.RegA, N: 0},
		jumpIf{bpf.JumpEqual, protoUDP, "v6fragports", ""},
		jumpIf{bpf.JumpEqual, protoTCP, "v6fragports", "drop"},
		label("v6fragports"),
		bpf.LoadConstant{Dst: bpf.RegX, Val: 48},

		label("ports"),
		bpf.LoadIndirect{Off: 0, Size: 2},
		jumpIf{bpf.JumpEqual, 53, "accept", ""},
		bpf.LoadIndirect{Off: 2, Size: 2},
		jumpIf{bpf.JumpEqual, 53, "accept", "drop"},

		// accept comes before drop: the kernel's check that scratch memory
		// is written before it is read scans linearly, and would otherwise
		// carry the paths into drop (no store yet) into accept's load.
		label("accept"),
		bpf.LoadScratch{Dst: bpf.RegA, N: 0},
		jumpIf{bpf.JumpEqual, protoUDP, "udp", ""},
		bpf.RetConstant{Val: tcpSnap},
		label("udp"),
		bpf.RetConstant{Val: udpSnap},
		label("drop"),
		bpf.RetConstant{Val: 0},
	))
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
