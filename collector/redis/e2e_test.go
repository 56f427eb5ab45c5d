package redis

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// TestExporterEndToEnd runs the real binary with two --redis.addr
// targets, one healthy and one that accepts connections and never answers:
// /metrics still answers on time with the host collectors' series, the
// silent target reports stall_redis_up 0, and the output passes
// promtool check metrics. /probe refuses targets outside the allowlist.
func TestExporterEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the end-to-end binary test")
	}
	t.Parallel()
	r := startRedis(t)
	silent := collectortest.SilentListener(t)
	bin := e2etest.Build(t, ".")
	pwFile := writeFile(t, t.TempDir(), "pw", "not-needed-but-read\n")
	// The healthy redis-server has seconds to answer (a binary under a
	// loaded CI machine); the silent one holds its collector that long.
	const redisTimeout, collectorTimeout = 3 * time.Second, 10 * time.Second
	e := e2etest.StartExporter(t, bin,
		"--redis.addr="+r.addr, "--redis.addr=redis://"+silent,
		"--redis.password-file="+pwFile, "--redis.timeout="+redisTimeout.String(), "--collector.timeout="+collectorTimeout.String(),
		"--redis.probe.allowed-targets=127.0.0.1:1")
	base, logs := e.URL, e.Output

	start := time.Now()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	out := string(body)
	// Ended by --redis.timeout, not --collector.timeout: half-way between
	// them is seconds of slack for a loaded machine either way.
	if limit := redisTimeout + (collectorTimeout-redisTimeout)/2; took > limit {
		t.Errorf("/metrics took %v with a silent Redis and --redis.timeout=%v (--collector.timeout=%v)", took, redisTimeout, collectorTimeout)
	}
	for _, want := range []string{
		`stall_redis_up{addr="redis://` + r.addr + `"} 1`,
		`stall_redis_up{addr="redis://` + silent + `"} 0`,
		`stall_scrape_collector_success{collector="vmstat"} 1`,
		`stall_vm_`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(out+logs.String(), "not-needed-but-read") {
		t.Error("the password file's content leaked into the output or the log")
	}
	collectortest.CheckMetrics(t, out)

	for target, code := range map[string]int{
		"10.9.9.9:6379":            http.StatusForbidden,
		"redis://u:p@127.0.0.1:1":  http.StatusBadRequest,
		"127.0.0.1:1":              http.StatusOK, // allowed, connection refused → up 0
		"redis://" + r.addr + "/0": http.StatusOK, // a --redis.addr target is allowed
		// The request names the address; scheme and user are configured.
		"rediss://" + r.addr:      http.StatusForbidden,
		"redis://admin@" + r.addr: http.StatusBadRequest,
		r.addr + "?skip_verify=1": http.StatusBadRequest,
		"127.0.0.1:99999":         http.StatusBadRequest, // a port out of range
		"127.0.0.1:0":             http.StatusBadRequest,
	} {
		resp, err := http.Get(base + "/probe?module=redis&target=" + target)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("/probe target %s: HTTP %d, want %d: %s", target, resp.StatusCode, code, b)
		}
		if code == http.StatusOK && !strings.Contains(string(b), "stall_redis_up{") {
			t.Errorf("/probe target %s: no stall_redis_up", target)
		}
	}
}
