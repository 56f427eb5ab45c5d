package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// bigValueSize is just under 5 MiB so that jemalloc's 5 MiB size class
// holds one reply node (value + node header + CRLF): each pending GET then
// adds 5 MiB to the client's omem.
const bigValueSize = 5<<20 - 4096

// stuckReader opens a connection that names itself, pipelines n GETs of key
// and never reads: the replies pile up in Redis' output buffer for it. A
// tiny receive buffer keeps the kernel from absorbing much of them.
func stuckReader(t *testing.T, addr, name, key string, n int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "CLIENT SETNAME %s\r\n", name)
	for range n {
		fmt.Fprintf(&b, "GET %s\r\n", key)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	return c
}

func infoField(t testing.TB, c *redis.Client, section, key string) float64 {
	t.Helper()
	s, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := replies.ParseInfo(s).Number(key)
	return v
}

// TestOutputBufferBacklog reproduces the shape of incident 7 on the
// loopback: clients that pipeline GETs of a 5 MiB value and do not read.
// One scrape in auto mode must run CLIENT LIST (INFO shows the backlog) and
// report the aggregates.
func TestOutputBufferBacklog(t *testing.T) {
	r := startRedis(t)
	admin := r.client()
	ctx := context.Background()
	if err := admin.Set(ctx, "big", strings.Repeat("x", bigValueSize), 0).Err(); err != nil {
		t.Fatal(err)
	}
	const readers, gets = 6, 4
	for range readers {
		stuckReader(t, r.addr, "reader", "big", gets)
	}
	// Wait for Redis to have queued what it cannot write: every reader has
	// at least 2 replies (10 MiB) in omem.
	collectortest.WaitFor(t, 10*time.Second, "output buffers to fill", func() error {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		st := clientListStats(list, replies.GroupByName)
		recent := infoField(t, admin, "clients", "client_recent_max_output_buffer")
		if st.PendingClients < readers || st.OutputBufferBytes < readers*2*(5<<20) || recent < 5<<20 {
			return fmt.Errorf("%d clients pending, omem %d, client_recent_max_output_buffer %v", st.PendingClients, st.OutputBufferBytes, recent)
		}
		return nil
	})
	s := testSettings()
	s.groupBy = replies.GroupByName
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	res := collectortest.Scrape(t, c, 5*time.Second)
	if res.Err != nil {
		t.Fatalf("scrape: %v", res.Err)
	}
	l := "redis://" + r.addr
	if up := res.Must(t, "stall_redis_up", "addr", l); up != 1 {
		t.Fatalf("up = %v", up)
	}
	if runs := res.Must(t, "stall_redis_client_list_runs_total"); runs != 1 {
		t.Errorf("auto mode ran CLIENT LIST %v times in the first scrape of a backlogged instance, want 1", runs)
	}
	total := res.Must(t, "stall_redis_client_output_buffer_bytes")
	maxOmem := res.Must(t, "stall_redis_client_max_output_buffer_bytes")
	pending := res.Must(t, "stall_redis_client_pending_output_clients")
	const node = 5 << 20
	if total < readers*2*node || total > readers*gets*node+readers*64<<10 {
		t.Errorf("total omem %v, want between %d and %d", total, readers*2*node, readers*gets*node)
	}
	// Each pending reply is one 5 MiB node: the largest buffer is a
	// multiple of 5 MiB (within the node headers).
	k := int(maxOmem/node + 0.5)
	if k < 2 || k > gets || abs(maxOmem-float64(k*node)) > 64<<10 {
		t.Errorf("max omem %v is not ≈ a multiple (2..%d) of 5 MiB", maxOmem, gets)
	}
	if pending < readers {
		t.Errorf("pending clients %v, want ≥ %d", pending, readers)
	}
	readerOmem := res.Must(t, "stall_redis_client_group_output_buffer_bytes", "group", "reader")
	if readerOmem != total {
		t.Errorf("group reader omem %v, want all of it (%v)", readerOmem, total)
	}
	if n := res.Must(t, "stall_redis_client_group_clients", "group", "reader"); n != readers {
		t.Errorf("group reader has %v clients, want %d", n, readers)
	}
	if first := firstGroup(res, "stall_redis_client_group_output_buffer_bytes", "group"); first != "reader" {
		t.Errorf("largest group %q, want reader", first)
	}
	if get := res.Must(t, "stall_redis_client_output_buffer_by_command_bytes", "cmd", "get"); get != total {
		t.Errorf("omem by cmd=get %v, want %v", get, total)
	}
	// MEMORY STATS clients.normal is refreshed incrementally by Redis'
	// clientsCron, so it may lag the CLIENT LIST omem a little.
	if v := res.Must(t, "stall_redis_clients_memory_bytes", "type", "normal"); v < readers*2*node {
		t.Errorf("clients memory (MEMORY STATS clients.normal) %v < %d", v, readers*2*node)
	}
	if v := res.Must(t, "stall_redis_client_recent_max_output_buffer_bytes"); v < node {
		t.Errorf("INFO client_recent_max_output_buffer %v < 5 MiB", v)
	}
	if v := res.Must(t, "stall_redis_client_output_buffer_limit_unlimited", "class", "normal"); v != 1 {
		t.Errorf("normal class is unlimited by default, metric says %v", v)
	}
	if v := res.Must(t, "stall_redis_commands_total", "cmd", "get"); v < readers {
		t.Errorf("commands_total{cmd=get} %v", v)
	}
}

// firstGroup returns the label value of the largest series of name, other
// than "other".
func firstGroup(res collectortest.Result, name, label string) string {
	best, bestV := "", -1.0
	for _, m := range res.Metrics {
		if m.Name == name && m.Labels[label] != replies.OtherGroup && m.Value > bestV {
			best, bestV = m.Labels[label], m.Value
		}
	}
	return best
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestAutoModeIdle: on an idle instance auto mode sends no CLIENT LIST
// until the Nth scrape, and then exactly one (checked in commandstats).
func TestAutoModeIdle(t *testing.T) {
	r := startRedis(t)
	admin := r.client()
	s := testSettings()
	s.clEvery = 4
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	for i := 1; i <= 3; i++ {
		res := collectortest.Scrape(t, c, 3*time.Second)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if _, ok := res.Get("stall_redis_client_list_clients"); ok {
			t.Fatalf("scrape %d exported CLIENT LIST aggregates on an idle instance", i)
		}
	}
	if n := commandCalls(t, admin, "client|list"); n != 0 {
		t.Fatalf("auto mode sent CLIENT LIST %d times in 3 idle scrapes", n)
	}
	res := collectortest.Scrape(t, c, 3*time.Second)
	if n := commandCalls(t, admin, "client|list"); n != 1 {
		t.Fatalf("CLIENT LIST calls after the 4th scrape = %d, want 1", n)
	}
	// CLIENT LIST sees the same connections INFO counted just before.
	if v, want := res.Must(t, "stall_redis_client_list_clients"), res.Must(t, "stall_redis_clients_connected"); v != want || v < 2 {
		t.Errorf("client_list_clients %v, connected_clients %v", v, want)
	}
	// never: no CLIENT LIST at all; always: one per scrape.
	s.clMode = "never"
	s.clEvery = 1
	cn := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	collectortest.Scrape(t, cn, 3*time.Second)
	collectortest.Scrape(t, cn, 3*time.Second)
	if n := commandCalls(t, admin, "client|list"); n != 1 {
		t.Errorf("never mode sent CLIENT LIST (calls now %d)", n)
	}
	s.clMode = "always"
	ca := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	collectortest.Scrape(t, ca, 3*time.Second)
	collectortest.Scrape(t, ca, 3*time.Second)
	if n := commandCalls(t, admin, "client|list"); n != 3 {
		t.Errorf("always mode: CLIENT LIST calls %d, want 3", n)
	}
}

// TestACLUser: a password from a file or an environment variable, an
// ACL user that may not run CONFIG, CLIENT or MEMORY (limits and
// aggregates are absent, the target is up), and the password never shows
// in a label or a log line.
func TestACLUser(t *testing.T) {
	const secret = "s3cret-Pa55"
	r := startRedis(t,
		"--user", "default", "off",
		"--user", "alice", "on", ">"+secret, "~*", "&*", "+@all",
		"--user", "mon", "on", ">"+secret, "~*", "+info", "+ping", "+client|setname")
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "pw", secret+"\n")
	t.Setenv("STALL_TEST_REDIS_PW", secret)
	logs := &collectortest.Logs{}
	cfg := collectortest.Config("redis", logs)
	s := testSettings()
	s.clMode = "always"

	c := newTestScraper(t, s, cfg,
		"redis://alice@"+r.addr+"?password_file="+pwFile,
		"redis://mon@localhost:"+strings.Split(r.addr, ":")[1]+"?password_env=STALL_TEST_REDIS_PW",
	)
	res := collectortest.Scrape(t, c, 5*time.Second)
	if res.Err != nil {
		t.Fatalf("scrape: %v\n%s", res.Err, logs)
	}
	alice := "redis://" + r.addr
	mon := "redis://localhost:" + strings.Split(r.addr, ":")[1]
	if v := res.Must(t, "stall_redis_up", "addr", alice); v != 1 {
		t.Fatal("alice not up")
	}
	if v := res.Must(t, "stall_redis_up", "addr", mon); v != 1 {
		t.Fatal("mon not up")
	}
	if _, ok := res.Get("stall_redis_client_output_buffer_limit_bytes", "addr", alice, "class", "normal", "limit", "hard"); !ok {
		t.Error("alice may run CONFIG GET but no limits were exported")
	}
	for _, name := range []string{"stall_redis_client_output_buffer_limit_bytes", "stall_redis_client_list_clients"} {
		if _, ok := res.Get(name, "addr", mon); ok {
			t.Errorf("%s exported for a user without permission", name)
		}
	}
	if _, ok := res.Get("stall_redis_clients_memory_bytes", "addr", mon, "type", "normal"); !ok {
		t.Error("without MEMORY STATS, INFO mem_clients_normal should be used")
	}

	// A wrong password: down, and neither password appears anywhere.
	bad := newTestScraper(t, s, cfg, "redis://alice:wrong-"+secret+"@"+r.addr)
	res = collectortest.Scrape(t, bad, 3*time.Second)
	if res.Err == nil {
		t.Error("a refused AUTH should fail the scrape")
	}
	if v := res.Must(t, "stall_redis_up", "addr", alice); v != 0 {
		t.Errorf("up with a wrong password = %v", v)
	}
	for _, m := range res.Metrics {
		for _, v := range m.Labels {
			if strings.Contains(v, secret) {
				t.Errorf("password in label of %s", m.Name)
			}
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("password in the log:\n%s", logs)
	}
	if res.Err != nil && strings.Contains(res.Err.Error(), secret) {
		t.Errorf("password in the error: %v", res.Err)
	}
}

// TestRestart: a target that goes away reports up 0 at once, and up 1
// with a reset uptime once it is back, on the same collector; the log
// warns when it goes down and says when it answers again.
func TestRestart(t *testing.T) {
	r := startRedis(t)
	logs := &collectortest.Logs{}
	c := newTestScraper(t, testSettings(), collectortest.Config("redis", logs), r.addr)
	if v := collectortest.Scrape(t, c, 3*time.Second).Must(t, "stall_redis_up"); v != 1 {
		t.Fatal("not up at start")
	}
	r.stop()
	res := collectortest.Scrape(t, c, 3*time.Second)
	if v := res.Must(t, "stall_redis_up"); v != 0 {
		t.Fatal("up while the server is stopped")
	}
	// Reported as refused at once, not after a wait: a timeout would say
	// "timeout" (a wall-clock bound here failed only on loaded machines).
	if v := res.Must(t, "stall_redis_down_reason", "reason", remote.ReasonRefused); v != 1 {
		t.Errorf("down_reason{refused} = %v while nothing listens", v)
	}
	r.start("127.0.0.1")
	res = collectortest.Scrape(t, c, 3*time.Second)
	if v := res.Must(t, "stall_redis_up"); v != 1 {
		t.Fatalf("not up after restart: %v", res.Err)
	}
	if up := res.Must(t, "stall_redis_uptime_seconds"); up > 5 {
		t.Errorf("uptime %v after a restart", up)
	}
	if logs.Count("warn", "WARN redis target refused the connection") == 0 || logs.Count("info", "INFO redis target answers again") == 0 {
		t.Errorf("no warning when it went down, or no word when it came back:\n%s", logs)
	}
}

// TestSilentTarget: a server that reads commands and never answers is
// reported down at --redis.timeout, well before the scrape deadline, and
// a healthy target in the same collector is not held up by it: its scrape
// takes no time and its series come first (each target's series are sent
// when its own scrape ends). A scrape deadline shorter than --redis.timeout
// wins, and up 0 is still delivered before it: the scrape leaves itself a
// tenth of the time, at most 250 ms, to send it (collector.ScrapeDeadline).
// In a synctest bubble, so every duration is exact.
func TestSilentTarget(t *testing.T) { synctest.Test(t, testSilentTarget) }

func testSilentTarget(t *testing.T) {
	silent := redistest.NewPipe(redistest.Replies{"info": redistest.Raw("")})
	healthy := redistest.NewPipe(redistest.Replies{"info": redistest.Bulk("redis_version:7.0.15\r\n")})
	s := testSettings()
	s.timeout = 3 * time.Second
	c := newPipeScraper(t, s, collectortest.Config("redis", nil), silent, healthy)
	silentAddr, healthyAddr := c.targets[0].spec.label, c.targets[1].spec.label
	start := time.Now()
	res := collectortest.Scrape(t, c, s.timeout+5*time.Second)
	if took := time.Since(start); took != s.timeout {
		t.Errorf("scrape took %v with --redis.timeout %v", took, s.timeout)
	}
	if v := res.Must(t, "stall_redis_up", "addr", silentAddr); v != 0 {
		t.Errorf("silent target up = %v", v)
	}
	if v := res.Must(t, "stall_redis_down_reason", "addr", silentAddr, "reason", remote.ReasonTimeout); v != 1 {
		t.Errorf("silent target down_reason{timeout} = %v", v)
	}
	if v := res.Must(t, "stall_redis_up", "addr", healthyAddr); v != 1 {
		t.Errorf("healthy target up = %v: %v", v, res.Err)
	}
	if v := res.Must(t, "stall_redis_scrape_duration_seconds", "addr", healthyAddr); v != 0 {
		t.Errorf("the healthy target's scrape took %vs: it waited", v)
	}
	if h, q := sampleIndex(res, "stall_redis_up", healthyAddr), sampleIndex(res, "stall_redis_up", silentAddr); h > q {
		t.Errorf("the healthy target's series came after the silent one's (%d > %d): it waited for it", h, q)
	}
	if res.Err == nil {
		t.Error("the collector should report the failed target")
	}

	s.timeout = 10 * time.Second
	c = newPipeScraper(t, s, collectortest.Config("redis", nil), silent)
	start = time.Now()
	res = collectortest.Scrape(t, c, 2500*time.Millisecond)
	if took := time.Since(start); took != 2250*time.Millisecond {
		t.Errorf("Update returned after %v, want at the scrape deadline less its margin (2.25s)", took)
	}
	if v := res.Must(t, "stall_redis_up"); v != 0 {
		t.Errorf("up = %v", v)
	}
}

// TestSilentListener: the same over real sockets, where the deadlines are
// the kernel's and the TLS handshake's: a listener that accepts and never
// answers, over plain TCP and over rediss:// (neither the handshake nor the
// plain-text PING gets an answer), with a scrape deadline shorter than
// --redis.timeout. Both are down with reason="timeout" and up 0 arrives
// before the deadline.
func TestSilentListener(t *testing.T) {
	t.Parallel()
	silent := collectortest.SilentListener(t)
	s := testSettings()
	s.timeout = 10 * time.Second
	s.conn.dialTimeout = 10 * time.Second
	c := newTestScraper(t, s, collectortest.Config("redis", nil), silent, "rediss://"+silent)
	const scrapeDeadline = 2500 * time.Millisecond

	res := collectortest.Scrape(t, c, scrapeDeadline)
	for _, l := range []string{"redis://" + silent, "rediss://" + silent} {
		if v := res.Must(t, "stall_redis_up", "addr", l); v != 0 {
			t.Errorf("%s: up = %v", l, v)
		}
		if v := res.Must(t, "stall_redis_down_reason", "addr", l, "reason", remote.ReasonTimeout); v != 1 {
			t.Errorf("%s: down_reason{timeout} = %v", l, v)
		}
	}
}

// TestConfigRefresh: CONFIG GET is sent once per
// --redis.config-refresh-interval, not per scrape, and a refused MEMORY
// STATS is not sent again before the next refresh (client memory comes
// from INFO meanwhile), then tried again by the scrape after the refresh. The refusal is logged once at
// warn level. In a synctest bubble, so the interval passes in no time.
func TestConfigRefresh(t *testing.T) { synctest.Test(t, testConfigRefresh) }

func testConfigRefresh(t *testing.T) {
	srv := redistest.NewPipe(redistest.Replies{
		"info":                                  redistest.Bulk("redis_version:7.0.15\r\nmem_clients_normal:20480\r\n"),
		"config get client-output-buffer-limit": redistest.Array("client-output-buffer-limit", "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"),
		"memory stats":                          redistest.Raw("-NOPERM this user has no permissions to run the 'memory|stats' command\r\n"),
	})
	logs := &collectortest.Logs{}
	s := testSettings()
	c := newPipeScraper(t, s, collectortest.Config("redis", logs), srv)
	count := func(cmd string) int {
		n := 0
		for _, c := range srv.Commands() {
			if strings.HasPrefix(c, cmd) {
				n++
			}
		}
		return n
	}
	for i, step := range []struct {
		after             time.Duration // since the last scrape
		configs, memStats int           // sent so far
		refused           float64
	}{
		{0, 1, 0, 0},           // the version is not known yet
		{time.Second, 1, 1, 1}, // MEMORY STATS refused
		{s.configRefresh - 2*time.Second, 1, 1, 1}, // not again before the refresh
		{time.Second, 2, 1, 1},                     // the refresh: CONFIG GET, and MEMORY STATS is due again
		{time.Second, 2, 2, 1},                     // the scrape after it tries MEMORY STATS
	} {
		collectortest.Advance(step.after)
		res := collectortest.Scrape(t, c, 3*time.Second)
		if res.Err != nil {
			t.Fatalf("scrape %d: %v", i+1, res.Err)
		}
		if n, m := count("config get client-output-buffer-limit"), count("memory stats"); n != step.configs || m != step.memStats {
			t.Errorf("scrape %d: %d CONFIG GET and %d MEMORY STATS sent, want %d and %d", i+1, n, m, step.configs, step.memStats)
		}
		if v, ok := res.Get("stall_redis_command_refused", "cmd", cmdMemoryStats); step.refused == 1 && v != 1 || step.refused == 0 && ok {
			t.Errorf("scrape %d: command_refused{memory|stats} %v (%v), want %v", i+1, v, ok, step.refused)
		}
		if v := res.Must(t, "stall_redis_clients_memory_bytes", "type", "normal"); v != 20480 {
			t.Errorf("scrape %d: clients memory %v, want INFO's 20480", i+1, v)
		}
		res.Must(t, "stall_redis_client_output_buffer_limit_bytes", "class", "normal", "limit", "hard")
	}
	if n := logs.Count("warn", "WARN redis target refused memory|stats"); n != 1 {
		t.Errorf("the refused MEMORY STATS was warned about %d times, want once:\n%s", n, logs)
	}
}

// sampleIndex is the position of name{addr} among the samples, in the
// order the collector sent them; -1 when absent.
func sampleIndex(res collectortest.Result, name, addr string) int {
	for i, m := range res.Metrics {
		if m.Name == name && m.Labels["addr"] == addr {
			return i
		}
	}
	return -1
}

func TestNoTargets(t *testing.T) {
	c := newTestScraper(t, testSettings(), collectortest.Config("redis", nil))
	if err := collectortest.Scrape(t, c, time.Second).Err; !errors.Is(err, collector.ErrNoData) {
		t.Fatalf("no targets: err %v, want ErrNoData", err)
	}
}

// TestConfigForbidden: CONFIG renamed away (as managed services do):
// no limit series, no error, and the refusal is cached.
func TestConfigForbidden(t *testing.T) {
	r := startRedis(t, "--maxmemory", "64mb", "--client-output-buffer-limit", "normal 10mb 5mb 30")
	c := newTestScraper(t, testSettings(), collectortest.Config("redis", nil), r.addr)
	res := collectortest.Scrape(t, c, 3*time.Second)
	if v := res.Must(t, "stall_redis_client_output_buffer_limit_bytes", "class", "normal", "limit", "hard"); v != 10<<20 {
		t.Errorf("normal hard limit %v, want 10 MiB", v)
	}
	if v := res.Must(t, "stall_redis_client_output_buffer_limit_unlimited", "class", "normal"); v != 0 {
		t.Errorf("normal unlimited = %v", v)
	}
	if v := res.Must(t, "stall_redis_memory_max_bytes"); v != 64<<20 {
		t.Errorf("maxmemory %v", v)
	}
	admin := r.client()
	collectortest.Scrape(t, c, 3*time.Second)
	if n := commandCalls(t, admin, "config|get"); n != 1 {
		t.Errorf("CONFIG GET sent %d times in two scrapes; it should be cached", n)
	}

	// rename-command is only allowed in the config file.
	conf := writeFile(t, t.TempDir(), "redis.conf", "rename-command CONFIG \"\"\n")
	r2 := startRedis(t, conf)
	c2 := newTestScraper(t, testSettings(), collectortest.Config("redis", nil), r2.addr)
	res = collectortest.Scrape(t, c2, 3*time.Second)
	if res.Err != nil {
		t.Fatalf("a renamed CONFIG must not fail the scrape: %v", res.Err)
	}
	if _, ok := res.Get("stall_redis_client_output_buffer_limit_bytes"); ok {
		t.Error("limits exported although CONFIG is renamed")
	}
	if v := res.Must(t, "stall_redis_command_refused", "cmd", "config|get"); v != 1 {
		t.Errorf("refused{cmd=config|get} = %v with CONFIG renamed away", v)
	}
	if v := res.Must(t, "stall_redis_up"); v != 1 {
		t.Error("down")
	}
}

// TestMinimalACL: the ACL user docs/redis.md recommends is enough for
// every family, big keys included, and MEMORY STATS is really used.
func TestMinimalACL(t *testing.T) {
	r := startRedis(t, "--user", "stall", "on", ">pw", "-@all", "+hello", "+ping", "+info", "+client|setname",
		"+config|get", "+memory|stats", "+client|list", "+scan", "+select", "+memory|usage", "%R~*")
	admin := r.client()
	ctx := context.Background()
	admin.Set(ctx, "k", strings.Repeat("v", 100<<10), 0) // ≥ --redis.bigkeys.min-bytes
	t.Setenv("STALL_TEST_MIN_ACL", "pw")
	s := testSettings()
	s.clMode = "always"
	s.bigkeys.enabled = true
	c := newTestScraper(t, s, collectortest.Config("redis", nil), "redis://stall@"+r.addr+"?password_env=STALL_TEST_MIN_ACL")
	if err := c.bigkeys[0].pass(ctx); err != nil {
		t.Fatalf("big-key pass: %v", err)
	}
	collectortest.Scrape(t, c, 3*time.Second) // learns the version
	res := collectortest.Scrape(t, c, 3*time.Second)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, name := range []string{"stall_redis_client_output_buffer_limit_bytes", "stall_redis_client_list_clients",
		"stall_redis_clients_memory_bytes", "stall_redis_commands_total", "stall_redis_big_key_bytes"} {
		res.Must(t, name)
	}
	if n := commandCalls(t, admin, "memory|stats"); n == 0 {
		t.Error("MEMORY STATS was not used")
	}
}

// TestConcurrentScrapesShareRun: scrapes of one target that arrive while
// a scrape of it runs share that run, so N concurrent requests cost Redis
// one INFO and one CLIENT LIST, not N. CLIENT PAUSE
// holds the first run for a second, so that all of them overlap whatever
// the machine's load; the CLIENT LIST calls are counted by Redis itself.
func TestConcurrentScrapesShareRun(t *testing.T) {
	r := startRedis(t)
	admin := r.client()
	ctx := context.Background()
	s := testSettings()
	s.clMode = "always"
	s.timeout = 8 * time.Second
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	collectortest.Scrape(t, c, 10*time.Second) // connects, caches CONFIG
	base := commandCalls(t, admin, "client|list")

	if err := admin.ClientPause(ctx, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	results := make([]collectortest.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = collectortest.Scrape(t, c, 10*time.Second)
		}()
	}
	wg.Wait()
	runs := commandCalls(t, admin, "client|list") - base
	t.Logf("%d concurrent scrapes: %d CLIENT LIST", n, runs)
	if runs != 1 {
		t.Errorf("%d concurrent scrapes ran CLIENT LIST %d times, want 1", n, runs)
	}
	first := results[0].Must(t, "stall_redis_client_list_runs_total")
	for i, res := range results {
		if res.Err != nil || res.Must(t, "stall_redis_up") != 1 {
			t.Errorf("scrape %d: %v", i, res.Err)
		}
		if v := res.Must(t, "stall_redis_client_list_runs_total"); v != first {
			t.Errorf("scrape %d saw %v runs, scrape 0 %v: not the same run", i, v, first)
		}
	}
	// A scrape after the shared run starts a run of its own.
	collectortest.Scrape(t, c, 10*time.Second)
	if got := commandCalls(t, admin, "client|list") - base; got != 2 {
		t.Errorf("CLIENT LIST calls after one more scrape: %d, want 2", got)
	}
}

// TestDownReasons: stall_redis_down_reason and the log say why a target
// is down — an authentication failure is not a network failure.
func TestDownReasons(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	r := startRedis(t, "--requirepass", "right-pw", "--unixsocket", sock,
		"--user", "noinfo", "on", ">pw", "~*", "-@all", "+ping", "+hello", "+client|setname")
	port := strings.Split(r.addr, ":")[1]
	// A TLS server whose certificate no configured CA signs.
	_, srvCert, srvKey, _, _ := testPKI(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	loading := redistest.Start(t, redistest.Replies{"info": redistest.Raw("-LOADING Redis is loading the dataset in memory\r\n")})
	http := redistest.Start(t, redistest.Replies{"info": redistest.Raw("HTTP/1.1 400 Bad Request\r\n\r\n")})
	// Servers (proxies, old versions) that answer AUTH with an error that
	// is neither WRONGPASS nor a known text: still an authentication
	// failure, not "INFO answered with an error".
	info := redistest.Bulk("redis_version:7.0.15\r\n")
	authErr := redistest.Start(t, redistest.Replies{"info": info, "auth": redistest.Raw("-ERR AUTH is not supported by this proxy\r\n")})
	authNoPerm := redistest.Start(t, redistest.Replies{"info": info,
		"auth": redistest.Raw("-NOPERM User monitor has no permissions to run the 'auth' command\r\n")})
	t.Setenv("STALL_TEST_WRONG_PW", "wrong-pw")
	t.Setenv("STALL_TEST_NOINFO_PW", "pw")
	targets := map[string]string{
		// rediss:// to a plain-text Redis: it takes the ClientHello for an
		// inline command and waits for its end forever.
		"rediss://localhost:" + port:                                       remote.ReasonTLS,
		"redis://" + authErr.Addr + "?password_env=STALL_TEST_WRONG_PW":    reasonAuth,
		"redis://" + authNoPerm.Addr + "?password_env=STALL_TEST_WRONG_PW": reasonAuth,
		// A password file the exporter cannot read: a local error, the
		// server is not to blame.
		"redis://" + redistest.Start(t, redistest.Replies{"info": info}).Addr + "?password_file=" + filepath.Join(t.TempDir(), "missing"): reasonPwFile,
		"redis://127.0.0.1:" + port + "?password_env=STALL_TEST_WRONG_PW":                                                                 reasonAuth,
		"redis://localhost:" + port:                                    reasonAuth, // no password sent
		"unix://noinfo@" + sock + "?password_env=STALL_TEST_NOINFO_PW": remote.ReasonPermission,
		"redis://127.0.0.1:" + strconv.Itoa(freePort(t)):               remote.ReasonRefused,
		"unix://" + filepath.Join(t.TempDir(), "no.sock"):              remote.ReasonRefused,
		"rediss://" + tl.Addr().String():                               remote.ReasonTLS,
		"redis://" + loading.Addr:                                      reasonLoading,
		"redis://" + http.Addr:                                         remote.ReasonProtocol,
		"redis://no-such-host.invalid:6379":                            remote.ReasonDNS,
	}
	var addrs []string
	for a := range targets {
		addrs = append(addrs, a)
	}
	logs := &collectortest.Logs{}
	s := testSettings()
	// Real servers answer (or refuse) well within the timeout even under
	// -race on a loaded machine. A silent server's timeout is
	// TestSilentTarget's and TestSilentListener's.
	s.timeout = 3 * time.Second
	c := newTestScraper(t, s, collectortest.Config("redis", logs), addrs...)
	res := collectortest.Scrape(t, c, s.timeout+3*time.Second)
	for _, t0 := range c.targets {
		want := targets[t0.spec.label]
		if want == "" { // labels drop the user and query
			for a, w := range targets {
				if spec, _ := parseTarget(a, s.conn); spec != nil && spec.label == t0.spec.label {
					want = w
				}
			}
		}
		l := t0.spec.label
		if v := res.Must(t, "stall_redis_up", "addr", l); v != 0 {
			t.Errorf("%s: up %v", l, v)
			continue
		}
		var got []string
		for _, m := range res.Metrics {
			if m.Name == "stall_redis_down_reason" && m.Labels["addr"] == l {
				got = append(got, m.Labels["reason"])
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: reasons %v, want %s (err in the log:\n%s)", l, got, want, logs)
		}
		// The warning says the same in words.
		if logs.Count("warn", "addr="+l+" ", downMessages[want]) == 0 {
			t.Errorf("%s: no warning saying %q:\n%s", l, downMessages[want], logs)
		}
	}
	if logs.Count("warn", "refused authentication", "reason=auth") == 0 {
		t.Errorf("no authentication failure in the log:\n%s", logs)
	}
	if out := logs.String(); strings.Contains(out, "right-pw") || strings.Contains(out, "wrong-pw") {
		t.Errorf("a password in the log:\n%s", out)
	}
}

// TestRefusedCommands: an ACL user that may run INFO but not CLIENT LIST,
// CONFIG GET or MEMORY STATS leaves the target up, and every refusal is
// visible: stall_redis_command_refused{cmd} 1 and one warning per kind
// (repeats at debug level). Granting the commands brings the families back
// and the series to 0 (before, nothing was logged at the default
// level, and incident 7's whole signal disappeared without a word).
func TestRefusedCommands(t *testing.T) {
	r := startRedis(t, "--user", "infoonly", "on", ">pw", "-@all", "+hello", "+auth", "+ping", "+info", "+client|setname")
	t.Setenv("STALL_TEST_INFOONLY", "pw")
	logs := &collectortest.Logs{}
	s := testSettings()
	s.clMode = "always"
	s.configRefresh = time.Nanosecond // retry CONFIG GET and MEMORY STATS on every scrape
	c := newTestScraper(t, s, collectortest.Config("redis", logs), "redis://infoonly@"+r.addr+"?password_env=STALL_TEST_INFOONLY")
	var res collectortest.Result
	for range 3 {
		res = collectortest.Scrape(t, c, 3*time.Second)
	}
	if v := res.Must(t, "stall_redis_up"); v != 1 || res.Err != nil {
		t.Fatalf("up %v, %v", v, res.Err)
	}
	commands := []string{"client|list", "config|get", "memory|stats"}
	for _, cmd := range commands {
		if v := res.Must(t, "stall_redis_command_refused", "cmd", cmd); v != 1 {
			t.Errorf("refused{cmd=%s} = %v, want 1", cmd, v)
		}
		if n := logs.Count("warn", "cmd="+cmd); n != 1 {
			t.Errorf("%d warnings for a refused %s in 3 scrapes, want 1:\n%s", n, cmd, logs)
		}
	}
	for _, name := range []string{"stall_redis_client_list_clients", "stall_redis_client_output_buffer_limit_bytes"} {
		if _, ok := res.Get(name); ok {
			t.Errorf("%s exported although refused", name)
		}
	}

	if err := r.client().Do(t.Context(), "ACL", "SETUSER", "infoonly", "+client|list", "+config|get", "+memory|stats").Err(); err != nil {
		t.Fatal(err)
	}
	collectortest.Scrape(t, c, 3*time.Second)
	res = collectortest.Scrape(t, c, 3*time.Second)
	for _, cmd := range commands {
		if v := res.Must(t, "stall_redis_command_refused", "cmd", cmd); v != 0 {
			t.Errorf("refused{cmd=%s} = %v after the grant, want 0", cmd, v)
		}
	}
	for _, name := range []string{"stall_redis_client_list_clients", "stall_redis_client_output_buffer_limit_bytes"} {
		res.Must(t, name)
	}
}

// TestManyDatabases: MEMORY STATS grows by one db.N entry per non-empty
// database (387 bytes as the reply limit counts them, on 7.0), so a server
// with a few thousand of them answers more than the 1 MiB reply limit.
// With 1,000 the reply fits and is used; with 4,000 the target stays up
// on every scrape (before, MEMORY STATS shared INFO's pipeline
// and downed it with reason="reply_too_large"), the client memory comes
// from INFO (command_refused{cmd="memory|stats"} 1), the oversized reply
// is counted and logged once, and MEMORY STATS is not sent again before
// the next config refresh.
func TestManyDatabases(t *testing.T) {
	t.Parallel()
	r := startRedis(t, "--databases", "4000")
	admin := r.client()
	fill := func(from, to int) {
		t.Helper()
		c := r.client(func(o *redis.Options) { o.PoolSize = 1 }) // SELECT sticks to the connection
		pipe := c.Pipeline()
		for db := from; db < to; db++ {
			pipe.Do(t.Context(), "SELECT", db)
			pipe.Set(t.Context(), "k", "v", 0)
		}
		if _, err := pipe.Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	scrape := func(c collector.Collector, logs *collectortest.Logs, dbs, scrapes int) collectortest.Result {
		t.Helper()
		var res collectortest.Result
		for i := range scrapes {
			res = collectortest.Scrape(t, c, 5*time.Second)
			if v := res.Must(t, "stall_redis_up"); v != 1 || res.Err != nil {
				t.Fatalf("%d databases, scrape %d: up %v, %v\n%s", dbs, i+1, v, res.Err, logs)
			}
		}
		// Present either way; command_refused says which source it is
		// (idle clients are 0 bytes in both on 7.0).
		res.Must(t, "stall_redis_clients_memory_bytes", "type", "normal")
		return res
	}

	fill(0, 1000)
	logs := &collectortest.Logs{}
	c := newTestScraper(t, testSettings(), collectortest.Config("redis", logs), r.addr)
	calls := commandCalls(t, admin, "memory|stats")
	res := scrape(c, logs, 1000, 2) // the first scrape sends no MEMORY STATS
	if n := commandCalls(t, admin, "memory|stats") - calls; n != 1 {
		t.Errorf("1,000 databases: %d MEMORY STATS in 2 scrapes, want 1", n)
	}
	if v := res.Must(t, "stall_redis_command_refused", "cmd", "memory|stats"); v != 0 {
		t.Errorf("1,000 databases: command_refused{memory|stats} %v, want 0 (MEMORY STATS used)", v)
	}
	if v := res.Must(t, "stall_redis_oversized_replies_total"); v != 0 {
		t.Errorf("1,000 databases: %v oversized replies", v)
	}

	fill(1000, 4000)
	logs = &collectortest.Logs{}
	c = newTestScraper(t, testSettings(), collectortest.Config("redis", logs), r.addr)
	calls = commandCalls(t, admin, "memory|stats")
	res = scrape(c, logs, 4000, 4)
	if n := commandCalls(t, admin, "memory|stats") - calls; n != 1 {
		t.Errorf("4,000 databases: %d MEMORY STATS in 4 scrapes, want 1 (not again before the config refresh)", n)
	}
	if v := res.Must(t, "stall_redis_command_refused", "cmd", "memory|stats"); v != 1 {
		t.Errorf("4,000 databases: command_refused{memory|stats} %v, want 1 (client memory from INFO)", v)
	}
	if v := res.Must(t, "stall_redis_oversized_replies_total"); v != 1 {
		t.Errorf("4,000 databases: %v oversized replies, want 1", v)
	}
	if n := logs.Count("warn", "memory|stats reply is over the 1 MiB reply limit"); n != 1 {
		t.Errorf("4,000 databases: the oversized MEMORY STATS logged %d times, want once:\n%s", n, logs)
	}
}

// TestStartupLineSaysWhatIsWatched: building the collector logs its
// targets by their addr labels (no user, no credential source), or that
// there is none, at info level.
func TestStartupLineSaysWhatIsWatched(t *testing.T) {
	t.Setenv("STALL_TEST_STARTUP_PW", "startup-s3cret")
	for _, tc := range []struct {
		addrs []string
		want  string
	}{
		{nil, "INFO redis: no targets (--redis.addr); the collector exports no Redis series, /probe is unaffected"},
		{[]string{"redis://mon@cache-1:6380?password_env=STALL_TEST_STARTUP_PW", "unix:///run/redis.sock"},
			"INFO redis: watching targets=redis://cache-1:6380,unix:///run/redis.sock"},
	} {
		logs := &collectortest.Logs{}
		if _, err := newScraper(collectortest.Config("redis", logs), testSettings(), tc.addrs); err != nil {
			t.Fatal(err)
		}
		if got := logs.Take(); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%q: logged %q, want the one line %q", tc.addrs, got, tc.want)
		}
	}
}
