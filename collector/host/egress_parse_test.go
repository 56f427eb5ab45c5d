package host

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

// Builders of the kernel's messages, laid out as include/uapi/linux
// defines them, for the parser tests and the fuzz seeds.

func nlAttr(typ uint16, val []byte) []byte {
	b := make([]byte, 4, nlAlign(4+len(val)))
	binary.NativeEndian.PutUint16(b, uint16(4+len(val)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, val...)
	return append(b, make([]byte, nlAlign(len(b))-len(b))...)
}

func nlMsg(typ, flags uint16, seq uint32, body []byte) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body)+3)
	binary.NativeEndian.PutUint32(b, uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b = append(b, body...)
	return append(b, make([]byte, nlAlign(len(b))-len(b))...)
}

func cstr(s string) []byte { return append([]byte(s), 0) }

// stats64 is an rtnl_link_stats64 of 24 counters (the 6.x size) with the
// four transmit fields set.
func stats64(s linkStats) []byte {
	b := make([]byte, 24*8)
	binary.NativeEndian.PutUint64(b[stats64TxPackets:], s.TxPackets)
	binary.NativeEndian.PutUint64(b[stats64TxBytes:], s.TxBytes)
	binary.NativeEndian.PutUint64(b[stats64TxErrors:], s.TxErrors)
	binary.NativeEndian.PutUint64(b[stats64TxDropped:], s.TxDropped)
	return b
}

func linkBody(index int32, name string, s linkStats, extra ...[]byte) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	b = append(b, nlAttr(unix.IFLA_IFNAME, cstr(name))...)
	for _, e := range extra {
		b = append(b, e...)
	}
	return append(b, nlAttr(unix.IFLA_STATS64, stats64(s))...)
}

func qdiscBody(index int32, parent uint32, kind string, q qdiscStats, extra ...[]byte) []byte {
	b := make([]byte, sizeofTcMsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], 0x80010000)
	binary.NativeEndian.PutUint32(b[12:], parent)
	b = append(b, nlAttr(unix.TCA_KIND, cstr(kind))...)
	queue := make([]byte, 20)
	for i, v := range []uint32{q.Qlen, q.Backlog, q.Drops, q.Requeues, q.Overlimits} {
		binary.NativeEndian.PutUint32(queue[4*i:], v)
	}
	basic := make([]byte, 16) // gnet_stats_basic: bytes, packets
	stats2 := append(nlAttr(1, basic), nlAttr(tcaStatsQueue, queue)...)
	for _, e := range extra {
		stats2 = append(stats2, e...)
	}
	return append(b, nlAttr(unix.TCA_STATS2|unix.NLA_F_NESTED, stats2)...)
}

func TestParseLinkMessage(t *testing.T) {
	want := linkStats{TxPackets: 12, TxBytes: 1 << 40, TxErrors: 3, TxDropped: 4}
	// An attribute no kernel sends today (type 999) and a nested one are
	// skipped.
	body := linkBody(7, "eth0", want, nlAttr(999, []byte{1, 2, 3}), nlAttr(unix.IFLA_LINKINFO|unix.NLA_F_NESTED, nlAttr(1, cstr("veth"))))
	l, err := parseLinkMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	if l.Index != 7 || string(l.Name) != "eth0" || !l.HasStats || l.Stats != want {
		t.Errorf("got %+v", l)
	}
	// A truncation is an error, or (cut between two attributes) a message
	// without statistics; never a panic.
	for n := 0; n < len(body); n++ {
		if l, err := parseLinkMessage(body[:n]); err == nil && l.HasStats {
			t.Errorf("truncated to %d of %d bytes: statistics %+v", n, len(body), l.Stats)
		}
	}
	// A short rtnl_link_stats64 is an error.
	short := append(linkBody(1, "x", linkStats{})[:unix.SizeofIfInfomsg], nlAttr(unix.IFLA_STATS64, make([]byte, 40))...)
	if _, err := parseLinkMessage(short); !errors.Is(err, errNetlinkShort) {
		t.Errorf("short stats64: %v", err)
	}
}

func TestParseQdiscMessage(t *testing.T) {
	want := qdiscStats{Qlen: 5, Backlog: 7000, Drops: 9, Requeues: 2, Overlimits: 1234}
	body := qdiscBody(3, tcHRoot, "tbf", want, nlAttr(99, []byte("future")))
	q, err := parseQdiscMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	if q.Index != 3 || !q.Root() || string(q.Kind) != "tbf" || !q.HasStats || q.Stats != want {
		t.Errorf("got %+v", q)
	}
	child, err := parseQdiscMessage(qdiscBody(3, 0x10001, "fq_codel", want))
	if err != nil || child.Root() {
		t.Errorf("a class's child qdisc: %+v %v", child, err)
	}
	for n := 0; n < len(body); n++ {
		if q, err := parseQdiscMessage(body[:n]); err == nil && q.HasStats {
			t.Errorf("truncated to %d of %d bytes: statistics %+v", n, len(body), q.Stats)
		}
	}
}

func TestParseStatsMessage(t *testing.T) {
	want := linkStats{TxPackets: 1, TxBytes: 2, TxErrors: 3, TxDropped: 4}
	body := make([]byte, sizeofIfStatsMsg)
	binary.NativeEndian.PutUint32(body[4:], 42)
	body = append(body, nlAttr(unix.IFLA_STATS_LINK_64, stats64(want))...)
	idx, s, err := parseStatsMessage(body)
	if err != nil || idx != 42 || s != want {
		t.Errorf("got %d %+v %v", idx, s, err)
	}
	if _, _, err := parseStatsMessage(body[:sizeofIfStatsMsg]); err == nil {
		t.Error("no IFLA_STATS_LINK_64: no error")
	}
}

// FuzzEgressNetlink feeds arbitrary datagrams to netlinkdump.Walk and
// each message's body to the three parsers: an error is fine, a panic or
// a name or kind outside the input is not.
func FuzzEgressNetlink(f *testing.F) {
	f.Add(nlMsg(unix.RTM_NEWLINK, 0, 1, linkBody(2, "eth0", linkStats{TxBytes: 9}, nlAttr(500, nil))))
	f.Add(nlMsg(unix.RTM_NEWQDISC, 0, 1, qdiscBody(2, tcHRoot, "mq", qdiscStats{Backlog: 3})))
	f.Add(nlMsg(unix.NLMSG_ERROR, 0, 1, []byte{0xea, 0xff, 0xff, 0xff}))
	f.Fuzz(func(t *testing.T, dgram []byte) {
		// The same bytes as an ETHTOOL_GSTRINGS and GSTATS reply: indexes
		// only inside the names given, values only inside the data.
		idx := findAllowanceStats("ena", dgram, len(dgram)/ethGStringLen+2)
		for _, x := range idx {
			if (x.index+1)*ethGStringLen > len(dgram) {
				t.Fatalf("index %d outside %d bytes of names", x.index, len(dgram))
			}
		}
		if v := appendStatValues(nil, dgram, idx); len(v) != len(idx) {
			t.Fatalf("%d values for %d indexes", len(v), len(idx))
		}
		// Every message of the first one's sequence number, as a dump
		// gets them from internal/netlinkdump.
		if len(dgram) < unix.NLMSG_HDRLEN {
			return
		}
		seq := binary.NativeEndian.Uint32(dgram[8:])
		_, _ = netlinkdump.Walk(dgram, seq, new(netlinkdump.Stats), func(_ uint16, body []byte) error {
			if l, err := parseLinkMessage(body); err == nil && !bytes.Contains(dgram, l.Name) {
				t.Fatalf("name %q not in the input", l.Name)
			}
			if q, err := parseQdiscMessage(body); err == nil && !bytes.Contains(dgram, q.Kind) {
				t.Fatalf("kind %q not in the input", q.Kind)
			}
			_, _, _ = parseStatsMessage(body)
			return nil
		})
	})
}

// ethtoolFixture reads an `ethtool -S` file under fixtures/ethtool as the
// two ioctls return it: the 32-byte names and the __u64 values.
func ethtoolFixture(t *testing.T, name string) (strs []byte, data []byte, n int) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(readFixture(t, "ethtool/"+name)))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ": ")
		if !ok {
			continue // the "NIC statistics:" header
		}
		u, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, sc.Text(), err)
		}
		field := make([]byte, ethGStringLen)
		copy(field, k)
		strs = append(strs, field...)
		data = binary.NativeEndian.AppendUint64(data, u)
		n++
	}
	return strs, data, n
}

func TestAllowanceStatsENA(t *testing.T) {
	strs, data, n := ethtoolFixture(t, "ena.txt")
	idx := findAllowanceStats("ena", strs, n)
	got := map[string]uint64{}
	for i, v := range appendStatValues(nil, data, idx) {
		got[idx[i].reason] = v
	}
	want := map[string]uint64{"bw_in": 17, "bw_out": 118723, "pps": 2051, "conntrack": 3, "linklocal": 44}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	// The same names from a driver without allowance counters are not
	// read, and a reply shorter than it claims stops at its end.
	if idx := findAllowanceStats("virtio_net", strs, n); idx != nil {
		t.Errorf("virtio_net: %v", idx)
	}
	if idx := findAllowanceStats("ena", strs[:9*ethGStringLen], n); len(idx) != 2 || idx[1].reason != "bw_out" || idx[1].index != 8 {
		t.Errorf("names cut after bw_out: %v", idx)
	}
}
