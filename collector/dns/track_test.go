package dns

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/stall-exporter/stall_exporter/collector"
)

func newTestTracker(maxPending, maxResolvers int, timeout time.Duration) *tracker {
	o := options{maxPending: maxPending, maxTCPFlows: 4, maxResolvers: maxResolvers, timeout: timeout}
	return newTracker(o, collector.NewProblems("dns", slog.New(slog.DiscardHandler)))
}

// histogram returns the sample count and sum of one qtype's duration.
func histogram(t *testing.T, tr *tracker, qt int) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := tr.duration[qt].(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

const ms = int64(time.Millisecond)

// TestTrackerUDP guards the counts of the UDP path: matched, retransmitted,
// timed-out, late and unmatched queries, resolvers beyond the label bound,
// latency from the first send, and a malformed packet counted once.
func TestTrackerUDP(t *testing.T) {
	tr := newTestTracker(16, 1, time.Second)
	ptr := func(id uint16) []byte { return query(t, id, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR) }
	c, s, s2 := "192.0.2.10", "192.0.2.53", "fd00::53"

	tr.handle(udpPacket(c, 40000, s, 53, ptr(1)), 1000*ms)
	tr.handle(udpPacket(s, 53, c, 40000, response(t, 1, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR, dnsmessage.RCodeNameError, false)), 1003*ms)
	// A retransmission, then its answer.
	tr.handle(udpPacket(c, 40001, s, 53, ptr(2)), 1010*ms)
	tr.handle(udpPacket(c, 40001, s, 53, ptr(2)), 1500*ms)
	tr.handle(udpPacket(s, 53, c, 40001, response(t, 2, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR, 0, true)), 1510*ms)
	// A second resolver: counted as "other" (one label allowed).
	tr.handle(udpPacket("fd00::1", 40002, s2, 53, query(t, 3, "example.com.", dnsmessage.TypeAAAA)), 1600*ms)
	// Never answered; answered late; a response nobody asked for.
	tr.handle(udpPacket(c, 40003, s, 53, ptr(4)), 1700*ms)
	tr.handle(udpPacket(c, 40004, s, 53, ptr(5)), 1700*ms)
	tr.expire(2599 * ms)
	if got := tr.pending.Len(); got != 3 {
		t.Fatalf("pending %d before the timeout, want 3", got)
	}
	tr.expire(2700 * ms)
	tr.handle(udpPacket(s, 53, c, 40004, response(t, 5, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR, 0, false)), 2800*ms)
	tr.handle(udpPacket(s, 53, c, 49999, response(t, 6, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR, 0, false)), 2800*ms)
	// Malformed: counted once as a problem, nothing else.
	tr.handle(udpPacket(c, 40005, s, 53, []byte{1, 2, 3}), 2900*ms)

	check := func(name string, got, want uint64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	check("queries{PTR,192.0.2.53}", tr.queries[0][qtPTR].Load(), 5)
	check("queries{AAAA,other}", tr.queries[1][qtAAAA].Load(), 1)
	check("reverse", tr.reverse.Load(), 5)
	check("responses{PTR,NXDOMAIN}", tr.responses[qtPTR][rcNXDomain].Load(), 1)
	check("responses{PTR,NOERROR}", tr.responses[qtPTR][rcNoError].Load(), 3)
	check("truncated{PTR}", tr.truncated[qtPTR].Load(), 1)
	check("retransmits{PTR}", tr.retransmits[qtPTR].Load(), 1)
	check("timeouts{PTR}", tr.timeouts[qtPTR].Load(), 2)
	check("timeouts{AAAA}", tr.timeouts[qtAAAA].Load(), 1)
	check("late", tr.late.Load(), 1)
	check("unmatched", tr.unmatched.Load(), 1)
	check("packets", tr.packets.Load(), 11)
	check("problems", tr.problems.Count(), 1)
	n, sum := histogram(t, tr, qtPTR)
	check("duration count{PTR}", n, 2)
	if want := 0.003 + 0.5; sum < want-1e-9 || sum > want+1e-9 {
		t.Errorf("duration sum %v, want %v (3 ms, then 500 ms from the first send)", sum, want)
	}
	if got := tr.resolvers(); len(got) != 2 || got[0] != "192.0.2.53" || got[1] != "other" {
		t.Errorf("resolvers %v", got)
	}
	// The expired queries are forgotten after a second timeout; a response
	// after that is unmatched.
	tr.expire(3800 * ms)
	tr.handle(udpPacket(s, 53, c, 40003, response(t, 4, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR, 0, false)), 3800*ms)
	check("unmatched after forgetting", tr.unmatched.Load(), 2)
}

// TestTrackerOverflow guards --dns.max-pending: a query beyond it is
// counted, not tracked, and expired queries make room again.
func TestTrackerOverflow(t *testing.T) {
	tr := newTestTracker(2, 4, time.Second)
	for i := range 3 {
		tr.handle(udpPacket("10.0.0.1", uint16(40000+i), "10.0.0.53", 53, query(t, 1, "a.", dnsmessage.TypeA)), 0)
	}
	if tr.overflows.Load() != 1 || tr.pending.Len() != 2 {
		t.Fatalf("overflows %d pending %d, want 1 and 2", tr.overflows.Load(), tr.pending.Len())
	}
	// Expired entries make room for new queries.
	tr.expire(int64(time.Second))
	tr.handle(udpPacket("10.0.0.1", 40009, "10.0.0.53", 53, query(t, 1, "a.", dnsmessage.TypeA)), int64(time.Second))
	if tr.overflows.Load() != 1 || tr.pending.Len() != 1 {
		t.Fatalf("after expiry: overflows %d pending %d, want 1 and 1", tr.overflows.Load(), tr.pending.Len())
	}
}

// TestTrackerTCP guards DNS over TCP: two messages in one segment, a
// retransmitted segment, responses split inside a length prefix and inside a
// message, a gap and an unknown connection counted as unsynced, and a
// message longer than what is kept.
func TestTrackerTCP(t *testing.T) {
	tr := newTestTracker(16, 4, time.Second)
	c, s := "10.0.0.1", "10.0.0.53"
	q1, q2 := query(t, 1, "a.", dnsmessage.TypeA), query(t, 2, "a.", dnsmessage.TypeAAAA)
	r1 := response(t, 1, "a.", dnsmessage.TypeA, 0, false)
	r2 := response(t, 2, "a.", dnsmessage.TypeAAAA, dnsmessage.RCodeServerFailure, false)

	// Client: SYN, then two queries in one segment, retransmitted once.
	tr.handle(tcpPacket(c, 41000, s, 53, 100, tcpSYN, nil), 0)
	both := framed(q1, q2)
	tr.handle(tcpPacket(c, 41000, s, 53, 101, tcpACK, both), 1*ms)
	tr.handle(tcpPacket(c, 41000, s, 53, 101, tcpACK, both), 2*ms)
	// Server: SYN-ACK, then the responses split at every awkward place —
	// inside the first length prefix, inside a message, at a boundary.
	tr.handle(tcpPacket(s, 53, c, 41000, 5000, tcpSYN|tcpACK, nil), 0)
	stream := framed(r1, r2)
	cuts := []int{1, 7, 2 + len(r1), 2 + len(r1) + 1, len(stream)}
	seq, from := uint32(5001), 0
	for i, to := range cuts {
		tr.handle(tcpPacket(s, 53, c, 41000, seq, tcpACK, stream[from:to]), int64(10+i)*ms)
		seq += uint32(to - from)
		from = to
	}
	tr.handle(tcpPacket(s, 53, c, 41000, seq, tcpFIN|tcpACK, nil), 20*ms)
	if tr.queries[0][qtA].Load() != 1 || tr.queries[0][qtAAAA].Load() != 1 {
		t.Errorf("queries A %d AAAA %d, want 1 and 1", tr.queries[0][qtA].Load(), tr.queries[0][qtAAAA].Load())
	}
	if tr.responses[qtA][rcNoError].Load() != 1 || tr.responses[qtAAAA][rcServFail].Load() != 1 {
		t.Errorf("responses A/NOERROR %d AAAA/SERVFAIL %d", tr.responses[qtA][rcNoError].Load(), tr.responses[qtAAAA][rcServFail].Load())
	}
	if n, _ := histogram(t, tr, qtAAAA); n != 1 {
		t.Errorf("AAAA durations %d, want 1", n)
	}
	if len(tr.tcp.byKey) != 1 {
		t.Errorf("flows %d after the server's FIN, want 1 (the client direction)", len(tr.tcp.byKey))
	}
	// A segment after a gap desynchronises the direction; data of an
	// unknown connection is skipped; both are counted.
	tr.handle(tcpPacket(c, 41000, s, 53, 101+uint32(len(both))+10, tcpACK, framed(q1)), 30*ms)
	tr.handle(tcpPacket(c, 41001, s, 53, 1, tcpACK, framed(q1)), 30*ms)
	if tr.tcp.unsynced != 2 || len(tr.tcp.byKey) != 0 {
		t.Errorf("unsynced %d flows %d, want 2 and 0", tr.tcp.unsynced, len(tr.tcp.byKey))
	}
	if tr.problems.Count() != 0 {
		t.Errorf("%d parse problems, want 0", tr.problems.Count())
	}
	// A long message is counted from its first dnsKeep bytes.
	long := append(response(t, 3, "a.", dnsmessage.TypeTXT, 0, false), make([]byte, 3000)...)
	binary.BigEndian.PutUint16(long[6:], 0) // no answers, just trailing bytes the parser never reads
	tr.handle(tcpPacket(s, 53, c, 41002, 7, tcpSYN, nil), 40*ms)
	tr.handle(tcpPacket(s, 53, c, 41002, 8, tcpACK, framed(long)), 41*ms)
	if tr.responses[qtTXT][rcNoError].Load() != 1 {
		t.Errorf("long TXT response not counted")
	}
}

// TestPendingTableModel checks the open-addressing table against a map
// under random inserts, matches and expiries: full (64 entries for 600
// keys), and with room for all, so the index grows from 256 slots.
func TestPendingTableModel(t *testing.T) {
	for _, size := range []int{64, 2048} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testPendingTableModel(t, size) })
	}
}

func testPendingTableModel(t *testing.T, size int) {
	pt := newPendingTable(size, 100)
	model := map[pendingKey]int64{}
	r := rand.New(rand.NewPCG(1, 2))
	var timeouts [numQTypes]uint64
	now := int64(0)
	for step := range 20000 {
		k := pendingKey{CPort: uint16(r.IntN(200)), ID: uint16(r.IntN(3))}
		switch r.IntN(3) {
		case 0:
			res := pt.query(&k, now, 0)
			_, had := model[k]
			if res == resNew {
				if had {
					t.Fatalf("step %d: new for a pending key", step)
				}
				model[k] = now
			}
			if res == resRetransmit && !had {
				model[k] = now // was expired: live again
			}
		case 1:
			res, ts, _ := pt.response(&k)
			if want, had := model[k]; res == resMatched && (!had || want != ts) {
				t.Fatalf("step %d: matched %v ts %d, model %v %d", step, k, ts, had, want)
			} else if res != resMatched && had {
				t.Fatalf("step %d: %v pending in the model but result %d", step, k, res)
			}
			delete(model, k)
		case 2:
			now += int64(r.IntN(30))
			pt.expire(now, &timeouts)
			for k, ts := range model {
				if now-ts >= 100 {
					delete(model, k)
				}
			}
		}
		if pt.Len() != len(model) {
			t.Fatalf("step %d: table has %d live, model %d", step, pt.Len(), len(model))
		}
	}
}

// TestPendingTableGrows fills the table past its starting index: every
// query stays findable while the index doubles, and up to twice max slots.
func TestPendingTableGrows(t *testing.T) {
	const size = 3000
	pt := newPendingTable(size, 100)
	for i := range size {
		k := pendingKey{CPort: uint16(i), ID: uint16(i >> 8)}
		if res := pt.query(&k, int64(i), uint8(i%numQTypes)); res != resNew {
			t.Fatalf("query %d: %d, want new", i, res)
		}
	}
	if len(pt.index) != 8192 {
		t.Errorf("index of %d slots for %d entries, want 8192", len(pt.index), size)
	}
	for i := range size {
		k := pendingKey{CPort: uint16(i), ID: uint16(i >> 8)}
		if res, ts, qt := pt.response(&k); res != resMatched || ts != int64(i) || qt != uint8(i%numQTypes) {
			t.Fatalf("response %d: %d ts %d qtype %d", i, res, ts, qt)
		}
	}
	if pt.Len() != 0 || pt.inIndex != 0 {
		t.Errorf("%d live, %d in the index after every response", pt.Len(), pt.inIndex)
	}
}

// FuzzTracker runs arbitrary packet sequences (the input split at 0xff 0xfe
// markers, each chunk a packet) through the whole per-packet path with
// expiries in between: no panic, and the table stays within its bounds.
func FuzzTracker(f *testing.F) {
	q := query(f, 7, "4.3.2.1.in-addr.arpa.", dnsmessage.TypePTR)
	sep := []byte{0xff, 0xfe}
	seed := udpPacket("10.0.0.1", 40000, "10.0.0.53", 53, q)
	seed = append(append(seed, sep...), udpPacket("10.0.0.53", 53, "10.0.0.1", 40000, response(f, 7, "a.", dnsmessage.TypePTR, 0, true))...)
	seed = append(append(seed, sep...), tcpPacket("10.0.0.1", 1, "10.0.0.53", 53, 9, tcpSYN, framed(q)[:5])...)
	seed = append(append(seed, sep...), tcpPacket("10.0.0.1", 1, "10.0.0.53", 53, 15, tcpACK, framed(q)[5:])...)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := newTestTracker(8, 2, time.Second)
		var now int64
		for len(b) > 0 {
			i := 0
			for i+1 < len(b) && (b[i] != 0xff || b[i+1] != 0xfe) {
				i++
			}
			if i+1 >= len(b) {
				i = len(b)
			}
			tr.handle(b[:i], now)
			now += 300 * ms
			tr.expire(now)
			b = b[min(i+2, len(b)):]
		}
		if tr.pending.Len() > 8 || len(tr.tcp.byKey) > 4 {
			t.Fatalf("pending %d flows %d beyond their caps", tr.pending.Len(), len(tr.tcp.byKey))
		}
	})
}
