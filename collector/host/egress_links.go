package host

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// linkNamesEvery: the interface names are read again at least this
// often, so a renamed interface takes its new name within a minute.
const linkNamesEvery = time.Minute

// linkTable is the network interfaces seen through one rtnetlink socket,
// read by the egress collector at each scrape and by the sampler at each
// tick. A read is one RTM_GETSTATS dump (rtnl_link_stats64 alone, about
// 220 bytes per interface); the names come from an RTM_GETLINK dump (a
// kilobyte and more per interface, fifteen times the kernel's work) only
// when an unknown interface appears and every linkNamesEvery. After the
// first read, a read with no new interface allocates nothing. Not safe
// for concurrent use: the scrape and the sampler each have their own,
// unlike the /proc sources they share (source.go), because a read costs
// 0.3 ms of CPU at 1,000 interfaces (docs/benchmarks.md) and the qdisc
// dump that follows the scrape's needs a socket of its own anyway.
type linkTable struct {
	filter *netDeviceFilter
	open   func() (*rtnlConn, error) // tests open it in a namespace
	conn   *rtnlConn

	gen     uint64
	byIdx   map[int32]*netIface
	list    []*netIface      // the last read's interfaces, in dump order
	cur     []netStatsSample // scratch of a read
	links   []egressLink     // scratch of a name dump
	namesAt time.Time        // the last name dump
	// linkOnly: the kernel has no RTM_GETSTATS (before 4.7), so every
	// read is a link dump.
	linkOnly bool
}

// netIface is one interface of a linkTable. A renamed interface, or one
// the filter now decides otherwise, is a new netIface: users key their
// own state (series) by the pointer.
type netIface struct {
	index    int32
	name     string
	exported bool
	seen     uint64 // linkTable.gen of the last read that listed it
	stats    linkStats
}

type netStatsSample struct {
	index int32
	stats linkStats
}

func newLinkTable(filter *netDeviceFilter) *linkTable {
	return &linkTable{filter: filter, open: openRTNL, byIdx: map[int32]*netIface{}}
}

// linkRead is what one read of a linkTable found besides the interfaces:
// the malformed messages skipped, whether a dump was interrupted by a
// change of the table (NLM_F_DUMP_INTR), and how many interfaces the
// bound of --egress.max-devices left out at a name dump.
type linkRead struct {
	bad         int
	first       error
	interrupted bool
	left        int
}

// read dumps the interfaces' counters (and their names when needed) at
// now. On error the socket is closed and reopened at the next read. An
// interface listed by the counters' dump but not by the name dump before
// it (created in between) waits for the next read.
func (t *linkTable) read(now time.Time) (r linkRead, err error) {
	if t.conn == nil {
		if t.conn, err = t.open(); err != nil {
			return r, err
		}
	}
	t.cur = t.cur[:0]
	if t.linkOnly {
		err = t.readNames(now, &r, true)
	} else if err = t.readStats(now, &r); errors.Is(err, unix.EOPNOTSUPP) {
		// A kernel before 4.7 has no RTM_GETSTATS: the link dump, which
		// carries IFLA_STATS64 since 2.6.35, from now on.
		t.linkOnly = true
		t.cur = t.cur[:0]
		err = t.readNames(now, &r, true)
	}
	if err != nil {
		t.conn.Close()
		t.conn = nil
		return r, err
	}
	t.gen++
	t.list = t.list[:0]
	for _, c := range t.cur {
		i := t.byIdx[c.index]
		if i == nil || i.seen == t.gen {
			continue // came after the name dump (next read), or listed twice
		}
		i.seen, i.stats = t.gen, c.stats
		t.list = append(t.list, i)
	}
	for idx, i := range t.byIdx {
		if i.seen != t.gen {
			delete(t.byIdx, idx) // gone
		}
	}
	return r, nil
}

// readStats fills t.cur from an RTM_GETSTATS dump, and reads the names
// first when an interface is unknown or they are due.
func (t *linkTable) readStats(now time.Time, r *linkRead) error {
	unknown := false
	intr, err := t.conn.Dump(unix.RTM_GETSTATS, dumpStatsHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWSTATS {
			return nil
		}
		idx, s, perr := parseStatsMessage(body)
		if perr != nil {
			r.addBad(perr)
			return nil
		}
		if t.byIdx[idx] == nil {
			unknown = true
		}
		t.cur = append(t.cur, netStatsSample{index: idx, stats: s})
		return nil
	})
	r.interrupted = r.interrupted || intr
	if err != nil {
		return fmt.Errorf("link statistics dump: %w", err)
	}
	if unknown || now.Sub(t.namesAt) >= linkNamesEvery || now.Before(t.namesAt) {
		return t.readNames(now, r, false)
	}
	return nil
}

func (r *linkRead) addBad(err error) {
	if r.bad++; r.first == nil {
		r.first = err
	}
}

// readNames dumps the links for their names and decides which interfaces
// are exported (netDeviceFilter.choose); withStats also fills t.cur from
// the dump's IFLA_STATS64 (kernels without RTM_GETSTATS).
func (t *linkTable) readNames(now time.Time, r *linkRead, withStats bool) error {
	t.links = t.links[:0]
	intr, err := t.conn.Dump(unix.RTM_GETLINK, dumpLinksHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWLINK {
			return nil
		}
		l, perr := parseLinkMessage(body)
		if perr != nil {
			r.addBad(perr)
			return nil
		}
		var name string
		if i := t.byIdx[l.Index]; i != nil && i.name == string(l.Name) {
			name = i.name // no allocation for a known interface
		} else {
			name = string(l.Name)
		}
		t.links = append(t.links, egressLink{index: l.Index, name: name})
		if withStats && l.HasStats {
			t.cur = append(t.cur, netStatsSample{index: l.Index, stats: l.Stats})
		}
		return nil
	})
	if intr {
		r.interrupted = true
	}
	if err != nil {
		return fmt.Errorf("link dump: %w", err)
	}
	t.namesAt = now
	r.left = t.filter.choose(t.links)
	for _, l := range t.links {
		i := t.byIdx[l.index]
		if i != nil && i.name == l.name && i.exported == l.exported {
			continue
		}
		// New, renamed, or now in or out of the bound: a new netIface.
		t.byIdx[l.index] = &netIface{index: l.index, name: l.name, exported: l.exported, seen: t.gen}
	}
	return nil
}

// egressLink is one interface of a name dump, as netDeviceFilter.choose
// takes it.
type egressLink struct {
	index    int32
	name     string
	exported bool
}

// errLinkDumpInterrupted is the problem of a dump the kernel marked
// NLM_F_DUMP_INTR.
var errLinkDumpInterrupted = errors.New("interfaces changed during a link dump (NLM_F_DUMP_INTR): each message is consistent, not the whole")
