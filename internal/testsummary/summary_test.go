package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// events is a `go test -json` run of two packages as the go command writes
// it (Time and Elapsed left out): a in which one test passes, one skips
// for a missing tool, one is not run on a host not declared disposable and
// one fails in a subtest; b whose test binary panicked in a running test;
// c that does not compile; and a line of the go command's own stderr.
var events = `{"Action":"start","Package":"x/a"}
{"Action":"run","Package":"x/a","Test":"TestOK"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"    a_test.go:3: fine\n"}
{"Action":"output","Package":"x/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"x/a","Test":"TestOK"}
{"Action":"run","Package":"x/a","Test":"TestTool"}
{"Action":"output","Package":"x/a","Test":"TestTool","Output":"=== RUN   TestTool\n"}
{"Action":"output","Package":"x/a","Test":"TestTool","Output":"    a_test.go:9: needs promtool: promtool not found\n"}
{"Action":"output","Package":"x/a","Test":"TestTool","Output":"--- SKIP: TestTool (0.00s)\n"}
{"Action":"skip","Package":"x/a","Test":"TestTool"}
{"Action":"run","Package":"x/a","Test":"TestHost"}
{"Action":"output","Package":"x/a","Test":"TestHost","Output":"=== RUN   TestHost\n"}
{"Action":"output","Package":"x/a","Test":"TestHost","Output":"    a_test.go:12: ` + collectortest.NotRunPrefix + `lowers vm.dirty_bytes; run with ` + collectortest.DisposableEnv + `=1 on a machine you may change\n"}
{"Action":"output","Package":"x/a","Test":"TestHost","Output":"--- SKIP: TestHost (0.00s)\n"}
{"Action":"skip","Package":"x/a","Test":"TestHost"}
{"Action":"run","Package":"x/a","Test":"TestFail"}
{"Action":"output","Package":"x/a","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"run","Package":"x/a","Test":"TestFail/sub"}
{"Action":"output","Package":"x/a","Test":"TestFail/sub","Output":"=== RUN   TestFail/sub\n"}
{"Action":"output","Package":"x/a","Test":"TestFail/sub","Output":"    a_test.go:20: got 1, want 2\n"}
{"Action":"output","Package":"x/a","Test":"TestFail/sub","Output":"--- FAIL: TestFail/sub (0.00s)\n"}
{"Action":"fail","Package":"x/a","Test":"TestFail/sub"}
{"Action":"output","Package":"x/a","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"x/a","Test":"TestFail"}
{"Action":"output","Package":"x/a","Output":"FAIL\n"}
{"Action":"output","Package":"x/a","Output":"FAIL\tx/a\t0.004s\n"}
{"Action":"fail","Package":"x/a"}
{"Action":"start","Package":"x/b"}
{"Action":"run","Package":"x/b","Test":"TestSlow"}
{"Action":"output","Package":"x/b","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"x/b","Test":"TestSlow","Output":"panic: test timed out after 15m0s\n"}
{"Action":"output","Package":"x/b","Output":"FAIL\tx/b\t900.1s\n"}
{"Action":"fail","Package":"x/b"}
go: downloading example.com/m v1.0.0
{"ImportPath":"x/c [x/c.test]","Action":"build-output","Output":"# x/c [x/c.test]\n"}
{"ImportPath":"x/c [x/c.test]","Action":"build-output","Output":"c/c_test.go:3:27: undefined: f\n"}
{"ImportPath":"x/c [x/c.test]","Action":"build-fail"}
{"Action":"start","Package":"x/c"}
{"Action":"output","Package":"x/c","Output":"FAIL\tx/c [build failed]\n"}
{"Action":"fail","Package":"x/c","FailedBuild":"x/c [x/c.test]"}
{"Action":"start","Package":"x/d"}
{"Action":"run","Package":"x/d","Test":"TestD"}
{"Action":"output","Package":"x/d","Test":"TestD","Output":"--- PASS: TestD (0.00s)\n"}
{"Action":"pass","Package":"x/d","Test":"TestD"}
{"Action":"output","Package":"x/d","Output":"PASS\n"}
{"Action":"output","Package":"x/d","Output":"ok  \tx/d\t0.010s\n"}
{"Action":"pass","Package":"x/d"}
`

// TestStream: what go test without -v would print, and every line kept.
func TestStream(t *testing.T) {
	var raw, out bytes.Buffer
	if err := Stream(strings.NewReader(events), &raw, &out); err != nil {
		t.Fatal(err)
	}
	if raw.String() != events {
		t.Errorf("raw copy differs from the input:\n%s", raw.String())
	}
	want := `    a_test.go:20: got 1, want 2
--- FAIL: TestFail/sub (0.00s)
--- FAIL: TestFail (0.00s)
FAIL
FAIL	x/a	0.004s
panic: test timed out after 15m0s
FAIL	x/b	900.1s
go: downloading example.com/m v1.0.0
# x/c [x/c.test]
c/c_test.go:3:27: undefined: f
FAIL	x/c [build failed]
ok  	x/d	0.010s
`
	if out.String() != want {
		t.Errorf("shown:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestReport: the lists and the closing line, over two runs (the two
// modules), the second with one test that passes.
func TestReport(t *testing.T) {
	var s Summary
	for _, run := range []string{events, `{"Action":"pass","Package":"y/e","Test":"TestE"}` + "\n" + `{"Action":"pass","Package":"y/e"}` + "\n"} {
		if err := s.Read(strings.NewReader(run)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	s.Write(&out)
	want := `
skipped (1):
  x/a TestTool: a_test.go:9: needs promtool: promtool not found

not run: they change the host; STALL_TEST_DISPOSABLE=1 runs them on a machine you may change (1):
  x/a TestHost: a_test.go:12: lowers vm.dirty_bytes

failed (4):
  x/a TestFail/sub
  x/a TestFail
  x/b: failed without a failed test: a panic, a timeout or TestMain; see its output above
  x/c: build or vet failed: x/c [x/c.test]

3 passed, 4 failed, 2 skipped
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestReportClean: a run with nothing skipped or failed prints only the
// closing line.
func TestReportClean(t *testing.T) {
	var s Summary
	if err := s.Read(strings.NewReader(`{"Action":"pass","Package":"y/e","Test":"TestE"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s.Write(&out)
	if got, want := out.String(), "\n1 passed, 0 failed, 0 skipped\n"; got != want {
		t.Errorf("report %q, want %q", got, want)
	}
}
