package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// event is one line of `go test -json` (cmd/test2json's format). Build
// failures come as build-output and build-fail events that carry
// ImportPath instead of Package, then a package fail with FailedBuild.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

// testKey names one test or subtest of one package.
type testKey struct{ pkg, test string }

// Stream renders `go test -json` events from r as go test prints without
// -v: the output of failed tests (and of tests still running when their
// package failed: a panic, a timeout), build errors, and the package
// lines (ok, FAIL). Every line read is also copied to raw, for the report; a
// line that is not an event (a go command's own message on stderr) is
// copied and printed as it is.
func Stream(r io.Reader, raw, out io.Writer) error {
	pending := map[testKey][]string{} // output of tests that have not ended
	// cutShort shows the output of pkg's tests that never ended: its test
	// binary failed during them (a panic, a timeout).
	cutShort := func(pkg string) {
		var cut []testKey
		for p := range pending {
			if p.pkg == pkg {
				cut = append(cut, p)
			}
		}
		sort.Slice(cut, func(i, j int) bool { return cut[i].test < cut[j].test })
		for _, p := range cut {
			fmt.Fprint(out, strings.Join(pending[p], ""))
			delete(pending, p)
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := fmt.Fprintf(raw, "%s\n", line); err != nil {
			return err
		}
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := testKey{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Test == "" && e.Action == "output":
			if strings.HasPrefix(e.Output, "FAIL") {
				cutShort(e.Package)
			}
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
				fmt.Fprint(out, e.Output)
			}
		case e.Test == "" && e.Action == "fail":
			cutShort(e.Package)
		case e.Action == "output":
			if !strings.HasPrefix(strings.TrimLeft(e.Output, " "), "=== ") {
				pending[k] = append(pending[k], e.Output)
			}
		case e.Action == "fail":
			fmt.Fprint(out, strings.Join(pending[k], ""))
			delete(pending, k)
		case e.Action == "pass" || e.Action == "skip":
			delete(pending, k)
		}
	}
	return sc.Err()
}

// Summary is what one or more `go test -json` runs came to. A test is a
// test or a subtest (each fuzz seed is a subtest of its fuzz target), so
// a failing subtest counts twice: itself and its parent.
type Summary struct {
	Passed int
	// Skipped are the tests that skipped, with their messages; NotRun,
	// the part of them that changes the host on a machine not declared
	// disposable (collectortest.RequireDisposable).
	Skipped, NotRun []Line
	// Failed are the failed tests, and the packages that failed without
	// a failed test: a build or vet error, a panic, a timeout.
	Failed []Line
}

// Line is one test (package and name) and what it said.
type Line struct{ Name, Why string }

// Read adds the events of one `go test -json` run to s; lines that are not
// events are ignored (Stream has shown them).
func (s *Summary) Read(r io.Reader) error {
	output := map[testKey][]string{}
	failedTests := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		k := testKey{e.Package, e.Test}
		if e.Test == "" {
			if e.Action == "fail" && !failedTests[e.Package] {
				why := "failed without a failed test: a panic, a timeout or TestMain; see its output above"
				if e.FailedBuild != "" {
					why = "build or vet failed: " + e.FailedBuild
				}
				s.Failed = append(s.Failed, Line{e.Package, why})
			}
			continue
		}
		switch e.Action {
		case "output":
			output[k] = append(output[k], e.Output)
		case "pass":
			s.Passed++
		case "fail":
			failedTests[e.Package] = true
			s.Failed = append(s.Failed, Line{e.Package + " " + e.Test, ""})
		case "skip":
			l := Line{e.Package + " " + e.Test, message(output[k])}
			if before, after, ok := strings.Cut(l.Why, collectortest.NotRunPrefix); ok {
				// The list's title says what the prefix and the advice
				// after the change say.
				change, _, _ := strings.Cut(after, "; run with "+collectortest.DisposableEnv)
				l.Why = before + change
				s.NotRun = append(s.NotRun, l)
			} else {
				s.Skipped = append(s.Skipped, l)
			}
		}
		if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
			delete(output, k)
		}
	}
	return sc.Err()
}

// message is what a test logged, without go test's own === and --- lines,
// on one line.
func message(lines []string) string {
	var m []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- ") {
			m = append(m, l)
		}
	}
	return strings.Join(m, " / ")
}

// Write prints the summary: the skipped tests with their messages, the
// tests not run because they change the host, the failures, then the
// closing line `N passed, N failed, N skipped` that CI reads (skipped
// counts both lists).
func (s *Summary) Write(w io.Writer) {
	list := func(title string, lines []Line) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s (%d):\n", title, len(lines))
		for _, l := range lines {
			if l.Why == "" {
				fmt.Fprintf(w, "  %s\n", l.Name)
			} else {
				fmt.Fprintf(w, "  %s: %s\n", l.Name, l.Why)
			}
		}
	}
	list("skipped", s.Skipped)
	list("not run: they change the host; "+collectortest.DisposableEnv+"=1 runs them on a machine you may change", s.NotRun)
	list("failed", s.Failed)
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", s.Passed, len(s.Failed), len(s.Skipped)+len(s.NotRun))
}
