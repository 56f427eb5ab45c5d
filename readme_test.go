package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestReadmeDocumentsEveryFlag fails when a command-line flag is not
// mentioned in README.md (regenerate its flag reference with `make readme-flags`).
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	model := kingpin.CommandLine.Model()
	if len(model.Flags) < 10 {
		t.Fatalf("only %d flags registered", len(model.Flags))
	}
	for _, f := range model.Flags {
		if f.Hidden || f.Name == "help" || f.Name == "version" || strings.HasPrefix(f.Name, "help-") {
			continue
		}
		if !strings.Contains(text, "--"+f.Name) && !strings.Contains(text, "--[no-]"+f.Name) {
			t.Errorf("flag --%s is not documented in README.md", f.Name)
		}
	}
}

// otherProgramsFlags are the dotted flags the docs name that belong to
// other programs, each with the program; every other dotted --flag in the
// docs must be one of the exporter's.
var otherProgramsFlags = map[string]string{
	"alertmanager.url":         "amtool",
	"collector.vmstat.fields":  "node_exporter",
	"runtime.gomaxprocs":       "node_exporter",
	"query.max-samples":        "prometheus",
	"retention.resolution-raw": "thanos compact",
}

// docFiles are the files a user reads for flags and settings: README.md,
// docs/*.md and every text file under deploy/ (units, settings, manifests,
// the Helm chart and its README); paths are relative to the repository.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	md, err := filepath.Glob("docs/*.md")
	if err != nil || len(md) < 5 {
		t.Fatalf("docs/*.md: %d files, %v", len(md), err)
	}
	files = append(files, md...)
	err = filepath.WalkDir("deploy", func(p string, d fs.DirEntry, err error) error {
		// The chart's alerts and dashboards are links to alerts/ and dashboards/.
		if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 || strings.HasSuffix(p, ".json") {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// docFlagRE matches a dotted flag as docs write it: --a.b, --no-a.b,
// --[no-]a.b, and --a.* for a family of flags. Every flag of the exporter
// but --help and --version has a dot.
var docFlagRE = regexp.MustCompile(`--(?:\[no-\]|no-)?([a-z][a-z0-9-]*(?:\.[a-z0-9][a-z0-9_-]*)+)(\.\*)?`)

// TestDocsNameRealFlags fails when README.md, docs/ or deploy/ name a
// --flag the exporter does not have (kingpin's model), or a family
// --x.* of which it has none.
func TestDocsNameRealFlags(t *testing.T) {
	flags := map[string]bool{}
	for _, f := range kingpin.CommandLine.Model().Flags {
		flags[f.Name] = true
	}
	if !flags["web.listen-address"] || !flags["web.max-probe-requests"] || !flags["redis.addr"] {
		t.Fatalf("kingpin's model lacks the server's or a collector's flags: %v", flags)
	}
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range docFlagRE.FindAllStringSubmatch(line, -1) {
				name, family := m[1], m[2] != ""
				checked++
				if _, ok := otherProgramsFlags[name]; ok {
					continue
				}
				if family {
					if !hasFlagWithPrefix(flags, name+".") {
						t.Errorf("%s:%d: no flag --%s.* exists", file, i+1, name)
					}
					continue
				}
				if !flags[name] {
					t.Errorf("%s:%d: --%s is not a flag of stall_exporter", file, i+1, name)
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d flag mentions found in the docs", checked)
	}
}

func hasFlagWithPrefix(flags map[string]bool, prefix string) bool {
	for f := range flags {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}

// TestDocsFlagDefaults fails when a "| Flag | Default | …" table of the docs
// states a default that is not kingpin's. A row may name several flags with
// as many defaults, comma-separated; a default cell that is prose ("see
// diskstats") or a flag whose default is empty (the cell then says what
// empty means) is not compared. On and off name a boolean's true and false.
func TestDocsFlagDefaults(t *testing.T) {
	defaults := map[string]string{}
	for _, f := range kingpin.CommandLine.Model().Flags {
		defaults[f.Name] = strings.Join(f.Default, ",")
	}
	compared := 0
	for _, file := range docFiles(t) {
		if !strings.HasSuffix(file, ".md") {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inTable := false
		for i, line := range strings.Split(string(b), "\n") {
			cells := tableCells(line)
			switch {
			case len(cells) >= 2 && cells[0] == "Flag" && cells[1] == "Default":
				inTable = true
				continue
			case cells == nil:
				inTable = false
			}
			if !inTable || len(cells) < 2 || strings.Trim(cells[0], "-: ") == "" {
				continue
			}
			names := docFlagRE.FindAllStringSubmatch(cells[0], -1)
			values := strings.Split(cells[1], ", ")
			if len(names) != len(values) {
				if len(names) > 0 && cells[1] != "—" {
					continue // prose, or one default for several flags
				}
				values = make([]string, len(names))
				for j := range values {
					values[j] = "—"
				}
			}
			for j, m := range names {
				want, ok := defaults[m[1]]
				if !ok || want == "" {
					continue // not a flag (TestDocsNameRealFlags says so), or empty: prose
				}
				got := normalDefault(values[j])
				compared++
				if got != want {
					t.Errorf("%s:%d: --%s: the table says default %q, the flag's is %q", file, i+1, m[1], values[j], want)
				}
			}
		}
	}
	if compared < 30 {
		t.Errorf("only %d documented defaults compared", compared)
	}
}

// tableCells splits a markdown table row into its trimmed cells, without
// backticks; nil when line is not a table row.
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") {
		return nil
	}
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(strings.ReplaceAll(p, "`", ""))
	}
	return parts
}

// normalDefault maps the words docs use for a boolean's default to
// kingpin's.
func normalDefault(v string) string {
	switch v {
	case "on", "enabled":
		return "true"
	case "off", "disabled":
		return "false"
	}
	return v
}

// TestDocsGoVersion fails when README.md or docs/install.md asks for a Go
// other than go.mod's go line, the oldest toolchain that builds the module
// (docs/benchmarks.md names the Go a measurement ran on, not a requirement).
func TestDocsGoVersion(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	want := string(m[1])
	mentions := 0
	for _, file := range []string{"README.md", "docs/install.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range regexp.MustCompile(`\bGo (1\.[0-9][0-9.]*[0-9])`).FindAllSubmatch(b, -1) {
			mentions++
			if string(v[1]) != want {
				t.Errorf("%s asks for Go %s, go.mod for %s", file, v[1], want)
			}
		}
	}
	if mentions < 2 {
		t.Errorf("%d Go versions found in README.md and docs/install.md", mentions)
	}
}
