package redis

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/probecache"
	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// newTestProbe is the /probe module over allow with settings s.
func newTestProbe(t testing.TB, s settings, addrs, allowed []string, pattern string) *probeModule {
	t.Helper()
	allow, err := newAllowlist(addrs, allowed, pattern, "redis", s.conn)
	if err != nil {
		t.Fatal(err)
	}
	return &probeModule{s: s, allow: allow}
}

// probeTarget asks m for target and builds its collector, as the
// exporter does for a target it does not have yet; the collector is
// closed when the test ends.
func probeTarget(t testing.TB, m *probeModule, target string) (key string, c probeCollector, err error) {
	t.Helper()
	key, build, err := m.Target(target)
	if err != nil {
		return "", probeCollector{}, err
	}
	c = build(collectortest.Config("redis", nil)).(probeCollector)
	t.Cleanup(func() { c.Close() })
	return key, c, nil
}

// TestProbe: refused targets get ErrTargetNotAllowed (or, carrying
// credentials, a bad-target error) before any connection; an allowed one
// is scraped; every spelling of one address is one key, so the exporter
// keeps one collector for it.
func TestProbe(t *testing.T) {
	r := startRedis(t)
	m := newTestProbe(t, testSettings(), []string{r.addr}, nil, "")
	if _, _, err := m.Target("127.0.0.2:6379"); !errors.Is(err, collector.ErrTargetNotAllowed) {
		t.Fatalf("refused target: %v", err)
	}
	if _, _, err := m.Target("redis://x:pw@" + r.addr); !errors.Is(err, errCredentialsInProbeTarget) {
		t.Fatalf("credentials in target: %v", err)
	}
	key, c, err := probeTarget(t, m, r.addr)
	if err != nil {
		t.Fatal(err)
	}
	res := collectortest.Scrape(t, c, 3*time.Second)
	if v := res.Must(t, "stall_redis_up", "addr", "redis://"+r.addr); v != 1 {
		t.Fatalf("probe up %v: %v", v, res.Err)
	}
	for _, spelling := range []string{"redis://" + r.addr, "redis://" + r.addr + "/0"} {
		if k, _, err := m.Target(spelling); err != nil || k != key {
			t.Errorf("Target(%q) = %q, %v; want the key %q of %q", spelling, k, err, key, r.addr)
		}
	}
}

// TestProbeRefusalSaysWhy: allowlist entries are compared as written,
// never resolved (DNS rebinding), so a server configured as localhost:PORT
// is probed under that name and refused as 127.0.0.1:PORT; the refusal
// names the flag that would allow it and the rule, and neither the
// target nor the allowlist's entries.
func TestProbeRefusalSaysWhy(t *testing.T) {
	const port = "26390"
	m := newTestProbe(t, testSettings(), []string{"localhost:" + port}, []string{"unix:///run/configured.sock"}, "")
	if key, _, err := m.Target("localhost:" + port); err != nil || key != "localhost:"+port {
		t.Fatalf("the configured spelling: %q, %v", key, err)
	}
	for _, tc := range []struct{ target, want string }{
		{"127.0.0.1:" + port, "add it to --redis.probe.allowed-targets to allow it. Names and IP addresses are compared as written, never resolved"},
		{"unix:///run/other.sock", "add unix:///path to --redis.probe.allowed-targets to allow it"},
	} {
		_, _, err := m.Target(tc.target)
		if !errors.Is(err, collector.ErrTargetNotAllowed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused with %q", tc.target, err, tc.want)
			continue
		}
		for _, leak := range []string{"localhost:" + port, "configured.sock", tc.target} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: the refusal %q quotes %s", tc.target, err, leak)
			}
		}
	}
}

// TestProbeCannotDowngradeOrChangeUser: with a rediss:// target and a
// password file configured, a probe that spells redis:// is refused, one
// naming another ACL user is refused, and a plain host:port is probed over
// TLS: the listener sees a TLS handshake, never AUTH or the password.
func TestProbeCannotDowngradeOrChangeUser(t *testing.T) {
	addr, first := recordingListener(t)
	const secret = "s3cret-probe-pw"
	pwFile := writeFile(t, t.TempDir(), "pw", secret+"\n")
	s := testSettings()
	s.conn.passwordFile = pwFile
	s.timeout = 500 * time.Millisecond
	m := newTestProbe(t, s, []string{"rediss://monitor@" + addr}, nil, "")

	if _, _, err := m.Target("redis://" + addr); !errors.Is(err, collector.ErrTargetNotAllowed) {
		t.Errorf("redis:// for a rediss:// target: %v, want refused", err)
	}
	if _, _, err := m.Target("rediss://admin@" + addr); !errors.Is(err, errCredentialsInProbeTarget) {
		t.Errorf("another ACL user: %v, want refused", err)
	}
	_, c, err := probeTarget(t, m, addr)
	if err != nil {
		t.Fatal(err)
	}
	if pt := c.t; pt.spec.scheme != "rediss" || pt.spec.user != "monitor" || pt.spec.opts.TLSConfig == nil {
		t.Fatalf("probed as %s user %q TLS %v", pt.spec.label, pt.spec.user, pt.spec.opts.TLSConfig != nil)
	}
	if v := collectortest.Scrape(t, c, 2*time.Second).Must(t, "stall_redis_up", "addr", "rediss://"+addr); v != 0 {
		t.Errorf("up = %v against a listener that never answers", v)
	}
	collectortest.WaitFor(t, 3*time.Second, "a connection", func() error {
		if len(first()) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	for _, b := range first() {
		if len(b) == 0 || b[0] != 0x16 { // TLS handshake record
			t.Errorf("first bytes %q: not a TLS handshake", b)
		}
		if strings.Contains(string(b), "AUTH") || strings.Contains(string(b), secret) {
			t.Errorf("clear-text AUTH or password on the wire: %q", b)
		}
	}
}

// TestProbeCacheBounded: /probe over a wide allowlist, 300 targets probed
// 8 at a time, twice, kept by a probe cache with the exporter's limits
// (main's probeLimits: 64 connections). Every target keeps its state
// (CONFIG cache, CLIENT LIST schedule and aggregates) but an open
// connection only for the 64 most recently probed, and a kept target costs
// a few kB of heap (1,000 kept targets once held 1,000 connections and
// 123 MB of heap, about 120 KB each). CloseIdle, which the cache calls for
// targets idle for 2 minutes, closes a target's connection and keeps its
// state; Close, when it drops one, closes it too.
//
// Not parallel: the heap is process-wide.
func TestProbeCacheBounded(t *testing.T) {
	const n, maxConns = 300, 64
	raiseOpenFiles(t, 4*n+256)
	list, _, _, _ := podClientList(50)
	servers := make([]*redistest.Server, n)
	for i := range servers {
		servers[i] = redistest.Start(t, redistest.Replies{"info": redistest.Bulk(fmt.Sprintf(autoInfo, 50)), "client list": redistest.Bulk(list)})
	}
	m := newTestProbe(t, testSettings(), nil, nil, `127\.0\.0\.1:[0-9]+`)
	cache := probecache.New[string, probeCollector](probecache.Limits{
		MaxTargets: 1000, Idle: 10 * time.Minute, MaxConns: maxConns, ConnIdle: 2 * time.Minute})
	cfg := collectortest.Config("redis", nil)
	var mu sync.Mutex
	kept := map[string]probeCollector{}
	probeAll := func() {
		eachEightAtATime(servers, func(srv *redistest.Server) {
			key, build, err := m.Target(srv.Addr)
			if err != nil {
				t.Error(err)
				return
			}
			c := cache.Get(key, func() probeCollector { return build(cfg).(probeCollector) })
			mu.Lock()
			kept[key] = c
			mu.Unlock()
			if res := collectortest.Scrape(t, c, 5*time.Second); res.Err != nil {
				t.Error(res.Err)
			}
		})
	}
	open := func() error {
		open := 0
		for _, srv := range servers {
			open += int(srv.Open())
		}
		if open > maxConns {
			return fmt.Errorf("%d connections open, want at most %d", open, maxConns)
		}
		return nil
	}
	heapBefore := heapAfterGC()
	probeAll()
	probeAll()
	perTarget := (int64(heapAfterGC()) - int64(heapBefore)) / n
	collectortest.WaitFor(t, 10*time.Second, "the connections beyond the 64 most recent to close", open)
	t.Logf("%d targets kept, %d bytes of heap per kept target", cache.Len(), perTarget)
	if cache.Len() != n || len(kept) != n {
		t.Errorf("%d targets kept, %d distinct collectors; want %d", cache.Len(), len(kept), n)
	}
	if perTarget > 12<<10 {
		t.Errorf("%d bytes of heap per kept target", perTarget)
	}

	for _, c := range kept {
		if !c.CloseIdle() {
			t.Fatal("CloseIdle of a target no scrape uses did not close its connection")
		}
	}
	collectortest.WaitFor(t, 10*time.Second, "every idle connection to close", func() error {
		for _, srv := range servers {
			if srv.Open() > 0 {
				return fmt.Errorf("%s has %d connections open", srv.Addr, srv.Open())
			}
		}
		return nil
	})
	c := kept[servers[0].Addr]
	if res := collectortest.Scrape(t, c, 5*time.Second); res.Err != nil || c.t.scrapes != 3 {
		t.Errorf("after CloseIdle: %v, %d scrapes counted; want a scrape that connects again and the state kept (3 scrapes)", res.Err, c.t.scrapes)
	}
	c.Close()
	collectortest.WaitFor(t, 10*time.Second, "Close to close the connection", func() error {
		if n := servers[0].Open(); n > 0 {
			return fmt.Errorf("%d connections open", n)
		}
		return nil
	})
}

// eachEightAtATime runs f for every server, at most 8 at a time, as a
// Prometheus probing many targets does, and returns when all are done.
func eachEightAtATime(servers []*redistest.Server, f func(*redistest.Server)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, srv := range servers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(srv)
		}()
	}
	wg.Wait()
}

// TestProbeDebugEndToEnd: the binary's /probe?…&debug=true for a target
// that needs a password answers the probe's own log lines, at debug level
// although the exporter logs at info, and its metrics; with a wrong
// password it says why the target is down. The password is in neither
// answer nor in the exporter's log.
func TestProbeDebugEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the end-to-end binary test")
	}
	const secret, wrong = "debug-s3cret", "debug-wr0ng"
	r := startRedis(t, "--requirepass", secret)
	other := startRedis(t, "--requirepass", secret+"-other")
	dir := t.TempDir()
	e := e2etest.StartExporter(t, e2etest.Build(t, "."), "--no-collector.redis",
		"--redis.probe.allowed-targets=redis://"+r.addr+"?password_file="+writeFile(t, dir, "right", secret+"\n"),
		"--redis.probe.allowed-targets=redis://"+other.addr+"?password_file="+writeFile(t, dir, "wrong", wrong+"\n"))
	base, logs := e.URL, e.Output
	get := func(target string) string {
		t.Helper()
		resp, err := http.Get(base + "/probe?module=redis&debug=true&target=" + target)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("debug probe of %s: %s: %s", target, resp.Status, b)
		}
		return string(b)
	}
	up := get(r.addr)
	// The answer's logs are the exporter's own format (logfmt, with
	// caller), which a user reads: checked as text, not through
	// collectortest.Logs.
	for _, want := range []string{"Logs for the probe of redis target " + r.addr + ":", "Metrics that would have been returned:",
		`stall_redis_up{addr="redis://` + r.addr + `"} 1`, `stall_scrape_collector_success{collector="redis"} 1`,
		`level=debug caller=probe.go:`, `msg="probe target allowed" module=redis target=` + r.addr, `msg="probe finished" module=redis target=` + r.addr} {
		if !strings.Contains(up, want) {
			t.Errorf("debug answer for a healthy target lacks %q:\n%s", want, up)
		}
	}
	down := get(other.addr)
	for _, want := range []string{"level=warn", `stall_redis_up{addr="redis://` + other.addr + `"} 0`, `reason="auth"} 1`} {
		if !strings.Contains(down, want) {
			t.Errorf("debug answer for a wrong password lacks %q:\n%s", want, down)
		}
	}
	for _, s := range []string{up, down, logs.String()} {
		if strings.Contains(s, secret) || strings.Contains(s, wrong) {
			t.Errorf("a password is in the output:\n%s", s)
		}
	}
}
