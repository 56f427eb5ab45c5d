package dns

import (
	"encoding/binary"
	"unsafe"
)

// DNS over TCP (RFC 1035 4.2.2, RFC 7766) frames each message with a 2-byte
// length. A segment may carry several messages, and a message may span
// segments, so each direction of a connection keeps a little state: where
// the next message starts and the first dnsKeep bytes of the current one.
// Only the header and first question are parsed, so the rest of a long
// message is counted, never stored: a flow's memory is fixed.

// dnsKeep bytes hold any DNS header (12) plus first question (a name of at
// most 255 bytes, type and class): 271 bytes.
const dnsKeep = 272

type flowKey struct {
	Src, Dst     addr
	SPort, DPort uint16
}

type tcpFlow struct {
	key      flowKey
	next     uint32 // sequence number of the next byte expected
	lastSeen int64
	lenHave  uint8 // bytes of the 2-byte length prefix read so far
	lenBuf   [2]byte
	inMsg    bool   // the prefix is read; msgLen bytes of message follow
	msgLen   uint16 // length of the current message
	msgGot   uint16 // bytes of it seen
	headLen  uint16 // bytes of it kept in head
	head     [dnsKeep]byte
}

// tcpFlowSize is the memory one tracked connection direction costs.
const tcpFlowSize = int(unsafe.Sizeof(tcpFlow{})) + 64 // + its map entry

// tcpTable tracks TCP connection directions to or from port 53, at most
// len(pool). A direction is tracked from its SYN: without it the message
// boundaries are unknown. Segments that cannot be placed — of a connection
// opened before the capture started, after a gap in the sequence (a
// dropped or lost packet), or beyond the table's capacity — are counted in
// unsynced and skipped. Not safe for concurrent use.
type tcpTable struct {
	pool     []tcpFlow
	free     []int32
	byKey    map[flowKey]int32
	unsynced uint64
	// deliver receives each message's first bytes (at most dnsKeep),
	// with the segment that completed it.
	deliver func(p *packetInfo, msg []byte, ts int64)
}

func newTCPTable(size int, deliver func(p *packetInfo, msg []byte, ts int64)) *tcpTable {
	t := &tcpTable{
		pool:    make([]tcpFlow, size),
		free:    make([]int32, size),
		byKey:   make(map[flowKey]int32, size),
		deliver: deliver,
	}
	for i := range t.free {
		t.free[i] = int32(size - 1 - i)
	}
	return t
}

// segment processes one TCP segment to or from port 53.
func (t *tcpTable) segment(p *packetInfo, ts int64) {
	k := flowKey{Src: p.Src, Dst: p.Dst, SPort: p.SPort, DPort: p.DPort}
	i, ok := t.byKey[k]
	payload, seq := p.Payload, p.Seq
	if p.SYN {
		if !ok {
			if len(t.free) == 0 {
				t.unsynced++
				return
			}
			i = t.free[len(t.free)-1]
			t.free = t.free[:len(t.free)-1]
			t.byKey[k] = i
			ok = true
		}
		f := &t.pool[i]
		*f = tcpFlow{key: k, next: seq + 1} // head is overwritten before use; clearing it keeps no old bytes
		seq++                               // the SYN occupies one sequence number; a TFO payload follows it
	}
	if !ok {
		if len(payload) > 0 {
			t.unsynced++
		}
		return
	}
	f := &t.pool[i]
	f.lastSeen = ts
	if d := int32(seq - f.next); d > 0 {
		// Bytes between f.next and seq were never seen: the boundary of
		// the next message is lost.
		t.unsynced++
		t.drop(k, i)
		return
	} else if d < 0 {
		// A retransmission or overlap: skip what was already consumed.
		// behind is -d, computed without int32's overflow at d = -2^31.
		if behind := uint64(f.next - seq); behind >= uint64(len(payload)) {
			payload = nil
		} else {
			payload = payload[behind:]
		}
	}
	f.next += uint32(len(payload))
	t.consume(f, p, payload, ts)
	if p.FIN || p.RST {
		t.drop(k, i)
	}
}

func (t *tcpTable) consume(f *tcpFlow, p *packetInfo, b []byte, ts int64) {
	for len(b) > 0 {
		if !f.inMsg {
			f.lenBuf[f.lenHave] = b[0]
			f.lenHave++
			b = b[1:]
			if f.lenHave == 2 {
				f.lenHave = 0
				f.msgLen = binary.BigEndian.Uint16(f.lenBuf[:])
				f.msgGot, f.headLen = 0, 0
				f.inMsg = f.msgLen > 0 // an empty message has nothing to parse
			}
			continue
		}
		n := min(len(b), int(f.msgLen-f.msgGot))
		if keep := min(n, dnsKeep-int(f.headLen)); keep > 0 {
			copy(f.head[f.headLen:], b[:keep])
			f.headLen += uint16(keep)
		}
		f.msgGot += uint16(n)
		b = b[n:]
		if f.msgGot == f.msgLen {
			f.inMsg = false
			t.deliver(p, f.head[:f.headLen], ts)
		}
	}
}

func (t *tcpTable) drop(k flowKey, i int32) {
	delete(t.byKey, k)
	t.free = append(t.free, i)
}

// expire forgets directions idle since before cutoff (Unix ns): closed
// without a FIN or RST we saw, or just quiet.
func (t *tcpTable) expire(cutoff int64) {
	for k, i := range t.byKey {
		if t.pool[i].lastSeen < cutoff {
			t.drop(k, i)
		}
	}
}
