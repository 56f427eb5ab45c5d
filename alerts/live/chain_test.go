package live

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The shipped chain: the exporter binary, Debian's Prometheus with deploy/prometheus/prometheus.yml
// (its 15 s scrape and evaluation intervals, the stall job pointed at the exporter) and the rules
// of alerts/*.yml, and Alertmanager with deploy/prometheus/alertmanager.yml, whose receivers are
// replaced by webhooks into the test (routes, grouping and inhibitions as shipped).

const repoRoot = "../.."

// chain is the running exporter, Prometheus and Alertmanager.
type chain struct {
	exporter string // base URLs
	prom     string
	am       string
	hook     *webhook
}

func startChain(t *testing.T, promBin, amBin, dir string) *chain {
	t.Helper()
	c := &chain{hook: newWebhook(t)}

	bin := filepath.Join(dir, "stall_exporter")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	exporterAddr := freeAddr(t)
	runProcess(t, "exporter", exec.Command(bin, "--web.listen-address="+exporterAddr))
	c.exporter = "http://" + exporterAddr

	amAddr := freeAddr(t)
	amCfg := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, amCfg, alertmanagerConfig(t, c.hook.url))
	runProcess(t, "alertmanager", exec.Command(amBin,
		"--config.file="+amCfg,
		"--storage.path="+filepath.Join(dir, "alertmanager"),
		"--web.listen-address="+amAddr,
		"--cluster.listen-address=",
		"--log.level=warn"))
	c.am = "http://" + amAddr

	rulesDir := filepath.Join(dir, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "alerts", "*.yml"))
	if len(files) == 0 {
		t.Fatal("no alerts/*.yml")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(rulesDir, filepath.Base(f)), b)
	}
	promAddr := freeAddr(t)
	promCfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promCfg, prometheusConfig(t, exporterAddr, amAddr, rulesDir))
	runProcess(t, "prometheus", exec.Command(promBin,
		"--config.file="+promCfg,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr,
		"--log.level=warn"))
	c.prom = "http://" + promAddr

	for _, u := range []string{c.am, c.prom} {
		waitFor(t, 30*time.Second, u+" ready", func() error {
			resp, err := http.Get(u + "/-/ready")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/-/ready: %s", resp.Status)
			}
			return nil
		})
	}
	return c
}

// prometheusConfig is deploy/prometheus/prometheus.yml with its stall job pointed at the
// exporter, its other jobs dropped, the rules and Alertmanager of this test. The intervals stay
// as shipped and must be the 15 s the rules assume.
func prometheusConfig(t *testing.T, exporter, am, rulesDir string) []byte {
	t.Helper()
	var c map[string]any
	readYAML(t, filepath.Join(repoRoot, "deploy/prometheus/prometheus.yml"), &c)
	g, _ := c["global"].(map[string]any)
	if g["scrape_interval"] != "15s" || g["evaluation_interval"] != "15s" {
		t.Fatalf("deploy/prometheus/prometheus.yml: scrape_interval %v, evaluation_interval %v; this test (and the rules) assume 15s",
			g["scrape_interval"], g["evaluation_interval"])
	}
	c["rule_files"] = []any{filepath.Join(rulesDir, "*.yml")}
	c["alerting"] = map[string]any{"alertmanagers": []any{map[string]any{"static_configs": []any{map[string]any{"targets": []any{am}}}}}}
	var keep []any
	for _, sc := range c["scrape_configs"].([]any) {
		job := sc.(map[string]any)
		if job["job_name"] == "stall" {
			job["static_configs"] = []any{map[string]any{"targets": []any{exporter}}}
			keep = append(keep, job)
		}
	}
	if len(keep) != 1 {
		t.Fatal("deploy/prometheus/prometheus.yml has no job stall")
	}
	c["scrape_configs"] = keep
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// alertmanagerConfig is deploy/prometheus/alertmanager.yml with every receiver replaced by a
// webhook to hook/<receiver name>.
func alertmanagerConfig(t *testing.T, hook string) []byte {
	t.Helper()
	var c map[string]any
	readYAML(t, filepath.Join(repoRoot, "deploy/prometheus/alertmanager.yml"), &c)
	var receivers []any
	for _, r := range c["receivers"].([]any) {
		name := r.(map[string]any)["name"].(string)
		receivers = append(receivers, map[string]any{
			"name":            name,
			"webhook_configs": []any{map[string]any{"url": hook + "/" + name, "send_resolved": false}},
		})
	}
	c["receivers"] = receivers
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// notification is one webhook call from Alertmanager.
type notification struct {
	at       time.Time
	receiver string
	alerts   []string // alert names, status firing
}

type webhook struct {
	url  string
	mu   sync.Mutex
	list []notification
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var msg struct {
			Alerts []struct {
				Status string            `json:"status"`
				Labels map[string]string `json:"labels"`
			} `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		n := notification{at: time.Now(), receiver: strings.TrimPrefix(r.URL.Path, "/")}
		for _, a := range msg.Alerts {
			if a.Status == "firing" {
				n.alerts = append(n.alerts, a.Labels["alertname"])
			}
		}
		w.mu.Lock()
		w.list = append(w.list, n)
		w.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// names lists the alerts notified so far, by receiver.
func (w *webhook) names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, n := range w.list {
		out = append(out, n.receiver+":"+strings.Join(n.alerts, ","))
	}
	return out
}

// first returns the first notification that carried alert, if any.
func (w *webhook) first(alert string) (notification, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.list {
		for _, a := range n.alerts {
			if a == alert {
				return n, true
			}
		}
	}
	return notification{}, false
}

// api calls Prometheus' HTTP API and decodes its data.
func (c *chain) api(path string, params url.Values, data any) error {
	resp, err := http.Get(c.prom + path + "?" + params.Encode())
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

// promSeries is one series of a range-vector query: its labels and samples (unix seconds, value).
type promSeries struct {
	Metric  map[string]string
	Samples [][2]float64
}

// series runs a range-vector query now.
func (c *chain) series(expr string) ([]promSeries, error) {
	var d struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	if err := c.api("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	var out []promSeries
	for _, r := range d.Result {
		s := promSeries{Metric: r.Metric}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			val, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", expr, err)
			}
			s.Samples = append(s.Samples, [2]float64{ts, val})
		}
		out = append(out, s)
	}
	return out, nil
}

// value runs an instant query and returns the single sample's value.
func (c *chain) value(expr string) (float64, error) {
	var d struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := c.api("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return 0, err
	}
	if len(d.Result) != 1 {
		return 0, fmt.Errorf("%s: %d series", expr, len(d.Result))
	}
	return strconv.ParseFloat(fmt.Sprint(d.Result[0].Value[1]), 64)
}

// amState returns the state Alertmanager gives alert (active, suppressed; "" if absent).
func (c *chain) amState(alert string) (string, error) {
	resp, err := http.Get(c.am + "/api/v2/alerts")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list []struct {
		Labels map[string]string `json:"labels"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", err
	}
	for _, a := range list {
		if a.Labels["alertname"] == alert {
			return a.Status.State, nil
		}
	}
	return "", nil
}

// exporterSample is what one GET /metrics of the exporter says about dirty pages.
type exporterSample struct {
	at        time.Time
	ratio     float64 // stall_vm_dirty_throttle_ratio, read from /proc/vmstat at this scrape
	throttled float64 // stall_vm_dirty_throttled_seconds_total, the sampler's count
}

func (c *chain) sample() (exporterSample, error) {
	s := exporterSample{at: time.Now()}
	resp, err := http.Get(c.exporter + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	var found int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "stall_vm_dirty_throttle_ratio":
			dst = &s.ratio
		case "stall_vm_dirty_throttled_seconds_total":
			dst = &s.throttled
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(v, 64); err != nil {
			return s, fmt.Errorf("%s: %v", name, err)
		}
		found++
	}
	if found != 2 {
		return s, fmt.Errorf("/metrics has %d of stall_vm_dirty_throttle_ratio and stall_vm_dirty_throttled_seconds_total", found)
	}
	return s, sc.Err()
}

// recorder samples the exporter every second in the background.
type recorder struct {
	mu      sync.Mutex
	samples []exporterSample
	err     error
	quit    chan struct{}
	done    chan struct{}
}

func recordExporter(t *testing.T, c *chain) *recorder {
	r := &recorder{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-r.quit:
				return
			case <-tick.C:
			}
			s, err := c.sample()
			r.mu.Lock()
			if err != nil {
				r.err = err
			} else {
				r.samples = append(r.samples, s)
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *recorder) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// stop ends the recording (once) and returns the samples.
func (r *recorder) stop() []exporterSample {
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples
}

// runProcess starts cmd, kills it when the test ends (or when the test process dies: the kernel
// sends it SIGKILL), and shows its output if the test failed.
func runProcess(t *testing.T, name string, cmd *exec.Cmd) {
	t.Helper()
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
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

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond every 200 ms until it returns nil, or fails the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %s for %s: %v", limit, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
