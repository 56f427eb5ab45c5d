package collectortest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test policy, one for every test of both modules. A test that needs
// something this machine may lack (a tool, root, a kernel feature) asks
// for it through Require, RequireTool or RequireRoot:
//
//   - under `make test`, which exports STALL_TEST_STRICT=1 and installs
//     every tool first, a missing prerequisite fails the test, saying what
//     to install or run;
//   - under a plain `go test`, it skips the test with the same message;
//   - under `go test -short` (make test-short, the quick loop), it skips
//     the test even when the prerequisite is there: the quick loop runs
//     no tool, no service and nothing as root.
//
// A test that changes the host itself (vm.dirty_* sysctls, loop devices,
// throttled writeback, cgroup controllers, a mount in the machine's mount
// namespace, a service or service manager started or stopped) also calls
// RequireDisposable: it runs only where STALL_TEST_DISPOSABLE=1 says the
// machine may be changed (.ci/run sets it), and is otherwise reported as
// not run, under `make test` too. What a test creates for itself and
// removes at cleanup — processes, files, a network namespace, an empty
// cgroup of its own that it moves only its own processes into — is not a
// change of the host.
const (
	StrictEnv     = "STALL_TEST_STRICT"
	DisposableEnv = "STALL_TEST_DISPOSABLE"
)

// NotRunPrefix starts the skip message of a host-changing test on a
// machine not declared disposable; the summary of `make test` lists
// such tests apart from the skipped ones.
const NotRunPrefix = "not run: changes the host: "

// Strict reports whether missing prerequisites fail tests (make test).
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// Disposable reports whether tests may change this machine.
func Disposable() bool { return os.Getenv(DisposableEnv) == "1" }

// Require is the policy for one prerequisite: a nil err passes; otherwise
// the test fails under make test and skips elsewhere, with what (the
// prerequisite, and how to get it) and err in the message.
func Require(t testing.TB, what string, err error) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs " + what)
	}
	if err == nil {
		return
	}
	msg := fmt.Sprintf("needs %s: %v", what, err)
	if Strict() {
		t.Fatal(msg)
	}
	t.Skip(msg + " (a failure under make test)")
}

// RequireRoot: tests that need root (network namespaces, cgroups, loop
// devices, /dev/kmsg); why says what for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	var err error
	if os.Geteuid() != 0 {
		err = fmt.Errorf("running as uid %d; run as root (make test does)", os.Geteuid())
	}
	Require(t, "root ("+why+")", err)
}

// RequireTool returns the path of a tool the test cannot run without
// (promtool, amtool, prometheus, redis-server, …), under the policy above.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		err = fmt.Errorf("%s not found; `make test-deps` installs it", name)
	}
	Require(t, name, err)
	return path
}

// RequireDisposable lets a test that changes the host run only on a machine
// declared disposable (STALL_TEST_DISPOSABLE=1, as .ci/run sets); changes
// says what it does to the host. Elsewhere the test is skipped as not run,
// and under -short it is left out like any test with a prerequisite.
func RequireDisposable(t testing.TB, changes string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: changes the host: " + changes)
	}
	if Disposable() {
		return
	}
	t.Skip(NotRunPrefix + changes + "; run with " + DisposableEnv + "=1 on a machine you may change (.ci/run does)")
}

// CheckMetrics lints a text exposition with `promtool check metrics` and
// reports every finding as a test error. A missing promtool fails the test
// under make test; elsewhere only this check is left out, and logged.
func CheckMetrics(t testing.TB, exposition string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if Strict() {
			t.Fatal("needs promtool: `make test-deps` installs it")
		}
		t.Log("promtool check metrics left out: promtool not found; `make test-deps` installs it")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
