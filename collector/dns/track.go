package dns

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/stall-exporter/stall_exporter/collector"
)

// tracker is the per-packet path: parse, match, count. One goroutine (the
// capture loop, or a test or benchmark) calls handle and expire; scrapes
// read the counters, which are atomics, and the histograms, which are safe
// for concurrent use. In the steady state handle allocates nothing.
type tracker struct {
	problems *collector.Problems
	parser   dnsmessage.Parser
	pkt      packetInfo
	msg      dnsInfo
	pending  *pendingTable
	tcp      *tcpTable

	// Resolver addresses get a label in the order first queried, up to
	// maxResolvers; later ones count as "other" (index maxResolvers).
	// resolverAddrs is the capture goroutine's copy; resolverNames is
	// read by scrapes under mu.
	resolverAddrs []addr
	mu            sync.Mutex
	resolverNames []string

	queries     [][numQTypes]atomic.Uint64 // [resolver][qtype]
	responses   [numQTypes][numRCodes]atomic.Uint64
	truncated   [numQTypes]atomic.Uint64
	timeouts    [numQTypes]atomic.Uint64
	retransmits [numQTypes]atomic.Uint64
	reverse     atomic.Uint64
	late        atomic.Uint64
	unmatched   atomic.Uint64
	overflows   atomic.Uint64
	packets     atomic.Uint64
	tcpUnsynced atomic.Uint64
	nPending    atomic.Int64
	durationVec *prometheus.HistogramVec
	duration    [numQTypes]prometheus.Observer // created at a qtype's first observation

	timeoutBuf [numQTypes]uint64
}

// newTracker makes the tracker of the --dns.max-pending, --dns.max-tcp-flows,
// --dns.max-resolvers and --dns.timeout options, counting malformed packets
// in problems.
func newTracker(o options, problems *collector.Problems) *tracker {
	t := &tracker{
		problems:    problems,
		pending:     newPendingTable(o.maxPending, int64(o.timeout)),
		queries:     make([][numQTypes]atomic.Uint64, o.maxResolvers+1),
		durationVec: lookupDuration.HistogramVec(),
	}
	t.tcp = newTCPTable(o.maxTCPFlows, t.handleMessage)
	return t
}

// handle processes one captured packet (starting at its IP header) seen at
// ts, Unix nanoseconds.
func (t *tracker) handle(b []byte, ts int64) {
	t.packets.Add(1)
	p := &t.pkt
	if err := parsePacket(b, p); err != nil {
		t.problems.Add(err.kind, 1, err)
		return
	}
	if p.Proto == protoTCP {
		t.tcp.segment(p, ts)
		t.tcpUnsynced.Store(t.tcp.unsynced)
		return
	}
	t.handleMessage(p, p.Payload, ts)
}

// handleMessage counts one DNS message carried by p (for TCP, one framed
// message of a stream).
func (t *tracker) handleMessage(p *packetInfo, msg []byte, ts int64) {
	m := &t.msg
	if err := parseDNS(&t.parser, msg, m); err != nil {
		t.problems.Add(err.kind, 1, err)
		return
	}
	qt := qtypeIndex(m.QType)
	if !m.Response {
		t.queries[t.resolverIndex(&p.Dst)][qt].Add(1)
		if m.Reverse {
			t.reverse.Add(1)
		}
		k := pendingKey{Client: p.Src, Server: p.Dst, CPort: p.SPort, SPort: p.DPort, ID: m.ID, Proto: p.Proto}
		switch t.pending.query(&k, ts, qt) {
		case resRetransmit:
			t.retransmits[qt].Add(1)
		case resOverflow:
			t.overflows.Add(1)
		}
		t.nPending.Store(int64(t.pending.Len()))
		return
	}
	k := pendingKey{Client: p.Dst, Server: p.Src, CPort: p.DPort, SPort: p.SPort, ID: m.ID, Proto: p.Proto}
	res, start, pqt := t.pending.response(&k)
	if !m.HasQuestion {
		qt = qtOther // the query's type when it is known
		if res == resMatched || res == resLate {
			qt = pqt
		}
	}
	t.responses[qt][rcodeIndex(m.RCode)].Add(1)
	if m.Truncated {
		t.truncated[qt].Add(1)
	}
	switch res {
	case resMatched:
		h := t.duration[pqt]
		if h == nil {
			h = t.durationVec.WithLabelValues(qtypeNames[pqt])
			t.duration[pqt] = h
		}
		h.Observe(float64(max(ts-start, 0)) / 1e9)
	case resLate:
		t.late.Add(1)
	default:
		t.unmatched.Add(1)
	}
	t.nPending.Store(int64(t.pending.Len()))
}

// resolverIndex returns the label index of a resolver address.
func (t *tracker) resolverIndex(a *addr) int {
	for i := range t.resolverAddrs {
		if t.resolverAddrs[i] == *a {
			return i
		}
	}
	other := len(t.queries) - 1 // the last index counts every further resolver
	if len(t.resolverAddrs) >= other {
		return other
	}
	t.resolverAddrs = append(t.resolverAddrs, *a)
	name := netip.AddrFrom16(*a).Unmap().String()
	t.mu.Lock()
	t.resolverNames = append(t.resolverNames, name)
	t.mu.Unlock()
	return len(t.resolverAddrs) - 1
}

// expire counts the queries that timed out by now and forgets idle TCP
// directions.
func (t *tracker) expire(now int64) {
	t.timeoutBuf = [numQTypes]uint64{}
	t.pending.expire(now, &t.timeoutBuf)
	for q, n := range t.timeoutBuf {
		if n > 0 {
			t.timeouts[q].Add(n)
		}
	}
	t.nPending.Store(int64(t.pending.Len()))
	t.tcp.expire(now - 2*t.pending.timeout)
}

// resolvers returns the resolver labels in index order; index len() is
// "other".
func (t *tracker) resolvers() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append(t.resolverNames[:len(t.resolverNames):len(t.resolverNames)], "other")
}
