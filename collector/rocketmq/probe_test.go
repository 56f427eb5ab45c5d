package rocketmq

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// normalizeHostPort: one broker has one spelling — the cache key of /probe,
// the address dialled and the broker label — and anything that is not
// host:port with a port 1–65535 is refused (review 1, item 11).
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
		got, err := normalizeHostPort(in)
		if err != nil || got != want {
			t.Errorf("normalizeHostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"127.0.0.1:10911/x", "127.0.0.1:10911?a=b", "127.0.0.1:10911#f", ":0", ":-1", ":99999", ":10911",
		"127.0.0.1:0", "127.0.0.1:-1", "127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:+1", "127.0.0.1:0x10",
		"127.0.0.1:10911\x00", "127.0.0.1:10911%00", "127.0.0.1%2f:10911", "user@127.0.0.1:10911",
		"127.0.0.1", "127.0.0.1:", "::1:10911", "[::1]", "[::1]10911", "[fe80::1%eth0]:10911", "[127.0.0.1]:10911",
		"a b:10911", "a\tb:10911", "bro\\ker:10911", "127.1:10911", "010.0.0.1:10911", "0x7f.0.0.1:10911",
		"-broker:10911", "broker..a:10911", strings.Repeat("a", 64) + ".b:10911", strings.Repeat("a.", 127) + "aa:10911",
		"brö ker:10911", "", ":",
	} {
		if got, err := normalizeHostPort(in); err == nil {
			t.Errorf("normalizeHostPort(%q) = %q, want an error", in, got)
		}
	}
}

// /probe refuses malformed targets before anything else (400, no
// connection), matches the allowlist on the normalised target, and keeps one
// collector and one connection per broker however the target is spelled.
func TestProbeTargets(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "")
	defaultFlags(t)
	old := *probeAllowFlag
	defer func() { *probeAllowFlag = old }()
	_, port, _ := strings.Cut(b.Addr(), ":")
	*probeAllowFlag = []string{"127.0.0.1/32"}
	cfg := collectortest.Config("rocketmq", nil)
	for _, bad := range []string{
		b.Addr() + "/x", b.Addr() + "?a=b", ":0", ":-1", ":99999", b.Addr() + "\x00", "127.0.0.1:99999",
	} {
		c, err := probe(cfg, bad)
		if err == nil || errors.Is(err, collector.ErrTargetNotAllowed) {
			t.Errorf("probe(%q) = %v, %v; want a bad-target error", bad, c, err)
		}
		if err != nil && strings.ContainsRune(err.Error(), 0) {
			t.Errorf("probe(%q): the error carries the NUL: %q", bad, err)
		}
	}
	if n := b.Accepted(); n != 0 {
		t.Errorf("%d connections to the broker for refused targets", n)
	}
	var first collector.Collector
	for _, spelling := range []string{b.Addr(), "[::ffff:127.0.0.1]:" + port, "127.0.0.1:0" + port} {
		c, err := probe(cfg, spelling)
		if err != nil {
			t.Fatalf("probe(%q): %v", spelling, err)
		}
		if first == nil {
			first = c
		} else if c != first {
			t.Errorf("probe(%q) is another collector than probe(%q): one broker, two cache entries", spelling, b.Addr())
		}
		got, _ := scrape(t, c, "stall_rocketmq_up", "stall_rocketmq_broker_info")
		expect(t, got, `
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="`+b.Addr()+`",broker_id="",cluster="",version="V4_9_7"} 1
stall_rocketmq_up{broker="`+b.Addr()+`",broker_id="",cluster=""} 1
`)
	}
	if n := b.Accepted(); n != 1 {
		t.Errorf("%d connections for one broker probed under three spellings, want 1", n)
	}
	// The allowlist sees the normalised target: a mapped address is the
	// IPv4 address, an exact entry matches another spelling of itself.
	for _, tc := range []struct {
		allow  []string
		target string
		ok     bool
	}{
		{[]string{"127.0.0.1/32"}, "[::ffff:127.0.0.1]:10911", true},
		{[]string{"::ffff:127.0.0.0/104"}, "127.0.0.1:10911", true},
		{[]string{"[::ffff:127.0.0.1]:10911"}, "127.0.0.1:10911", true},
		{[]string{"127.0.0.1:10911"}, "127.0.0.1:010911", true},
		{[]string{"Broker.Example"}, "broker.example.:10911", true},
		{[]string{"10.0.0.0/8"}, "[::ffff:127.0.0.1]:10911", false},
		{[]string{"127.0.0.1:10911"}, "127.0.0.1:10912", false},
	} {
		target, err := normalizeHostPort(tc.target)
		if err != nil {
			t.Fatalf("%q: %v", tc.target, err)
		}
		if got := probeAllowed(tc.allow, target); got != tc.ok {
			t.Errorf("allow %q, target %q: %v, want %v", tc.allow, tc.target, got, tc.ok)
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
		n, err := normalizeHostPort(s)
		if err != nil {
			if len(err.Error()) > 300 {
				t.Fatalf("error of %d bytes for a %d-byte target", len(err.Error()), len(s))
			}
			return
		}
		if again, err := normalizeHostPort(n); err != nil || again != n {
			t.Fatalf("normalizeHostPort(%q) = %q, which normalises to %q, %v", s, n, again, err)
		}
		host, port, err := net.SplitHostPort(n)
		p, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			t.Fatalf("normalizeHostPort(%q) = %q: not host:port", s, n)
		}
		if strings.ContainsAny(n, "/?#%@ \\") || strings.IndexFunc(n, unicode.IsControl) >= 0 {
			t.Fatalf("normalizeHostPort(%q) = %q: more than an address", s, n)
		}
	})
}
