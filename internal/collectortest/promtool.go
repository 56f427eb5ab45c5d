package collectortest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// lookTool finds a test tool (promtool, amtool, prometheus, redis-server)
// on PATH. In CI (CI set, as `make test` and the CI job run) a missing one
// fails the test, since scripts/install-test-deps.sh installs every one;
// elsewhere ok is false and a log line says what to install.
func lookTool(t testing.TB, name string) (path string, ok bool) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path, true
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found; `make test-deps` installs it", name)
	}
	t.Logf("%s not found; `make test-deps` installs it", name)
	return "", false
}

// RequireTool returns the path of a tool the test cannot run without;
// missing, it fails the test in CI and skips it elsewhere.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	path, ok := lookTool(t, name)
	if !ok {
		t.SkipNow()
	}
	return path
}

// CheckMetrics lints a text exposition with `promtool check metrics` and
// reports every finding as a test error. A missing promtool fails the test
// in CI; elsewhere only this check is skipped.
func CheckMetrics(t testing.TB, exposition string) {
	t.Helper()
	promtool, ok := lookTool(t, "promtool")
	if !ok {
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
