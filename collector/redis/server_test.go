package redis

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// testRedis is a redis-server process started for one test.
type testRedis struct {
	t    testing.TB
	port int
	addr string // 127.0.0.1:port
	args []string
	cmd  *exec.Cmd
	dir  string
	log  *e2etest.Output // what redis-server wrote
	ns   string          // network namespace the server runs in, if any
	tls  bool            // port speaks TLS: readiness is a TCP connect only
}

// redisServerPath finds redis-server: a test dependency that `make
// test-deps` installs (the missing-tool policy: collectortest.RequireTool).
func redisServerPath(t testing.TB) string { return collectortest.RequireTool(t, "redis-server") }

// freePort asks the kernel for an unused TCP port on the loopback.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis runs redis-server on a free loopback port with persistence off
// and the extra configuration directives in args ("--maxmemory", "1gb" …).
// It is stopped when the test ends.
func startRedis(t testing.TB, args ...string) *testRedis {
	t.Helper()
	r := &testRedis{t: t, port: freePort(t), args: args, dir: t.TempDir()}
	r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	r.start("127.0.0.1")
	t.Cleanup(r.stop)
	return r
}

func (r *testRedis) start(bind string) {
	r.t.Helper()
	bin := redisServerPath(r.t)
	argv := []string{"--port", strconv.Itoa(r.port), "--bind", bind, "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"}
	args := r.args
	if len(args) > 0 && !strings.HasPrefix(args[0], "--") {
		// A configuration file must be redis-server's first argument.
		argv = append([]string{args[0]}, argv...)
		args = args[1:]
	}
	argv = append(argv, args...)
	if r.ns != "" {
		r.cmd = exec.Command("ip", append([]string{"netns", "exec", r.ns, bin}, argv...)...)
	} else {
		r.cmd = exec.Command(bin, argv...)
	}
	r.log = &e2etest.Output{}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	addr := net.JoinHostPort(bind, strconv.Itoa(r.port))
	collectortest.WaitFor(r.t, 10*time.Second, "redis-server to answer on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, r.log.String())
		}
		defer c.Close()
		if r.tls {
			return nil // the TLS port answers only a handshake
		}
		_, _ = c.Write([]byte("PING\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.HasPrefix(line, "+PONG") && !strings.Contains(line, "AUTH") {
			return fmt.Errorf("PING answered %q", line)
		}
		return nil
	})
}

func (r *testRedis) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// client returns a go-redis client on the server (default user unless opts
// say otherwise), closed at the end of the test.
func (r *testRedis) client(mod ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: r.addr, Protocol: 2, DisableIdentity: true}
	for _, m := range mod {
		m(o)
	}
	c := redis.NewClient(o)
	r.t.Cleanup(func() { c.Close() })
	return c
}

// commandCalls returns commandstats calls of cmd (e.g. "client|list").
func commandCalls(t testing.TB, c *redis.Client, cmd string) uint64 {
	t.Helper()
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range replies.ParseInfo(s).Commands {
		if cs.Name == cmd {
			return cs.Calls
		}
	}
	return 0
}

// testSettings are the flag defaults (parsed from an empty command line),
// with a faster, exact big-key scan. The timeouts are the flags' (2s to
// connect, 3s per scrape): a TLS handshake under -race on a loaded 2-core
// machine took more than a second.
func testSettings() settings {
	app := kingpin.New("test", "")
	f := registerFlags(app)
	if _, err := app.Parse(nil); err != nil {
		panic(err)
	}
	s, err := f.validate()
	if err != nil {
		panic(err)
	}
	s.bigkeys.keysPerSecond = 10000
	s.bigkeys.top = 5
	s.bigkeys.samples = 0
	return s
}

// Close releases the targets' connections (the exporter never closes a
// /metrics collector; tests do).
func (c *scraper) Close() {
	for _, t := range c.targets {
		t.close()
	}
}

// newTestScraper builds the /metrics collector for addrs.
func newTestScraper(t testing.TB, s settings, cfg collector.Config, addrs ...string) *scraper {
	t.Helper()
	c, err := newScraper(cfg, s, addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clientListStats aggregates a CLIENT LIST reply read with a plain
// client (a test's own view of the server), grouped by by.
func clientListStats(list string, by replies.GroupBy) replies.ClientListStats {
	agg := replies.Aggregator{GroupBy: by, TopK: 10}
	agg.Begin(int64(len(list)))
	_, _ = agg.Write([]byte(list))
	return agg.Finish()
}

// newPipeScraper builds the /metrics collector for fake servers reached
// over net.Pipe (redistest.NewPipe), for tests that run in a
// testing/synctest bubble: target i is redis://fake-i:6379.
func newPipeScraper(t testing.TB, s settings, cfg collector.Config, servers ...*redistest.Server) *scraper {
	t.Helper()
	addrs := make([]string, len(servers))
	for i := range servers {
		addrs[i] = fmt.Sprintf("fake-%d:6379", i)
	}
	c := newTestScraper(t, s, cfg, addrs...)
	for i, tg := range c.targets {
		tg.spec.dial = servers[i].Dial
	}
	return c
}
