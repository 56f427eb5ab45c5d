package collector

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/collector/redisx"
)

func TestParseRedisTarget(t *testing.T) {
	s := redisConnSettings{dialTimeout: time.Second, passwordFile: "/etc/default-pw"}
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
		spec, err := parseRedisTarget(c.in, s, false)
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
	spec, err := parseRedisTarget("redis://u:hunter2@h:1", s, false)
	if err != nil || strings.Contains(spec.label, "hunter2") {
		t.Fatalf("%v %q", err, spec.label)
	}
	if _, pw, _ := spec.opts.CredentialsProviderContext(t.Context()); pw != "hunter2" {
		t.Errorf("URL password %q", pw)
	}
	t.Setenv("STALL_PW_TEST", "from-env")
	spec, _ = parseRedisTarget("redis://h:1?password_env=STALL_PW_TEST", s, false)
	if u, pw, _ := spec.opts.CredentialsProviderContext(t.Context()); pw != "from-env" || u != "" {
		t.Errorf("env password %q user %q", pw, u)
	}
	for _, bad := range []string{"", "http://h:1", "redis://h:1/x/y", "redis://h:1?bogus=1", "redis://u:hunter2@h:1/notadb"} {
		_, err := parseRedisTarget(bad, s, false)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("password in error %v", err)
		}
	}
	if spec, err := parseRedisTarget("redis://h:1?bigkeys_replica=10.0.0.2:6379", s, false); err != nil || spec.bigKeysReplica != "10.0.0.2:6379" {
		t.Errorf("bigkeys_replica: %v %+v", err, spec)
	}
	for _, bad := range []string{"redis://h:1?bigkeys_replica=10.0.0.2:6379", "rediss://h:1?skip_verify=true", "redis://h:1?pool_size=1000"} {
		if _, err := parseRedisTarget(bad, s, true); err == nil {
			t.Errorf("/probe target %s accepted", bad)
		}
	}
	if spec, _ := parseRedisTarget("redis://h:1?dial_timeout=5s", s, false); spec.opts.DialTimeout != 5*time.Second {
		t.Errorf("?dial_timeout= did not win: %v", spec.opts.DialTimeout)
	}
	// /probe targets may not choose their credentials.
	for _, bad := range []string{"redis://u:pw@h:1", "redis://h:1?password_file=/etc/shadow", "redis://h:1?password_env=HOME"} {
		if _, err := parseRedisTarget(bad, s, true); !errors.Is(err, errCredentialsInProbeTarget) {
			t.Errorf("probe target %q: %v", bad, err)
		}
	}
}

func TestRedisAllowlist(t *testing.T) {
	s := redisConnSettings{}
	a, err := newRedisAllowlist([]string{"10.0.0.1:6379", "redis://cache-1:6380", "unix:///run/redis.sock"}, `10\.1\.\d+\.\d+:6379`, s)
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]bool{
		"10.0.0.1:6379": true, "redis://10.0.0.1:6379": true, "rediss://10.0.0.1:6379": true,
		"cache-1:6380": true, "10.1.2.3:6379": true, "unix:///run/redis.sock": true,
		"10.0.0.1:6380": false, "10.1.2.3:6379.evil.example:6379": false, "x10.1.2.3:6379": false,
		"169.254.169.254:80": false, "cache-1:6379": false,
	} {
		spec, err := parseRedisTarget(target, s, true)
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		if got := a.allowed(spec.hostPort); got != want {
			t.Errorf("%s allowed = %v, want %v", target, got, want)
		}
	}
	if _, err := newRedisAllowlist(nil, "(", s); err == nil {
		t.Error("bad regexp accepted")
	}
}

// TestRedisProbe drives the /probe factory: refused targets get
// ErrTargetNotAllowed before any connection, allowed ones are scraped and
// cached between requests.
func TestRedisProbe(t *testing.T) {
	r := startRedis(t)
	var pc redisProbeCache
	s := testRedisSettings()
	allow, err := newRedisAllowlist([]string{r.addr}, "", s.conn)
	if err != nil {
		t.Fatal(err)
	}
	pc.configure(s, allow)
	t.Cleanup(func() { pc.configure(s, allow) })
	cfg := testConfig(nil)
	if _, err := pc.get(cfg, "127.0.0.2:6379"); !errors.Is(err, ErrTargetNotAllowed) {
		t.Fatalf("refused target: %v", err)
	}
	if _, err := pc.get(cfg, "redis://x:pw@"+r.addr); !errors.Is(err, errCredentialsInProbeTarget) {
		t.Fatalf("credentials in target: %v", err)
	}
	c1, err := pc.get(cfg, r.addr)
	if err != nil {
		t.Fatal(err)
	}
	res := scrape(t, c1, 3*time.Second)
	if v := res.must(t, "stall_redis_up", "addr", "redis://"+r.addr); v != 1 {
		t.Fatalf("probe up %v: %v", v, res.err)
	}
	c2, _ := pc.get(cfg, "redis://"+r.addr)
	if c1.(redisProbeCollector).t != c2.(redisProbeCollector).t {
		t.Error("the same target should reuse its connection and state")
	}
}

// TestRedisClientListDue walks the auto-mode schedule without a server:
// thresholds, the extra run after a triggered one, and every Nth scrape.
func TestRedisClientListDue(t *testing.T) {
	s := testRedisSettings()
	s.clEvery = 3
	tg := &redisTarget{s: s}
	quiet := redisx.ParseInfo("client_recent_max_output_buffer:0\r\nmem_clients_normal:20000\r\n")
	bigOut := redisx.ParseInfo("client_recent_max_output_buffer:5242880\r\nmem_clients_normal:20000\r\n")
	bigMem := redisx.ParseInfo("client_recent_max_output_buffer:0\r\nmem_clients_normal:1073741824\r\n")
	old := redisx.ParseInfo("client_longest_output_list:1\r\n") // 2.8: one queued reply node, of any size
	type step struct {
		info           redisx.Info
		ms             redisx.MemoryStats
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
		{info: quiet, ms: redisx.MemoryStats{HasClients: true, ClientsNormal: 600 << 20}, run: true, triggered: true}, // 8: MEMORY STATS wins over INFO
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
	if run, _ := tg.clientListDue(bigOut, redisx.MemoryStats{}); run {
		t.Error("never mode ran")
	}
	tg.s.clMode = "always"
	if run, _ := tg.clientListDue(quiet, redisx.MemoryStats{}); !run {
		t.Error("always mode skipped")
	}
}

// FuzzParseRedisTarget: /probe targets are outside input. Parsing never
// panics, and an accepted target never carries the password into its
// label or host:port.
func FuzzParseRedisTarget(f *testing.F) {
	for _, s := range []string{"localhost:6379", "redis://u:secret@h:1/2", "rediss://[::1]:6390?password_file=/x",
		"unix:///run/r.sock", "redis://h:1?dial_timeout=1s", "redis://%zz", "://", "redis://[::1", "unix://u:secret@/p"} {
		f.Add(s)
	}
	settings := redisConnSettings{dialTimeout: time.Second}
	f.Fuzz(func(t *testing.T, target string) {
		for _, probe := range []bool{false, true} {
			spec, err := parseRedisTarget(target, settings, probe)
			if err != nil {
				continue
			}
			if spec.opts.Password != "" {
				t.Fatalf("%q: static password left in the options", target)
			}
			// The label is built only from the scheme and the address the
			// URL parser found after the userinfo was removed.
			scheme, _, _ := strings.Cut(spec.label, "://")
			if spec.label != scheme+"://"+spec.hostPort || spec.hostPort != spec.opts.Addr {
				t.Fatalf("%q: label %q not scheme://%s", target, spec.label, spec.opts.Addr)
			}
			if !utf8.ValidString(spec.label) {
				t.Fatalf("%q: label %q is not valid UTF-8", target, spec.label)
			}
			if probe && spec.passwordInURL {
				t.Fatalf("%q: a /probe target kept a URL password", target)
			}
		}
	})
}
