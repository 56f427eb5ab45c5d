// Package e2etest runs the real processes that end-to-end tests put together: the exporter built
// from this repository, Prometheus, Alertmanager, redis-server, the test broker. Each process is
// killed when its test ends, or by the kernel when the test process dies, and its output is shown
// when the test failed.
package e2etest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// FreeAddr returns a 127.0.0.1 address no one listens on at the moment of the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Build compiles the command at pkg (relative to the repository's top directory, "." for the
// exporter) with CGO_ENABLED=0 into the test's temporary directory and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(filepath.Join(RepoRoot(), pkg)))
	cmd := exec.Command("go", "build", "-o", bin, "./"+pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Run starts cmd and stops it when the test ends.
func Run(t testing.TB, name string, cmd *exec.Cmd) {
	t.Helper()
	logs := &Output{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, logs.String())
		}
	})
}

// Ready waits up to limit for GET url to answer 200.
func Ready(t testing.TB, limit time.Duration, url string) {
	t.Helper()
	collectortest.WaitFor(t, limit, url, func() error {
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

// StartExporter runs the exporter binary with args on a free port and returns its base URL once
// it answers.
func StartExporter(t testing.TB, bin string, args ...string) string {
	t.Helper()
	addr := FreeAddr(t)
	Run(t, "exporter", exec.Command(bin, append([]string{"--web.listen-address=" + addr}, args...)...))
	u := "http://" + addr
	Ready(t, 10*time.Second, u+"/")
	return u
}

// Scrape returns the exporter's /metrics page as text.
func Scrape(t testing.TB, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// Prometheus is a running Prometheus server.
type Prometheus struct{ URL string }

// StartPrometheus runs bin with config (written to dir/prometheus.yml, its TSDB in dir/tsdb) and
// returns once it is ready.
func StartPrometheus(t testing.TB, bin, dir string, config []byte) *Prometheus {
	t.Helper()
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, config, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	Run(t, "prometheus", exec.Command(bin, "--config.file="+path,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+addr, "--log.level=warn"))
	p := &Prometheus{URL: "http://" + addr}
	Ready(t, 30*time.Second, p.URL+"/-/ready")
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
		return fmt.Errorf("%s: %v: %s", path, err, body)
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

// Output collects a process's output; the process writes while the test may read.
type Output struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
