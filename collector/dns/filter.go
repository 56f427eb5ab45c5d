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

// filterProgram is a tiny assembler: instructions with symbolic forward
// jumps, resolved to skips by assemble.
type filterProgram struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  []filterJump
}

type filterJump struct {
	at        int
	tTrue     string // for JumpIf: target when true ("" = next); for Jump: the target
	tFalse    string // for JumpIf: target when false ("" = next)
	unconditn bool
}

func (p *filterProgram) label(name string) { p.labels[name] = len(p.ins) }
func (p *filterProgram) add(ins ...bpf.Instruction) {
	p.ins = append(p.ins, ins...)
}
func (p *filterProgram) jumpIf(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	p.jumps = append(p.jumps, filterJump{at: len(p.ins), tTrue: ifTrue, tFalse: ifFalse})
	p.ins = append(p.ins, bpf.JumpIf{Cond: cond, Val: val})
}
func (p *filterProgram) jump(to string) {
	p.jumps = append(p.jumps, filterJump{at: len(p.ins), tTrue: to, unconditn: true})
	p.ins = append(p.ins, bpf.Jump{})
}

func (p *filterProgram) assemble() ([]bpf.RawInstruction, error) {
	skip := func(from int, to string) (int, error) {
		if to == "" {
			return 0, nil
		}
		t, ok := p.labels[to]
		if !ok || t <= from {
			return 0, fmt.Errorf("bpf filter: bad jump to %q", to)
		}
		return t - from - 1, nil
	}
	for _, j := range p.jumps {
		st, err := skip(j.at, j.tTrue)
		if err != nil {
			return nil, err
		}
		if j.unconditn {
			p.ins[j.at] = bpf.Jump{Skip: uint32(st)}
			continue
		}
		sf, err := skip(j.at, j.tFalse)
		if err != nil {
			return nil, err
		}
		ji := p.ins[j.at].(bpf.JumpIf)
		ji.SkipTrue, ji.SkipFalse = uint8(st), uint8(sf)
		p.ins[j.at] = ji
	}
	return bpf.Assemble(p.ins)
}

// captureFilter builds the filter: IPv4 or IPv6 (directly or behind one
// fragment header), not a non-first fragment, UDP or TCP with either port
// 53. If loopback > 0 (the loopback interface's index) it first drops the
// PACKET_OUTGOING copy of loopback packets: a packet sent on lo is seen
// leaving and again arriving, and must be counted once.
func captureFilter(loopback int) ([]bpf.RawInstruction, error) {
	p := &filterProgram{labels: map[string]int{}}
	if loopback > 0 {
		p.add(bpf.LoadExtension{Num: bpf.ExtInterfaceIndex})
		p.jumpIf(bpf.JumpEqual, uint32(loopback), "", "body")
		p.add(bpf.LoadExtension{Num: bpf.ExtType})
		p.jumpIf(bpf.JumpEqual, packetOutgoing, "drop", "body")
	}
	p.label("body")
	p.add(bpf.LoadAbsolute{Off: 0, Size: 1}, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0})
	p.jumpIf(bpf.JumpEqual, 0x40, "v4", "")
	p.jumpIf(bpf.JumpEqual, 0x60, "v6", "drop")

	p.label("v4")
	p.add(bpf.LoadAbsolute{Off: 6, Size: 2})
	p.jumpIf(bpf.JumpBitsSet, 0x1fff, "drop", "") // fragment offset: not the first fragment
	p.add(bpf.LoadAbsolute{Off: 9, Size: 1}, bpf.StoreScratch{Src: bpf.RegA, N: 0})
	p.jumpIf(bpf.JumpEqual, protoUDP, "v4ports", "")
	p.jumpIf(bpf.JumpEqual, protoTCP, "v4ports", "drop")
	p.label("v4ports")
	p.add(bpf.LoadMemShift{Off: 0}) // X = IHL * 4
	p.jump("ports")

	p.label("v6")
	p.add(bpf.LoadAbsolute{Off: 6, Size: 1}, bpf.StoreScratch{Src: bpf.RegA, N: 0})
	p.jumpIf(bpf.JumpEqual, protoUDP, "v6direct", "")
	p.jumpIf(bpf.JumpEqual, protoTCP, "v6direct", "")
	p.jumpIf(bpf.JumpEqual, ipv6FragmentHeader, "v6frag", "drop")
	p.label("v6direct")
	p.add(bpf.LoadConstant{Dst: bpf.RegX, Val: 40})
	p.jump("ports")
	p.label("v6frag")
	p.add(bpf.LoadAbsolute{Off: 42, Size: 2})
	p.jumpIf(bpf.JumpBitsSet, 0xfff8, "drop", "")
	p.add(bpf.LoadAbsolute{Off: 40, Size: 1}, bpf.StoreScratch{Src: bpf.RegA, N: 0})
	p.jumpIf(bpf.JumpEqual, protoUDP, "v6fragports", "")
	p.jumpIf(bpf.JumpEqual, protoTCP, "v6fragports", "drop")
	p.label("v6fragports")
	p.add(bpf.LoadConstant{Dst: bpf.RegX, Val: 48})

	p.label("ports")
	p.add(bpf.LoadIndirect{Off: 0, Size: 2})
	p.jumpIf(bpf.JumpEqual, 53, "accept", "")
	p.add(bpf.LoadIndirect{Off: 2, Size: 2})
	p.jumpIf(bpf.JumpEqual, 53, "accept", "drop")

	// accept comes before drop: the kernel's check that scratch memory is
	// written before it is read scans linearly, and would otherwise carry
	// the paths into drop (no store yet) into accept's load.
	p.label("accept")
	p.add(bpf.LoadScratch{Dst: bpf.RegA, N: 0})
	p.jumpIf(bpf.JumpEqual, protoUDP, "udp", "")
	p.add(bpf.RetConstant{Val: tcpSnap})
	p.label("udp")
	p.add(bpf.RetConstant{Val: udpSnap})
	p.label("drop")
	p.add(bpf.RetConstant{Val: 0})
	return p.assemble()
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
