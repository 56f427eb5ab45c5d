package collectortest

import (
	"errors"
	"flag"
	"testing"
)

// policyT records how the policy ended a test: Fatal or Skip stop it, as
// on a real T, by unwinding to outcome.
type policyT struct {
	testing.TB
	ended, msg string
}

type stopped struct{}

func (p *policyT) Helper()           {}
func (p *policyT) Fatal(args ...any) { p.end("fatal", args...) }
func (p *policyT) Skip(args ...any)  { p.end("skip", args...) }
func (p *policyT) end(how string, args ...any) {
	p.ended = how
	for _, a := range args {
		p.msg += a.(string)
	}
	panic(stopped{})
}

// outcome runs one policy call: "ran" when it let the test go on, else
// "fatal" or "skip" and the message.
func outcome(t *testing.T, call func(testing.TB)) (string, string) {
	p := &policyT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != (stopped{}) {
				panic(r)
			}
		}()
		call(p)
		p.ended = "ran"
	}()
	return p.ended, p.msg
}

// setShort sets -test.short for the rest of the test.
func setShort(t *testing.T, v bool) {
	old := testing.Short()
	if err := flag.Set("test.short", map[bool]string{true: "true", false: "false"}[v]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("test.short", map[bool]string{true: "true", false: "false"}[old]) })
}

// TestPolicy: what each helper does with a prerequisite present or missing,
// under make test (strict), a plain go test, -short, and on a machine
// declared disposable or not.
func TestPolicy(t *testing.T) {
	missing := errors.New("not installed")
	for _, tc := range []struct {
		strict, disposable, short bool
		call                      func(testing.TB)
		want, msg                 string
	}{
		{strict: true, call: func(tb testing.TB) { Require(tb, "x", nil) }, want: "ran"},
		{strict: true, call: func(tb testing.TB) { Require(tb, "x", missing) }, want: "fatal", msg: "needs x: not installed"},
		{call: func(tb testing.TB) { Require(tb, "x", missing) }, want: "skip", msg: "needs x: not installed (a failure under make test)"},
		{call: func(tb testing.TB) { Require(tb, "x", nil) }, want: "ran"},
		{strict: true, short: true, call: func(tb testing.TB) { Require(tb, "x", nil) }, want: "skip", msg: "-short: needs x"},
		{strict: true, call: func(tb testing.TB) { RequireTool(tb, "stall-no-such-tool") }, want: "fatal",
			msg: "needs stall-no-such-tool: stall-no-such-tool not found; `make test-deps` installs it"},
		{strict: true, call: func(tb testing.TB) { RequireTool(tb, "sh") }, want: "ran"},
		{strict: true, call: func(tb testing.TB) { RequireDisposable(tb, "lowers vm.dirty_bytes") }, want: "skip",
			msg: NotRunPrefix + "lowers vm.dirty_bytes; run with STALL_TEST_DISPOSABLE=1 on a machine you may change (.ci/run does)"},
		{strict: true, disposable: true, call: func(tb testing.TB) { RequireDisposable(tb, "lowers vm.dirty_bytes") }, want: "ran"},
		{disposable: true, short: true, call: func(tb testing.TB) { RequireDisposable(tb, "lowers vm.dirty_bytes") }, want: "skip",
			msg: "-short: changes the host: lowers vm.dirty_bytes"},
	} {
		t.Setenv(StrictEnv, map[bool]string{true: "1", false: ""}[tc.strict])
		t.Setenv(DisposableEnv, map[bool]string{true: "1", false: ""}[tc.disposable])
		setShort(t, tc.short)
		got, msg := outcome(t, tc.call)
		if got != tc.want || msg != tc.msg {
			t.Errorf("strict=%v disposable=%v short=%v: %s %q, want %s %q", tc.strict, tc.disposable, tc.short, got, msg, tc.want, tc.msg)
		}
	}
}
