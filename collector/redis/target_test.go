package redis

import (
	"errors"
	"io"
	"net"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

func TestParseTarget(t *testing.T) {
	t.Setenv("PW", "pw")
	s := connSettings{dialTimeout: time.Second, passwordFile: "/etc/default-pw"}
	cases := []struct {
		in, label, hostPort string
		user, file, env     string
	}{
		{"localhost:6379", "redis://localhost:6379", "localhost:6379", "", "/etc/default-pw", ""},
		{"redis://10.0.0.1", "redis://10.0.0.1:6379", "10.0.0.1:6379", "", "/etc/default-pw", ""},
		{"redis://app@10.0.0.1:6380/2?password_env=PW", "redis://10.0.0.1:6380", "10.0.0.1:6380", "app", "", "PW"},
		{"rediss://cache.example:6390?password_file=/run/pw", "rediss://cache.example:6390", "cache.example:6390", "", "/run/pw", ""},
		{"redis://[2001:db8::1]:7000", "redis://[2001:db8::1]:7000", "[2001:db8::1]:7000", "", "/etc/default-pw", ""},
		{"unix:///run/redis/redis.sock", "unix:///run/redis/redis.sock", "/run/redis/redis.sock", "", "/etc/default-pw", ""},
	}
	for _, c := range cases {
		spec, err := parseTarget(c.in, s)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if spec.label != c.label || spec.hostPort != c.hostPort || spec.user != c.user {
			t.Errorf("%s: label %q hostPort %q user %q", c.in, spec.label, spec.hostPort, spec.user)
		}
		if spec.opts.Password != "" || spec.opts.CredentialsProviderContext == nil {
			t.Errorf("%s: password not behind the provider", c.in)
		}
		if spec.opts.DialTimeout != time.Second || spec.opts.Protocol != 2 {
			t.Errorf("%s: options %v %v", c.in, spec.opts.DialTimeout, spec.opts.Protocol)
		}
		if strings.HasPrefix(c.in, "rediss") && (spec.opts.TLSConfig == nil || spec.opts.TLSConfig.ServerName != "cache.example") {
			t.Errorf("%s: TLS %+v", c.in, spec.opts.TLSConfig)
		}
	}

	// The URL password is used but never shows in the label or an error.
	spec, err := parseTarget("redis://u:hunter2@h:1", s)
	if err != nil || strings.Contains(spec.label, "hunter2") {
		t.Fatalf("%v %q", err, spec.label)
	}
	if _, pw, _ := spec.opts.CredentialsProviderContext(t.Context()); pw != "hunter2" {
		t.Errorf("URL password %q", pw)
	}
	t.Setenv("STALL_PW_TEST", "from-env")
	spec, _ = parseTarget("redis://h:1?password_env=STALL_PW_TEST", s)
	if u, pw, _ := spec.opts.CredentialsProviderContext(t.Context()); pw != "from-env" || u != "" {
		t.Errorf("env password %q user %q", pw, u)
	}
	for _, bad := range []string{"", "http://h:1", "redis://h:1/x/y", "redis://h:1?bogus=1", "redis://u:hunter2@h:1/notadb",
		"127.0.0.1:99999", "h:0", "redis://u:hunter2@h:65536", "rediss://[::1]:0", "h:abc"} {
		_, err := parseTarget(bad, s)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("password in error %v", err)
		}
	}
	if spec, err := parseTarget("redis://h:1?bigkeys_replica=10.0.0.2:6379", s); err != nil || spec.bigKeysReplica != "10.0.0.2:6379" {
		t.Errorf("bigkeys_replica: %v %+v", err, spec)
	}
	if spec, _ := parseTarget("redis://h:1?dial_timeout=5s", s); spec.opts.DialTimeout != 5*time.Second {
		t.Errorf("?dial_timeout= did not win: %v", spec.opts.DialTimeout)
	}
}

// TestParseProbeAddress: a /probe request names an address and nothing
// else: no user, password, database, query or fragment.
func TestParseProbeAddress(t *testing.T) {
	for in, want := range map[string]probeAddress{
		"10.0.0.1:6379":              {"", "10.0.0.1:6379"},
		"10.0.0.1":                   {"", "10.0.0.1:6379"},
		"redis://cache-1:6380":       {"redis", "cache-1:6380"},
		"rediss://cache-1:6380/":     {"rediss", "cache-1:6380"},
		"redis://[2001:db8::1]:7000": {"redis", "[2001:db8::1]:7000"},
		"unix:///run/redis.sock":     {"unix", "/run/redis.sock"},
		// One spelling per address (remote.NormalizeHostPort) and scheme.
		"Cache-1.Example.:06380":      {"", "cache-1.example:6380"},
		"REDIS://[::ffff:10.0.0.1]:1": {"redis", "10.0.0.1:1"},
		"h:007":                       {"", "h:7"},
	} {
		got, err := parseProbeAddress(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"redis://u:pw@h:1", "redis://admin@h:1", "redis://:pw@h:1", "unix://u@/run/r.sock"} {
		if _, err := parseProbeAddress(bad); !errors.Is(err, errCredentialsInProbeTarget) {
			t.Errorf("%q: %v, want the credentials error", bad, err)
		}
	}
	for _, bad := range []string{"", "http://h:1", "redis://h:1/x", "redis://h:1/2/3", "redis://h:1?password_file=/etc/shadow",
		"rediss://h:1?skip_verify=true", "redis://h:1?", "redis://h:1#x", "redis://:6379", "unix://", "unix://host/p",
		"redis:h:1", "redis://%zz", "\xff:1",
		// A socket path is an absolute, clean path and nothing else.
		"unix:///@/../x", "unix:///run//r.sock", "unix:///run/r.sock/", "unix:///", "unix://relative", "unix:///%00", "unix:///%ff"} {
		if _, err := parseProbeAddress(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// A port outside 1–65535 is refused, not dialled.
	for _, bad := range []string{"h:99999", "h:0", "redis://h:65536", "redis://[::1]:0", "h:18446744073709551617"} {
		if _, err := parseProbeAddress(bad); !errors.Is(err, errProbePort) {
			t.Errorf("%q: %v, want the port error", bad, err)
		}
	}
	if p, err := parseProbeAddress("h:65535"); err != nil || p.hostPort != "h:65535" {
		t.Errorf("h:65535: %+v %v", p, err)
	}
}

func TestAllowlist(t *testing.T) {
	s := connSettings{user: "monitor", passwordFile: "/etc/default-pw"}
	a, err := newAllowlist(nil, []string{"10.0.0.1:6379", "rediss://app@cache-1:6380?password_file=/run/pw", "unix:///run/redis.sock"},
		`10\.1\.\d+\.\d+:6379`, "rediss", s)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		label, user string
	}
	for target, w := range map[string]*want{
		"10.0.0.1:6379":          {"redis://10.0.0.1:6379", "monitor"},
		"redis://10.0.0.1:6379":  {"redis://10.0.0.1:6379", "monitor"},
		"cache-1:6380":           {"rediss://cache-1:6380", "app"},
		"rediss://cache-1:6380":  {"rediss://cache-1:6380", "app"},
		"10.1.2.3:6379":          {"rediss://10.1.2.3:6379", "monitor"}, // --redis.probe.scheme
		"unix:///run/redis.sock": {"unix:///run/redis.sock", "monitor"},
		// A request may not change how a configured address is reached.
		"rediss://10.0.0.1:6379": nil, "redis://cache-1:6380": nil, "redis://10.1.2.3:6379": nil,
		// Not allowed at all.
		"10.0.0.1:6380": nil, "10.1.2.3:6379.evil.example:6379": nil, "x10.1.2.3:6379": nil,
		"169.254.169.254:80": nil, "cache-1:6379": nil, "unix:///run/other.sock": nil,
	} {
		addr, err := parseProbeAddress(target)
		if err != nil {
			if w != nil {
				t.Errorf("%s: %v", target, err)
			}
			continue
		}
		spec, err := a.resolve(addr)
		switch {
		case w == nil && !errors.Is(err, collector.ErrTargetNotAllowed):
			t.Errorf("%s: resolved (%v), want ErrTargetNotAllowed", target, err)
		case w != nil && err != nil:
			t.Errorf("%s: %v", target, err)
		case w != nil && (spec.label != w.label || spec.user != w.user):
			t.Errorf("%s: probed as %s user %q, want %s user %q", target, spec.label, spec.user, w.label, w.user)
		}
	}
	if _, err := newAllowlist(nil, nil, "(", "redis", s); err == nil {
		t.Error("bad regexp accepted")
	}
	// remote.Allowlist entries: a CIDR, a bare host (port 6379) and "*"
	// are probed as redis:// with the default credentials; a configured
	// target keeps how it is reached even when an entry also covers it;
	// "*" does not reach socket paths.
	wide, err := newAllowlist([]string{"rediss://app@10.2.0.9:6380"}, []string{"10.2.0.0/16", "cache-2"}, "", "rediss", s)
	if err != nil {
		t.Fatal(err)
	}
	star, err := newAllowlist(nil, []string{"*"}, "", "redis", s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a             *allowlist
		target, label string // label "": refused
	}{
		{wide, "10.2.3.4:7000", "redis://10.2.3.4:7000"},
		{wide, "10.2.0.9:6380", "rediss://10.2.0.9:6380"},
		{wide, "cache-2", "redis://cache-2:6379"},
		{wide, "CACHE-2:6379", "redis://cache-2:6379"},
		{wide, "cache-2:6380", ""},
		{wide, "10.3.0.1:6379", ""},
		{star, "anything.example:1", "redis://anything.example:1"},
		{star, "unix:///run/redis.sock", ""},
	} {
		addr, err := parseProbeAddress(c.target)
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		spec, err := c.a.resolve(addr)
		switch {
		case c.label == "" && !errors.Is(err, collector.ErrTargetNotAllowed):
			t.Errorf("%s: %v, want ErrTargetNotAllowed", c.target, err)
		case c.label != "" && (err != nil || spec.label != c.label):
			t.Errorf("%s: %v %v, want %s", c.target, spec, err, c.label)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "h:0", ""} {
		if _, err := newAllowlist(nil, []string{bad}, "", "redis", s); err == nil || !strings.HasPrefix(err.Error(), "--redis.probe.allowed-targets") {
			t.Errorf("entry %q: %v, want an error naming the flag", bad, err)
		}
	}
	// One address configured two ways: a probe could not say which it means.
	if _, err := newAllowlist(nil, []string{"redis://h:1", "rediss://h:1"}, "", "redis", s); err == nil {
		t.Error("an address configured with two schemes was accepted")
	}
	if _, err := newAllowlist(nil, []string{"redis://h:1", "h:1"}, "", "redis", s); err != nil {
		t.Errorf("the same target listed twice: %v", err)
	}
}

// recordingListener accepts connections and records the first bytes each
// one sends, answering nothing.
func recordingListener(t *testing.T) (addr string, first func() [][]byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var (
		mu  sync.Mutex
		got [][]byte
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 512)
				n, _ := io.ReadAtLeast(c, buf, 1)
				mu.Lock()
				got = append(got, buf[:n])
				mu.Unlock()
			}()
		}
	}()
	return ln.Addr().String(), func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return append([][]byte(nil), got...)
	}
}

// TestClientListDue walks the auto-mode schedule without a server:
// thresholds, the extra run after a triggered one, and every Nth scrape.
func TestClientListDue(t *testing.T) {
	s := testSettings()
	s.clEvery = 3
	tg := &target{s: s}
	quiet := replies.ParseInfo("client_recent_max_output_buffer:0\r\nmem_clients_normal:20000\r\n")
	bigOut := replies.ParseInfo("client_recent_max_output_buffer:5242880\r\nmem_clients_normal:20000\r\n")
	bigMem := replies.ParseInfo("client_recent_max_output_buffer:0\r\nmem_clients_normal:1073741824\r\n")
	old := replies.ParseInfo("client_longest_output_list:1\r\n") // 2.8: one queued reply node, of any size
	type step struct {
		info           replies.Info
		ms             replies.MemoryStats
		run, triggered bool
	}
	steps := []step{
		{info: quiet},            // scrape 1
		{info: quiet},            // 2
		{info: quiet, run: true}, // 3: every 3rd
		{info: bigOut, run: true, triggered: true}, // 4
		{info: quiet, run: true},                   // 5: once more after a triggered run
		{info: quiet, run: true},                   // 6: every 3rd again
		{info: bigMem, run: true, triggered: true}, // 7
		{info: quiet, ms: replies.MemoryStats{HasClients: true, ClientsNormal: 600 << 20}, run: true, triggered: true}, // 8: MEMORY STATS wins over INFO
		{info: old, run: true, triggered: true}, // 9
	}
	for i, st := range steps {
		tg.scrapes++
		run, trig := tg.clientListDue(st.info, st.ms)
		if run != st.run || trig != st.triggered {
			t.Errorf("scrape %d: run %v triggered %v, want %v %v", i+1, run, trig, st.run, st.triggered)
		}
		if run {
			tg.cl = clientListResult{have: true, triggered: trig}
		}
	}
	tg.s.clMode = "never"
	if run, _ := tg.clientListDue(bigOut, replies.MemoryStats{}); run {
		t.Error("never mode ran")
	}
	tg.s.clMode = "always"
	if run, _ := tg.clientListDue(quiet, replies.MemoryStats{}); !run {
		t.Error("always mode skipped")
	}
}

// FuzzParseTarget: configured targets and /probe targets (outside
// input). Parsing never panics; an accepted target never carries the
// password into its label, and its label is its lower-case scheme and its
// address in the one spelling the allowlist matches; an accepted /probe
// address carries no user, password or option: a host:port as
// remote.NormalizeHostPort writes it, or an absolute, clean socket path.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"localhost:6379", "redis://u:secret@h:1/2", "rediss://[::1]:6390?password_file=/x",
		"unix:///run/r.sock", "redis://h:1?dial_timeout=1s", "redis://%zz", "://", "redis://[::1", "unix://u:secret@/p", "uniX:///@"} {
		f.Add(s)
	}
	conn := connSettings{dialTimeout: time.Second}
	f.Fuzz(func(t *testing.T, target string) {
		if spec, err := parseTarget(target, conn); err == nil {
			if spec.opts.Password != "" {
				t.Fatalf("%q: static password left in the options", target)
			}
			if spec.label != spec.scheme+"://"+spec.hostPort || spec.hostPort != spec.opts.Addr || spec.scheme != strings.ToLower(spec.scheme) {
				t.Fatalf("%q: label %q not scheme://%s", target, spec.label, spec.opts.Addr)
			}
			checkAddress(t, target, spec.scheme, spec.hostPort)
		}
		p, err := parseProbeAddress(target)
		if err != nil {
			return
		}
		switch p.scheme {
		case "", "redis", "rediss", "unix":
		default:
			t.Fatalf("%q: probe scheme %q", target, p.scheme)
		}
		checkAddress(t, target, p.scheme, p.hostPort)
	})
}

// checkAddress fails unless addr is what a target of scheme may be
// called by: an absolute, clean socket path for unix, else a host:port
// that remote.NormalizeHostPort leaves as it is.
func checkAddress(t *testing.T, target, scheme, addr string) {
	t.Helper()
	if !utf8.ValidString(addr) {
		t.Fatalf("%q: address %q is not valid UTF-8", target, addr)
	}
	if scheme == "unix" {
		if !strings.HasPrefix(addr, "/") || path.Clean(addr) != addr || strings.IndexByte(addr, 0) >= 0 {
			t.Fatalf("%q: socket path %q", target, addr)
		}
		return
	}
	if n, err := remote.NormalizeHostPort(addr); err != nil || n != addr {
		t.Fatalf("%q: address %q normalises to %q, %v", target, addr, n, err)
	}
}
