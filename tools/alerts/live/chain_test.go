package live

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// The shipped chain: the exporter binary (with the test's flags), Debian's Prometheus with deploy/prometheus/prometheus.yml
// (its 15 s scrape and evaluation intervals, the stall job pointed at the exporter) and the rules
// of alerts/*.yml, and Alertmanager with deploy/prometheus/alertmanager.yml, whose receivers are
// replaced by webhooks into the test (routes, grouping and inhibitions as shipped).

const repoRoot = "../../.."

// chain is the running exporter, Prometheus and Alertmanager.
type chain struct {
	exporter string // base URLs
	prom     *e2etest.Prometheus
	am       string
	hook     *webhook
}

func startChain(t *testing.T, promBin, amBin, dir string, exporterArgs ...string) *chain {
	t.Helper()
	c := &chain{hook: newWebhook(t)}

	c.exporter = e2etest.StartExporter(t, e2etest.Build(t, "."), exporterArgs...).URL
	exporterAddr := strings.TrimPrefix(c.exporter, "http://")

	amAddr := e2etest.FreeAddr(t)
	amCfg := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, amCfg, alertmanagerConfig(t, c.hook.url))
	am := e2etest.Run(t, "alertmanager", exec.Command(amBin,
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
	c.prom = e2etest.StartPrometheus(t, promBin, dir, prometheusConfig(t, exporterAddr, amAddr, rulesDir))
	e2etest.Ready(t, 30*time.Second, am, c.am+"/-/ready")
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
	if err := c.prom.API("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	var out []promSeries
	for _, r := range d.Result {
		s := promSeries{Metric: r.Metric}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			val, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", expr, err)
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
	if err := c.prom.API("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
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
			return s, fmt.Errorf("%s: %w", name, err)
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
