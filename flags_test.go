package main

import (
	"bytes"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// TestBadFlags: flag values that used to panic at the first request or be
// accepted silently stop the exporter at start with exit status 1 and a
// message naming the flag. The /probe modules are built at start whether
// or not their collector is enabled, so a bad allowlist or ACL file stops
// the start even with --no-collector.redis or --no-collector.rocketmq.
func TestBadFlags(t *testing.T) {
	bin := e2etest.Build(t, ".")
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--web.telemetry-path=metrics"}, "--web.telemetry-path=metrics must start with /"},
		{[]string{"--web.telemetry-path=/probe"}, "collides with /probe"},
		{[]string{"--web.max-requests=-3"}, "--web.max-requests=-3 must be 0 (no limit) or positive"},
		{[]string{"--web.max-probe-requests=-1"}, "--web.max-probe-requests=-1 must be 0 (no limit) or positive"},
		{[]string{"--web.max-connections=-1"}, "--web.max-connections=-1 must be 0 (no limit) or positive"},
		{[]string{"--sysctl.refresh-interval=-1m"}, "--sysctl.refresh-interval=-1m0s must be 0 (every scrape) or positive"},
		{[]string{"--collector.timeout=0s"}, "--collector.timeout=0s must be positive"},
		{[]string{"--web.timeout-offset=-1s"}, "--web.timeout-offset=-1s must be 0 or positive"},
		{[]string{"--no-collector.redis", "--redis.probe.allowed-targets-regexp=("}, "--redis.probe.allowed-targets-regexp"},
		{[]string{"--no-collector.redis", "--redis.probe.allowed-targets=redis://h:99999"}, "--redis.probe.allowed-targets"},
		{[]string{"--no-collector.rocketmq", "--rocketmq.probe.allowed-targets=10.0.0.0/99"}, "--rocketmq.probe.allowed-targets"},
		{[]string{"--no-collector.rocketmq", "--rocketmq.acl-file=/nonexistent/acl"}, "--rocketmq.acl-file"},
	} {
		cmd := exec.Command(bin, append([]string{"--web.listen-address=" + e2etest.FreeAddr(t)}, tc.flags...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s: the exporter started", tc.flags)
			continue
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%s: exit %v, want status 1", tc.flags, err)
		}
		if out := stderr.String(); !strings.Contains(out, tc.want) || strings.Contains(out, "panic") {
			t.Errorf("%s: stderr does not say %q (or panics):\n%s", tc.flags, tc.want, out)
		}
	}
}

// TestMissingSysfsWarns: a --path.sysfs that does not exist is a clear
// warning at start, not silence; the exporter still serves. And
// only our handlers are served: nothing a dependency registers on
// http.DefaultServeMux (golang.org/x/net/trace's /debug/requests).
func TestMissingSysfsWarns(t *testing.T) {
	e := e2etest.StartExporter(t, e2etest.Build(t, "."), "--path.sysfs=/nonexistent")
	url, stderr := e.URL, e.Output
	if body := e2etest.Scrape(t, url); !strings.Contains(body, "stall_") {
		t.Errorf("/metrics without the host series:\n%s", body)
	}
	// The real process's stderr, in its real log format (logfmt).
	if out := stderr.String(); !strings.Contains(out, "level=warn") || !strings.Contains(out, "path.sysfs=/nonexistent") {
		t.Errorf("no warning about --path.sysfs:\n%s", out)
	}
	for _, path := range []string{"/debug/requests", "/debug/events", "/debug/pprof/"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s, want 404", path, resp.Status)
		}
	}
}
