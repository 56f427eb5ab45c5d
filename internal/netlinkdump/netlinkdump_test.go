package netlinkdump

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// msg is one netlink message: header, payload, padding to 4 bytes.
func msg(typ, flags uint16, seq uint32, payload []byte) []byte {
	b := make([]byte, headerLen, headerLen+len(payload)+3)
	ne := binary.NativeEndian
	ne.PutUint32(b, uint32(headerLen+len(payload)))
	ne.PutUint16(b[4:], typ)
	ne.PutUint16(b[6:], flags)
	ne.PutUint32(b[8:], seq)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// errMsg is an NLMSG_ERROR with errno (negative, as the kernel sends it).
func errMsg(seq uint32, errno int32) []byte {
	return msg(unix.NLMSG_ERROR, 0, seq, binary.NativeEndian.AppendUint32(nil, uint32(errno)))
}

func TestWalk(t *testing.T) {
	const seq = 7
	const typ = 100
	one := msg(typ, unix.NLM_F_MULTI, seq, []byte("one"))
	two := msg(typ, unix.NLM_F_MULTI, seq, []byte("two!"))
	done := msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, seq, make([]byte, 4))
	stop := errors.New("stop")
	for _, tc := range []struct {
		name     string
		b        []byte
		fnErr    error
		want     []string
		wantSt   Stats
		wantDone bool
		wantErr  error
	}{
		{name: "two and the end", b: slices.Concat(one, two, done), want: []string{"one", "two!"}, wantSt: Stats{Messages: 2}, wantDone: true},
		{name: "no end yet", b: slices.Concat(one, two), want: []string{"one", "two!"}, wantSt: Stats{Messages: 2}},
		{name: "another dump's rest skipped", b: slices.Concat(msg(typ, 0, seq-1, []byte("old")), one, msg(unix.NLMSG_DONE, 0, seq-1, nil)), want: []string{"one"}, wantSt: Stats{Messages: 1}},
		{name: "interrupted counted", b: slices.Concat(msg(typ, unix.NLM_F_DUMP_INTR, seq, []byte("x")), msg(unix.NLMSG_DONE, unix.NLM_F_DUMP_INTR, seq, nil)), want: []string{"x"}, wantSt: Stats{Messages: 1, Interrupted: 2}, wantDone: true},
		{name: "noop not passed on", b: slices.Concat(msg(unix.NLMSG_NOOP, 0, seq, nil), one), want: []string{"one"}, wantSt: Stats{Messages: 2}},
		{name: "refused", b: slices.Concat(errMsg(seq, -int32(unix.EINVAL)), one), wantDone: true, wantErr: Errno(unix.EINVAL)},
		{name: "dump failed after it started", b: slices.Concat(one, msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, seq, binary.NativeEndian.AppendUint32(nil, negErrno(unix.EMSGSIZE)))), want: []string{"one"}, wantSt: Stats{Messages: 1}, wantDone: true, wantErr: Errno(unix.EMSGSIZE)},
		{name: "acknowledged", b: errMsg(seq, 0), wantDone: true},
		{name: "error of 2 bytes", b: msg(unix.NLMSG_ERROR, 0, seq, []byte{1, 2}), wantSt: Stats{Truncated: 1}, wantDone: true, wantErr: errors.New("netlink: NLMSG_ERROR of 2 bytes")},
		{name: "cut inside a message: what precedes kept", b: slices.Concat(one, two[:len(two)-3]), want: []string{"one"}, wantSt: Stats{Messages: 1, Truncated: 1}},
		{name: "cut inside a header", b: slices.Concat(one, []byte{1, 2, 3}), want: []string{"one"}, wantSt: Stats{Messages: 1, Truncated: 1}},
		{name: "length below the header", b: slices.Concat([]byte{4, 0, 0, 0}, make([]byte, 12), one), wantSt: Stats{Truncated: 1}},
		{name: "callback error stops", b: slices.Concat(one, two, done), fnErr: stop, want: []string{"one"}, wantSt: Stats{Messages: 1}, wantDone: true, wantErr: stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var st Stats
			d, err := Walk(tc.b, seq, &st, func(typ uint16, p []byte) error {
				if typ != 100 {
					t.Errorf("type %d passed on", typ)
				}
				got = append(got, string(bytes.TrimRight(p, "\x00")))
				return tc.fnErr
			})
			if !slices.Equal(got, tc.want) || st != tc.wantSt || d != tc.wantDone {
				t.Errorf("got %q %+v done=%v, want %q %+v done=%v", got, st, d, tc.want, tc.wantSt, tc.wantDone)
			}
			if (err == nil) != (tc.wantErr == nil) || err != nil && err.Error() != tc.wantErr.Error() {
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
		})
	}
	// A refusal is both an Errno and the syscall error.
	_, err := Walk(errMsg(seq, -int32(unix.ENOENT)), seq, new(Stats), nil)
	var e Errno
	if !errors.As(err, &e) || e != Errno(unix.ENOENT) || !errors.Is(err, unix.ENOENT) {
		t.Errorf("refusal %v (%T)", err, err)
	}
	// The bound: one message past MaxMessages ends the dump.
	st := Stats{Messages: MaxMessages}
	if d, err := Walk(one, seq, &st, func(uint16, []byte) error { t.Error("message past the bound passed on"); return nil }); !d || err == nil {
		t.Errorf("past MaxMessages: done=%v err %v", d, err)
	}
}

// FuzzWalk walks arbitrary datagrams: a panic, a payload that is not a
// part of the input, a message count the input cannot hold or a walk
// that goes on after its end is a failure.
func FuzzWalk(f *testing.F) {
	f.Add(slices.Concat(msg(100, 0, 1, []byte("abc")), msg(unix.NLMSG_DONE, 0, 1, nil)))
	f.Add(slices.Concat(msg(100, unix.NLM_F_DUMP_INTR, 1, nil), errMsg(1, -22)))
	f.Add(slices.Concat(msg(100, 0, 2, []byte("x")), msg(100, 0, 1, []byte("y"))[:19]))
	f.Fuzz(func(t *testing.T, b []byte) {
		var st Stats
		ended := false
		done, _ := Walk(b, 1, &st, func(_ uint16, p []byte) error {
			if ended {
				t.Fatal("a message after the end")
			}
			if len(p) > 0 && !bytes.Contains(b, p) {
				t.Fatalf("payload %q not in the input", p)
			}
			return nil
		})
		ended = done
		if st.Messages > len(b)/headerLen || st.Interrupted > len(b)/headerLen || st.Truncated > 1 {
			t.Fatalf("%+v from %d bytes", st, len(b))
		}
	})
}

// getStatsPayload is struct if_stats_msg (12 bytes) asking for
// IFLA_STATS_LINK_64 only; filter_mask 0 is refused with EINVAL.
func getStatsPayload(mask uint32) []byte {
	b := make([]byte, 12)
	binary.NativeEndian.PutUint32(b[8:], mask)
	return b
}

// TestDumpKernel dumps this network namespace's links from the kernel
// (every namespace has loopback, index 1): without allocating after the
// first dump; stopped by the callback, then a statistics dump on the same
// socket that skips the stopped dump's rest; then a dump the kernel fails
// (RTM_GETSTATS with no filter: EINVAL in the DONE message).
func TestDumpKernel(t *testing.T) {
	c, err := Open(unix.NETLINK_ROUTE, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ifinfomsg := make([]byte, unix.SizeofIfInfomsg)
	var indexes []int32
	st, err := c.Dump(unix.RTM_GETLINK, ifinfomsg, time.Now().Add(5*time.Second), func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWLINK || len(p) < unix.SizeofIfInfomsg {
			t.Errorf("message type %d of %d bytes", typ, len(p))
			return nil
		}
		indexes = append(indexes, int32(binary.NativeEndian.Uint32(p[4:])))
		return nil
	})
	if err != nil || !slices.Contains(indexes, 1) || st.Messages != len(indexes) || st.Truncated != 0 {
		t.Fatalf("links %v, %+v, %v", indexes, st, err)
	}

	// After the first dump, a dump allocates nothing: the callback gets
	// slices of the kept buffer, the request is built in a kept one.
	count := func(uint16, []byte) error { return nil }
	if a := testing.AllocsPerRun(20, func() {
		if _, err := c.Dump(unix.RTM_GETLINK, ifinfomsg, time.Time{}, count); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("%.1f allocations per dump", a)
	}

	// A callback error stops the dump; the next dump skips its rest.
	stop := errors.New("stop")
	if _, err := c.Dump(unix.RTM_GETLINK, ifinfomsg, time.Time{}, func(uint16, []byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("callback error: %v", err)
	}
	n := 0
	if st, err := c.Dump(unix.RTM_GETSTATS, getStatsPayload(1<<(unix.IFLA_STATS_LINK_64-1)), time.Time{}, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWSTATS {
			t.Errorf("type %d after a stopped dump", typ)
		}
		n++
		return nil
	}); err != nil || n != len(indexes) || st.Messages != n {
		t.Errorf("stats after a stopped dump: %d of %d links, %+v, %v", n, len(indexes), st, err)
	}

	if _, err := c.Dump(unix.RTM_GETSTATS, getStatsPayload(0), time.Time{}, func(uint16, []byte) error { return nil }); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RTM_GETSTATS without a filter: %v, want EINVAL", err)
	}
}

// TestDumpDatagrams runs Dump on one end of a datagram socket pair whose
// other end plays the kernel: a datagram larger than the buffer is
// counted once and the dump read on to its end; a deadline with no reply
// is an error at once.
func TestDumpDatagrams(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	c := &Conn{fd: fds[0], buf: make([]byte, 64), seq: 10}
	defer c.Close()
	const seq = 11 // the next dump's
	for _, d := range [][]byte{
		slices.Concat(msg(100, 0, seq, []byte("fits")), msg(100, 0, seq, make([]byte, 100))), // 140 bytes
		slices.Concat(msg(100, 0, seq, []byte("next")), msg(unix.NLMSG_DONE, 0, seq, nil)),
	} {
		if _, err := unix.Write(fds[1], d); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	st, err := c.Dump(100, []byte("request"), time.Time{}, func(_ uint16, p []byte) error {
		got = append(got, string(p))
		return nil
	})
	if !errors.Is(err, ErrTruncated) || st != (Stats{Messages: 2, Truncated: 1}) || !slices.Equal(got, []string{"fits", "next"}) {
		t.Errorf("cut datagram: %q %+v %v", got, st, err)
	}
	req := make([]byte, 64)
	n, err := unix.Read(fds[1], req)
	if err != nil || n != headerLen+len("request") || string(req[headerLen:n]) != "request" ||
		binary.NativeEndian.Uint16(req[4:]) != 100 || binary.NativeEndian.Uint16(req[6:]) != unix.NLM_F_REQUEST|unix.NLM_F_DUMP ||
		binary.NativeEndian.Uint32(req[8:]) != seq {
		t.Errorf("request %x (%v)", req[:n], err)
	}

	// Nothing answers: the deadline, already past, ends the dump.
	if _, err := c.Dump(100, nil, time.Now().Add(-time.Second), func(uint16, []byte) error { return nil }); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("no reply: %v", err)
	}
}

// negErrno is errno as the kernel writes it in a reply: negative.
func negErrno(errno unix.Errno) uint32 { return uint32(-int32(errno)) }
