package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// testDepsRun is one run of scripts/install-test-deps.sh with apt-get,
// systemctl and service replaced by stubs that log their calls, and a PATH
// on which every tool the script looks for is missing except those in have.
type testDepsRun struct {
	err    error
	out    string
	calls  []string // "apt-get install …", "systemctl stop …", one per call, in order
	policy string   // what POLICY_RC_D holds after the run; "" when it is gone
}

// install is what the stub apt-get install does: "exit 0", "exit 100" (a
// failed install), "kill -TERM $PPID" (the script interrupted during it).
func runTestDeps(t *testing.T, policy, install string, have ...string) testDepsRun {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"chmod", "grep", "rm"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "calls")
	// The script installs only as root: the stub id says so.
	write("id", "#!/bin/sh\necho 0\n")
	// At install time the stub asks the policy what a package's
	// post-install start of redis-server would get (101: forbidden).
	write("apt-get", `#!/bin/sh
echo "apt-get $*" >>`+log+`
if [ "$1" = install ] || [ "$3" = install ] || [ "$4" = install ]; then
  if [ -x "$POLICY_RC_D" ]; then "$POLICY_RC_D" redis-server start; echo "policy-rc.d redis-server start: $?" >>`+log+`; fi
  `+install+`
fi
`)
	for _, svc := range []string{"systemctl", "service", "invoke-rc.d", "deb-systemd-invoke"} {
		write(svc, "#!/bin/sh\necho \""+svc+" $*\" >>"+log+"\n")
	}
	for _, tool := range have {
		write(tool, "#!/bin/sh\n")
	}
	policyPath := filepath.Join(dir, "policy-rc.d")
	if policy != "" {
		if err := os.WriteFile(policyPath, []byte(policy), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("/bin/bash", "scripts/install-test-deps.sh")
	cmd.Env = []string{"PATH=" + bin, "POLICY_RC_D=" + policyPath}
	out, err := cmd.CombinedOutput()
	r := testDepsRun{err: err, out: string(out)}
	if b, err := os.ReadFile(log); err == nil {
		r.calls = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	if b, err := os.ReadFile(policyPath); err == nil {
		r.policy = string(b)
	}
	return r
}

// testDepsPackages is every package the script may install, from its
// need+=(…) lines.
func testDepsPackages(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("scripts/install-test-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, m := range regexp.MustCompile(`need\+=\(([a-z0-9.+-]+)\)`).FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(pkgs, m[1]) {
			pkgs = append(pkgs, m[1])
		}
	}
	slices.Sort(pkgs)
	return pkgs
}

// TestInstallTestDepsLeavesServicesAlone: the installer of `make test`
// runs on users' machines as root, so it must never stop, start or
// restart a service (it used to stop redis-server, prometheus,
// prometheus-alertmanager and unbound whether or not it installed them),
// and the services of what it installs must not start: a policy-rc.d
// answering 101 is there during apt-get install only, removed after, even
// when the install fails, and an owner's own policy-rc.d is left as it is.
func TestInstallTestDepsLeavesServicesAlone(t *testing.T) {
	all := testDepsPackages(t)
	if len(all) < 13 {
		t.Fatalf("packages found in the script: %v, want the 13 it installs", all)
	}
	installed := func(r testDepsRun) []string {
		for _, c := range r.calls {
			if rest, ok := strings.CutPrefix(c, "apt-get install "); ok {
				var pkgs []string
				for _, f := range strings.Fields(rest) {
					if !strings.HasPrefix(f, "-") {
						pkgs = append(pkgs, f)
					}
				}
				slices.Sort(pkgs)
				return pkgs
			}
		}
		return nil
	}
	noServiceCalls := func(t *testing.T, r testDepsRun) {
		t.Helper()
		for _, c := range r.calls {
			if !strings.HasPrefix(c, "apt-get ") && !strings.HasPrefix(c, "policy-rc.d ") {
				t.Errorf("called %q", c)
			}
		}
	}

	t.Run("nothing missing", func(t *testing.T) {
		r := runTestDeps(t, "", "exit 0", "redis-server", "promtool", "prometheus", "redis-benchmark", "amtool", "ip",
			"getent", "systemd-analyze", "unbound", "dnsperf", "curl", "buildah", "rpm", "setsid", "unshare", "setpriv")
		if r.err != nil || len(r.calls) != 0 || r.policy != "" {
			t.Errorf("err %v, calls %q, policy-rc.d %q; want none\n%s", r.err, r.calls, r.policy, r.out)
		}
	})
	t.Run("everything missing", func(t *testing.T) {
		r := runTestDeps(t, "", "exit 0")
		if r.err != nil {
			t.Fatalf("%v\n%s", r.err, r.out)
		}
		if got := installed(r); !slices.Equal(got, all) {
			t.Errorf("installed %v, want %v", got, all)
		}
		if !slices.Contains(r.calls, "policy-rc.d redis-server start: 101") {
			t.Errorf("during the install a service start was not forbidden: %q", r.calls)
		}
		if r.policy != "" {
			t.Errorf("policy-rc.d left behind:\n%s", r.policy)
		}
		noServiceCalls(t, r)
	})
	// The case: a Redis host lacking only dnsperf.
	t.Run("only dnsperf missing", func(t *testing.T) {
		r := runTestDeps(t, "", "exit 0", "redis-server", "promtool", "prometheus", "redis-benchmark", "amtool", "ip",
			"getent", "systemd-analyze", "unbound", "curl", "buildah", "rpm", "setsid", "unshare", "setpriv")
		if r.err != nil {
			t.Fatalf("%v\n%s", r.err, r.out)
		}
		if got := installed(r); !slices.Equal(got, []string{"dnsperf"}) {
			t.Errorf("installed %v, want [dnsperf]", got)
		}
		noServiceCalls(t, r)
	})
	t.Run("install fails", func(t *testing.T) {
		r := runTestDeps(t, "", "exit 100")
		if r.err == nil {
			t.Errorf("a failed apt-get install passed:\n%s", r.out)
		}
		if r.policy != "" {
			t.Errorf("policy-rc.d left behind after a failed install:\n%s", r.policy)
		}
		noServiceCalls(t, r)
	})
	t.Run("interrupted", func(t *testing.T) {
		r := runTestDeps(t, "", "kill -TERM $PPID")
		if r.err == nil {
			t.Errorf("an interrupted install passed:\n%s", r.out)
		}
		if r.policy != "" {
			t.Errorf("policy-rc.d left behind after an interrupt:\n%s", r.policy)
		}
		noServiceCalls(t, r)
	})
	t.Run("the owner's policy-rc.d", func(t *testing.T) {
		const owners = "#!/bin/sh\nexit 0\n"
		r := runTestDeps(t, owners, "exit 0")
		if r.err != nil {
			t.Fatalf("%v\n%s", r.err, r.out)
		}
		if r.policy != owners {
			t.Errorf("policy-rc.d changed to:\n%s", r.policy)
		}
		if !slices.Contains(r.calls, "policy-rc.d redis-server start: 0") {
			t.Errorf("the owner's policy was not the one asked: %q", r.calls)
		}
		noServiceCalls(t, r)
	})
}

// TestReadmeListsTestDeps: the README names every package make test may
// install, in the paragraph beside the test command.
func TestReadmeListsTestDeps(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, p := range testDepsPackages(t) {
		if !strings.Contains(readme, "`"+p+"`") {
			t.Errorf("README.md does not name the package `%s` that scripts/install-test-deps.sh installs", p)
		}
	}
}
