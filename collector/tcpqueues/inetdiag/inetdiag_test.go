package inetdiag

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

// msg builds one netlink message of type typ with payload.
func msg(typ uint16, seq uint32, flags uint16, payload []byte) []byte {
	ne := binary.NativeEndian
	b := ne.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+len(payload)))
	b = ne.AppendUint16(b, typ)
	b = ne.AppendUint16(b, flags)
	b = ne.AppendUint32(b, seq)
	b = ne.AppendUint32(b, 0)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// diagMsg is an inet_diag_msg of an established socket followed by attrs.
func diagMsg(sport, dport uint16, rq, wq uint32, attrs ...[]byte) []byte {
	ne, be := binary.NativeEndian, binary.BigEndian
	m := make([]byte, msgLen)
	m[0], m[1] = unix.AF_INET, 1
	be.PutUint16(m[4:], sport)
	be.PutUint16(m[6:], dport)
	ne.PutUint32(m[56:], rq)
	ne.PutUint32(m[60:], wq)
	ne.PutUint32(m[68:], 4242)
	for _, a := range attrs {
		m = append(m, a...)
	}
	return m
}

// attr is a netlink attribute of type typ with payload, padded.
func attr(typ uint16, payload []byte) []byte {
	ne := binary.NativeEndian
	b := ne.AppendUint16(nil, uint16(4+len(payload)))
	b = ne.AppendUint16(b, typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func errMsg(seq uint32, errno int32) []byte {
	p := binary.NativeEndian.AppendUint32(nil, uint32(errno))
	return msg(unix.NLMSG_ERROR, seq, 0, append(p, make([]byte, 16)...))
}

func TestParse(t *testing.T) {
	const seq = 7
	shutdown := attr(8, []byte{0})    // INET_DIAG_SHUTDOWN
	sockopt := attr(22, []byte{0, 0}) // INET_DIAG_SOCKOPT, the last known
	future := attr(40, []byte{1, 2, 3, 4})
	two := slices.Concat(
		msg(sockDiagByFamily, seq, flagMultiPart, diagMsg(6379, 50000, 1, 1000, shutdown, sockopt)),
		msg(sockDiagByFamily, seq, flagMultiPart, diagMsg(6379, 50001, 0, 0)),
	)
	for _, tc := range []struct {
		name     string
		b        []byte
		wantQ    []uint32 // send queues reported, in order
		wantDone bool
		wantP    Problems
		wantErr  error
	}{
		{name: "two sockets, known attributes", b: two, wantQ: []uint32{1000, 0}},
		{name: "two then done", b: slices.Concat(two, msg(unix.NLMSG_DONE, seq, flagMultiPart, []byte{0, 0, 0, 0})), wantQ: []uint32{1000, 0}, wantDone: true},
		{name: "another request's messages skipped", b: slices.Concat(msg(sockDiagByFamily, seq+1, 0, diagMsg(1, 2, 3, 4)), two), wantQ: []uint32{1000, 0}},
		{name: "unknown attribute: socket kept, counted",
			b: msg(sockDiagByFamily, seq, 0, diagMsg(6379, 1, 0, 77, future)), wantQ: []uint32{77}, wantP: Problems{UnknownAttrs: 1}},
		{name: "attribute past its message: socket kept, counted",
			b: msg(sockDiagByFamily, seq, 0, append(diagMsg(6379, 1, 0, 5), 40, 0, 8, 0)), wantQ: []uint32{5}, wantP: Problems{Truncated: 1}},
		{name: "short inet_diag_msg: dropped, counted, the next read",
			b: slices.Concat(msg(sockDiagByFamily, seq, 0, make([]byte, 40)), two), wantQ: []uint32{1000, 0}, wantP: Problems{Truncated: 1}},
		{name: "datagram cut inside a message: what precedes kept", b: two[:len(two)-10], wantQ: []uint32{1000}, wantP: Problems{Truncated: 1}},
		{name: "datagram cut inside a header", b: slices.Concat(two, []byte{1, 2, 3}), wantQ: []uint32{1000, 0}, wantP: Problems{Truncated: 1}},
		{name: "header length below the header", b: slices.Concat([]byte{4, 0, 0, 0}, make([]byte, 12), two), wantP: Problems{Truncated: 1}},
		{name: "interrupted dump", b: msg(sockDiagByFamily, seq, unix.NLM_F_DUMP_INTR, diagMsg(6379, 1, 0, 9)), wantQ: []uint32{9}, wantP: Problems{Interrupted: 1}},
		{name: "other message type", b: slices.Concat(msg(99, seq, 0, nil), two), wantQ: []uint32{1000, 0}, wantP: Problems{OtherMessages: 1}},
		{name: "refused", b: errMsg(seq, -int32(unix.EINVAL)), wantDone: true, wantErr: netlinkdump.Errno(unix.EINVAL)},
		{name: "acknowledgement", b: errMsg(seq, 0), wantDone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint32
			done, p, err := parse(tc.b, seq, func(s Socket) {
				if s.SrcPort != 6379 || s.State != 1 || s.Inode != 4242 {
					t.Errorf("socket %+v: the fixed part misread", s)
				}
				got = append(got, s.SendQueue)
			})
			if !slices.Equal(got, tc.wantQ) || done != tc.wantDone || p != tc.wantP || !errors.Is(err, tc.wantErr) {
				t.Errorf("got queues %v done %v problems %+v err %v; want %v %v %+v %v", got, done, p, err, tc.wantQ, tc.wantDone, tc.wantP, tc.wantErr)
			}
		})
	}
}

// flagMultiPart is NLM_F_MULTI, which the kernel sets on a dump's replies.
const flagMultiPart = 0x2

func FuzzParse(f *testing.F) {
	f.Add(slices.Concat(msg(sockDiagByFamily, 1, 0, diagMsg(6379, 2, 0, 5, attr(8, []byte{0}))), msg(unix.NLMSG_DONE, 1, 0, nil)))
	f.Add(errMsg(1, -22))
	f.Add(msg(sockDiagByFamily, 1, 0, diagMsg(1, 2, 3, 4, attr(40, nil))))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		_, p, _ := parse(b, 1, func(Socket) { n++ })
		if n > len(b)/(unix.NLMSG_HDRLEN+msgLen) {
			t.Errorf("%d sockets from %d bytes", n, len(b))
		}
		if p.Truncated < 0 || p.UnknownAttrs > n {
			t.Errorf("problems %+v for %d sockets", p, n)
		}
	})
}

func TestRequestTooManyPorts(t *testing.T) {
	if _, err := (Request{Family: unix.AF_INET, Ports: make([]uint16, MaxPorts+1)}).Append(nil); err == nil {
		t.Error("a filter of more than MaxPorts ports was built")
	}
}

// TestFilterInKernel runs the port filter on this kernel: three
// listeners, connections to each; a dump filtered on two of the ports
// returns exactly their established server-side sockets (and the
// kernel's audit takes the bytecode for one and for MaxPorts ports).
func TestFilterInKernel(t *testing.T) {
	var lns []net.Listener
	var ports []uint16
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
		for _, l := range lns {
			l.Close()
		}
	})
	for range 3 {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, uint16(ln.Addr().(*net.TCPAddr).Port))
	}
	for i, ln := range lns {
		for range i + 2 { // 2, 3 and 4 connections
			c, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c, s)
		}
	}
	conn, err := Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		ports []uint16
		want  map[uint16]int
	}{
		{ports: ports[:1], want: map[uint16]int{ports[0]: 2}},
		{ports: []uint16{ports[0], ports[2]}, want: map[uint16]int{ports[0]: 2, ports[2]: 4}},
		// MaxPorts ports: the audit's longest program; ports[1] last.
		{ports: append(slices.Repeat([]uint16{1}, MaxPorts-1), ports[1]), want: map[uint16]int{ports[1]: 3}},
	} {
		got := map[uint16]int{}
		_, err := conn.Dump(Request{Family: unix.AF_INET, States: 1 << StateEstablished, Ports: tc.ports}, time.Now().Add(10*time.Second),
			func(s Socket) {
				if s.State != 1 {
					t.Errorf("state %d, want only established", s.State)
				}
				got[s.SrcPort]++
			})
		if err != nil {
			t.Fatalf("ports %v: %v", tc.ports, err)
		}
		for p, n := range got {
			if tc.want[p] != n {
				t.Errorf("filter %v: port %d has %d sockets, want %d (all: %v)", tc.ports, p, n, tc.want[p], got)
			}
		}
		for p, n := range tc.want {
			if got[p] != n {
				t.Errorf("filter %v: port %d has %d sockets, want %d", tc.ports, p, got[p], n)
			}
		}
	}
}
