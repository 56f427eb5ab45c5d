package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// requireTool returns the path of a test tool; in CI its absence fails.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found; `make test-deps` installs it", name)
		}
		t.Skipf("%s not found; run `make test-deps`", name)
	}
	return path
}

// TestDeployConfigs checks the shipped Prometheus and Alertmanager
// configurations with the real promtool and amtool.
func TestDeployConfigs(t *testing.T) {
	promtool := requireTool(t, "promtool")
	out, err := exec.Command(promtool, "check", "config", "--syntax-only", "deploy/prometheus/prometheus.yml").CombinedOutput()
	if err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
	amtool := requireTool(t, "amtool")
	out, err = exec.Command(amtool, "check-config", "deploy/prometheus/alertmanager.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("amtool check-config: %v\n%s", err, out)
	}
}

// TestDeploySystemdUnits checks every unit in deploy/systemd with the real
// systemd-analyze verify: unknown keys, bad values and sections fail. The
// binaries they start are not installed here, so only that complaint is
// accepted.
func TestDeploySystemdUnits(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze")
	units, err := filepath.Glob("deploy/systemd/*.service")
	if err != nil || len(units) < 3 {
		t.Fatalf("want the exporter's, the name server's and the broker's units, found %v (%v)", units, err)
	}
	for _, u := range units {
		out, _ := exec.Command(analyze, "verify", "--man=no", u).CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.Contains(line, "is not executable: No such file or directory") {
				t.Errorf("%s: %s", u, line)
			}
		}
	}
}
