package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unicode"
)

// One target has one spelling — the /probe cache key, the address dialled
// and the label — and anything that is not host:port with a port 1–65535
// is refused.
func TestNormalizeHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:10911":             "127.0.0.1:10911",
		"[::ffff:127.0.0.1]:10911":    "127.0.0.1:10911", // IPv4-mapped IPv6 is the IPv4 address
		"[::FFFF:7f00:1]:10911":       "127.0.0.1:10911",
		"127.0.0.1:010911":            "127.0.0.1:10911", // leading zeros of the port
		"[2001:DB8:0:0::1]:10911":     "[2001:db8::1]:10911",
		"[::1]:1":                     "[::1]:1",
		"Broker-A.Example.COM:10911":  "broker-a.example.com:10911",
		"broker-a.example.com.:10911": "broker-a.example.com:10911", // the root's dot
		"rmq_broker-0:65535":          "rmq_broker-0:65535",
		"localhost:10911":             "localhost:10911",
	} {
		got, err := NormalizeHostPort(in)
		if err != nil || got != want {
			t.Errorf("NormalizeHostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"127.0.0.1:10911/x", "127.0.0.1:10911?a=b", "127.0.0.1:10911#f", ":0", ":-1", ":99999", ":10911",
		"127.0.0.1:0", "127.0.0.1:-1", "127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:+1", "127.0.0.1:0x10",
		"127.0.0.1:10911\x00", "127.0.0.1:10911%00", "127.0.0.1%2f:10911", "user@127.0.0.1:10911",
		"127.0.0.1", "127.0.0.1:", "::1:10911", "[::1]", "[::1]10911", "[fe80::1%eth0]:10911", "[127.0.0.1]:10911",
		"a b:10911", "a\tb:10911", "bro\\ker:10911", "127.1:10911", "010.0.0.1:10911", "0x7f.0.0.1:10911",
		"-broker:10911", "broker..a:10911", strings.Repeat("a", 64) + ".b:10911", strings.Repeat("a.", 127) + "aa:10911",
		"brö ker:10911", "", ":", "redis://127.0.0.1:6379",
	} {
		if got, err := NormalizeHostPort(in); err == nil {
			t.Errorf("NormalizeHostPort(%q) = %q, want an error", in, got)
		}
	}
}

// FuzzNormalizeHostPort: a /probe target is outside input. What is accepted
// is one spelling (normalising it again changes nothing), splits into a host
// and a port 1–65535, and carries nothing but an address.
func FuzzNormalizeHostPort(f *testing.F) {
	for _, s := range []string{"127.0.0.1:10911", "[::ffff:127.0.0.1]:010911", "Broker.Example.:1", "[fe80::1%eth0]:1", "a:10911/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeHostPort(s)
		if err != nil {
			if len(err.Error()) > 300 {
				t.Fatalf("error of %d bytes for a %d-byte target", len(err.Error()), len(s))
			}
			return
		}
		if again, err := NormalizeHostPort(n); err != nil || again != n {
			t.Fatalf("NormalizeHostPort(%q) = %q, which normalises to %q, %v", s, n, again, err)
		}
		host, port, err := net.SplitHostPort(n)
		p, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			t.Fatalf("NormalizeHostPort(%q) = %q: not host:port", s, n)
		}
		if strings.ContainsAny(n, "/?#%@ \\") || strings.IndexFunc(n, unicode.IsControl) >= 0 {
			t.Fatalf("NormalizeHostPort(%q) = %q: more than an address", s, n)
		}
	})
}

// The allowlist compares normalised targets: a mapped address is the IPv4
// address, an exact entry matches another spelling of itself, a host
// means the module's default port or any port, a CIDR never matches a
// name.
func TestAllowlist(t *testing.T) {
	for _, tc := range []struct {
		allow       []string
		pattern     string
		defaultPort string
		target      string
		ok          bool
	}{
		{nil, "", "", "10.0.0.1:10911", false},
		{[]string{"*"}, "", "", "10.0.0.1:10911", true},
		{[]string{"10.0.0.1:10911"}, "", "", "10.0.0.1:10911", true},
		{[]string{"10.0.0.1:10911"}, "", "", "10.0.0.1:10909", false},
		{[]string{"10.0.0.1"}, "", "", "10.0.0.1:10909", true},
		{[]string{"10.0.0.1"}, "", "6379", "10.0.0.1:6379", true},
		{[]string{"10.0.0.1"}, "", "6379", "10.0.0.1:6380", false},
		{[]string{"[::1]"}, "", "", "[::1]:10911", true},
		{[]string{"10.0.0.0/24"}, "", "", "10.0.0.77:10911", true},
		{[]string{"10.0.0.0/24"}, "", "", "10.0.1.77:10911", false},
		{[]string{"10.0.0.0/24"}, "", "", "broker.example:10911", false},
		{[]string{"broker.example"}, "", "", "broker.example:10911", true},
		{[]string{" Broker.Example "}, "", "", "broker.example:10911", true},
		{[]string{"127.0.0.1/32"}, "", "", "127.0.0.1:10911", true},
		{[]string{"::ffff:127.0.0.0/104"}, "", "", "127.0.0.1:10911", true},
		{[]string{"[::ffff:127.0.0.1]:10911"}, "", "", "127.0.0.1:10911", true},
		{nil, `redis-[0-9]+\.internal:6379`, "6379", "redis-7.internal:6379", true},
		{nil, `redis-[0-9]+\.internal:6379`, "6379", "x.redis-7.internal:6379", false}, // anchored
		{nil, `redis-[0-9]+\.internal:6379`, "6379", "redis-7.internal:6379x", false},
	} {
		a, err := ParseAllowlist(tc.allow, tc.pattern, tc.defaultPort)
		if err != nil {
			t.Fatalf("%q: %v", tc.allow, err)
		}
		if got := a.Allows(tc.target); got != tc.ok {
			t.Errorf("allow %q /%s/ default port %q, target %q: %v, want %v", tc.allow, tc.pattern, tc.defaultPort, tc.target, got, tc.ok)
		}
	}
	if (*Allowlist)(nil).Allows("10.0.0.1:1") {
		t.Error("a nil allowlist allows nothing")
	}
	for _, bad := range [][]string{{""}, {"10.0.0.0/33"}, {"a b"}, {"10.0.0.1:0"}, {"host:port"}} {
		if _, err := ParseAllowlist(bad, "", ""); err == nil {
			t.Errorf("ParseAllowlist(%q): want an error", bad)
		}
	}
	if _, err := ParseAllowlist(nil, "(", ""); err == nil {
		t.Error("a bad regexp: want an error")
	}
}

func TestNetworkReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, ReasonDNS},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), ReasonRefused},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENOENT)}, ReasonRefused},
		{fmt.Errorf("INFO: %w", context.DeadlineExceeded), ReasonTimeout},
		{os.ErrDeadlineExceeded, ReasonTimeout},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, ReasonTLS},
		{&tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}, ReasonTLS},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ReasonNetwork},
		{errors.New("EOF"), ReasonNetwork},
	} {
		if got := NetworkReason(tc.err); got != tc.want {
			t.Errorf("NetworkReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// Readers share one budget: a reply that could never fit is refused at
// once; one that does not fit now waits until bytes come back or its
// deadline passes; giving back wakes the waiter; a hold that replaces its
// buffer gives back the old one.
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBudget(100)
		h1 := b.NewHold()
		if err := h1.Take(t.Context(), 101, 0); !errors.Is(err, ErrBudget) || b.InUse() != 0 {
			t.Fatalf("101 bytes of a 100-byte budget: %v, in use %d", err, b.InUse())
		}
		if err := h1.Take(t.Context(), 60, 0); err != nil || b.InUse() != 60 {
			t.Fatalf("first 60 bytes: %v, in use %d", err, b.InUse())
		}
		// A hold growing its buffer from 60 to 90 bytes needs 90 more for
		// a moment: that never fits with its own 60 held.
		if err := h1.Take(t.Context(), 90, 60); !errors.Is(err, ErrBudget) {
			t.Fatalf("growing past the budget: %v", err)
		}
		if err := h1.Take(t.Context(), 30, 20); err != nil || h1.Held() != 70 || b.InUse() != 70 {
			t.Fatalf("30 more replacing 20: %v, held %d, in use %d", err, h1.Held(), b.InUse())
		}

		h2 := b.NewHold()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if err := h2.Take(ctx, 50, 0); !errors.Is(err, ErrBudget) {
			t.Fatalf("50 bytes while 70 of 100 are held: %v", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("gave up after %v, want at its deadline (1s)", waited)
		}

		done := make(chan error)
		go func() { done <- h2.Take(t.Context(), 50, 0) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("took 50 bytes while 70 of 100 are held: %v", err)
		default:
		}
		h1.Give(40)
		if err := <-done; err != nil || b.InUse() != 80 {
			t.Fatalf("after 40 bytes came back: %v, in use %d", err, b.InUse())
		}
		h1.Release()
		h2.Release()
		h2.Release()
		if b.InUse() != 0 || h1.Held() != 0 {
			t.Errorf("in use %d after every hold was released", b.InUse())
		}
		var none Hold
		if err := none.Take(t.Context(), 1<<40, 0); err != nil {
			t.Errorf("a hold without a budget takes anything: %v", err)
		}
	})
}
