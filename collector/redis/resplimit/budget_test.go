package resplimit

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestBudgetSharedByConns: two connections share a budget that fits one
// held bulk string. The second waits while the first holds its bytes and
// fails with ErrBudget at its read deadline, without reading its payload;
// once the first reader has taken its whole string, the budget is free
// again and a third connection reads at once (review 2, F8: 40 concurrent
// probes of 1 MiB replies nearly filled a 64 MiB cgroup).
func TestBudgetSharedByConns(t *testing.T) {
	budget := NewBudget(150)
	refused := 0
	conn := func() (net.Conn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return NewConn(a, Options{Limit: 1 << 20, HoldAbove: 10, Budget: budget, OnBudget: func() { refused++ }}), b
	}
	reply := "$100\r\n" + strings.Repeat("x", 100) + "\r\n"
	c1, s1 := conn()
	go func() { _, _ = s1.Write([]byte(reply)) }()
	buf := make([]byte, 9)
	_ = c1.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := io.ReadFull(c1, buf); err != nil || string(buf[:n]) != "$100\r\nxxx" {
		t.Fatalf("first reply: %q %v", buf[:n], err)
	}
	// c1 has its 102 bytes and the reader has not taken them all.
	if got := budget.InUse(); got != 102 {
		t.Fatalf("in use %d, want 102", got)
	}
	c2, s2 := conn()
	go func() { _, _ = s2.Write([]byte(reply)) }()
	start := time.Now()
	_ = c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := io.ReadFull(c2, buf)
	if !errors.Is(err, ErrBudget) || refused != 1 || budget.Refused.Load() != 1 {
		t.Fatalf("second reply while the budget is full: %v (refused %d)", err, refused)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("gave up after %v, before its deadline", waited)
	}
	rest := make([]byte, len(reply)-len(buf))
	if _, err := io.ReadFull(c1, rest); err != nil || string(rest) != reply[len(buf):] {
		t.Fatalf("rest of the first reply: %v", err)
	}
	if got := budget.InUse(); got != 0 {
		t.Fatalf("in use %d after the reader took the whole reply, want 0", got)
	}
	c3, s3 := conn()
	go func() { _, _ = s3.Write([]byte(reply)) }()
	_ = c3.SetReadDeadline(time.Now().Add(time.Second))
	got := make([]byte, len(reply))
	if _, err := io.ReadFull(c3, got); err != nil || string(got) != reply {
		t.Fatalf("third reply: %v", err)
	}
	// Closing a connection in the middle of a held reply gives its bytes back.
	c4, s4 := conn()
	go func() { _, _ = s4.Write([]byte(reply[:50])) }()
	_ = c4.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c4.Read(buf)
	if budget.InUse() != 102 {
		t.Fatalf("in use %d while c4 holds part of its reply", budget.InUse())
	}
	c4.Close()
	if got := budget.InUse(); got != 0 {
		t.Errorf("in use %d after Close, want 0", got)
	}
}
