// Package e2etest runs the real processes that end-to-end tests put together: the exporter built
// from this repository, Prometheus, Alertmanager, redis-server, the test broker. Each process is
// killed when its test ends, or by the kernel when the test process dies, and its output is shown
// when the test failed.
package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// FreeAddr returns a 127.0.0.1 address no one listens on at the moment of the call.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return FreeAddrs(tb, 1)[0]
}

// FreeAddrs is n distinct free loopback addresses: every listener stays open
// until all are chosen, so the kernel cannot hand the same port out twice
// (two FreeAddr calls in a row can, once the first listener is closed).
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// Build compiles the command at pkg (relative to the repository's top directory, "." for the
// exporter) with `make build`'s CGO_ENABLED=0 and -ldflags "-s -w" (not its version stamps), into the test's temporary
// directory, and returns the binary's path. Every test builds with the same flags, so a fresh
// clone compiles the exporter once.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), filepath.Base(filepath.Join(RepoRoot(), pkg)))
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", bin, "./"+pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Output keeps what a process writes to its stdout and stderr (set both to
// the same Output), for a test to show or read while the process runs: it
// is safe for concurrent use. Tests that start a process of their own use
// it too.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Process is a process a test started.
type Process struct {
	Name   string
	Pid    int
	Output *Output // what it wrote to stdout and stderr so far
	cmd    *exec.Cmd
	exited chan error
}

// Stop kills the process before its test ends and waits until it has exited
// (a Prometheus must release its TSDB before another one opens it).
func (p *Process) Stop() {
	_ = p.cmd.Process.Kill()
	err := <-p.exited
	p.exited <- err
}

// Run starts cmd and kills it when the test ends (or, through Pdeathsig, when the test process
// dies); its output is shown if the test failed. Pdeathsig follows the OS thread that started the
// process: a test that lets a goroutine exit while locked to its thread (runtime.LockOSThread, as
// collector/dns's network-namespace tests do) must not share a test binary with Run.
func Run(tb testing.TB, name string, cmd *exec.Cmd) *Process {
	tb.Helper()
	p := &Process{Name: name, Output: &Output{}, cmd: cmd, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.Output, p.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	p.Pid = cmd.Process.Pid
	go func() { p.exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-p.exited
		p.exited <- err
		if tb.Failed() {
			tb.Logf("%s output:\n%s", name, p.Output.String())
		}
	})
	return p
}

// Ready waits up to limit for GET url to answer 200, failing the test at once if the process exits
// first (p may be nil for a process the test did not start).
func Ready(tb testing.TB, limit time.Duration, p *Process, url string) {
	tb.Helper()
	collectortest.WaitFor(tb, limit, url, func() error {
		if p != nil {
			select {
			case err := <-p.exited:
				p.exited <- err
				tb.Fatalf("%s exited (%v) before %s answered:\n%s", p.Name, err, url, p.Output.String())
			default:
			}
		}
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
}

// Exporter is an exporter process and its base URL (http://127.0.0.1:port).
type Exporter struct {
	*Process
	URL string
}

// StartExporter runs the exporter binary with args on a free loopback port and returns once it
// answers.
func StartExporter(tb testing.TB, bin string, args ...string) Exporter {
	tb.Helper()
	addr := FreeAddr(tb)
	p := Run(tb, "exporter", exec.Command(bin, append([]string{"--web.listen-address=" + addr}, args...)...))
	e := Exporter{Process: p, URL: "http://" + addr}
	Ready(tb, 10*time.Second, p, e.URL+"/")
	return e
}

// Scrape returns the exporter's /metrics page as text.
func Scrape(tb testing.TB, base string) string {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// StartRedis runs bin (redis-server) on a free loopback port, without
// persistence, its files in dir, with further args ("--maxmemory", "64mb"),
// and returns its host:port once it answers PING.
func StartRedis(tb testing.TB, bin, dir string, args ...string) string {
	tb.Helper()
	addr := FreeAddr(tb)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--loglevel", "warning"}, args...)...)
	Run(tb, "redis-server", cmd)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	collectortest.WaitFor(tb, 10*time.Second, "redis-server", func() error { return c.Ping(context.Background()).Err() })
	return addr
}

// StartTestBroker builds and runs cmd/rocketmq-testbroker with args (its
// -stall-every, -stall-for): a broker and a name server on free ports,
// store.log and watermark.log in dir/rocketmqlogs, whose path it returns.
func StartTestBroker(tb testing.TB, dir string, args ...string) (broker, namesrv, logDir string) {
	tb.Helper()
	bin := Build(tb, "cmd/rocketmq-testbroker")
	addrs := FreeAddrs(tb, 2)
	broker, namesrv, logDir = addrs[0], addrs[1], filepath.Join(dir, "rocketmqlogs")
	Run(tb, "rocketmq-testbroker", exec.Command(bin, append([]string{"-listen", broker, "-namesrv", namesrv, "-log-dir", logDir}, args...)...))
	for _, a := range []string{broker, namesrv} {
		collectortest.WaitFor(tb, 10*time.Second, "test broker on "+a, func() error {
			c, err := net.Dial("tcp", a)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	return broker, namesrv, logDir
}

// Prometheus is a running Prometheus server.
type Prometheus struct{ URL string }

// StartPrometheus runs bin with config (written to dir/prometheus.yml, its TSDB in dir/tsdb) and
// returns once it is ready.
func StartPrometheus(tb testing.TB, bin, dir string, config []byte) *Prometheus {
	tb.Helper()
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, config, 0o644); err != nil {
		tb.Fatal(err)
	}
	addr := FreeAddr(tb)
	proc := Run(tb, "prometheus", exec.Command(bin, "--config.file="+path,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+addr, "--log.level=warn"))
	p := &Prometheus{URL: "http://" + addr}
	Ready(tb, 30*time.Second, proc, p.URL+"/-/ready")
	return p
}

// API calls an endpoint of Prometheus' HTTP API (path such as "/api/v1/rules") and decodes the
// "data" of a successful answer into data; an error answer is returned as an error.
func (p *Prometheus) API(path string, params url.Values, data any) error {
	resp, err := http.Get(p.URL + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// Result is the answer to an instant query: its type ("vector", "matrix", "scalar", "string")
// and, raw, its result, to be decoded by the caller.
type Result struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

// Query runs an instant query now.
func (p *Prometheus) Query(expr string) (Result, error) {
	var r Result
	err := p.API("/api/v1/query", url.Values{"query": {expr}}, &r)
	return r, err
}
