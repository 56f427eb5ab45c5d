package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/metricsdoc"
)

// readMetricsDoc parses the tables of docs/metrics.md into name → info.
func readMetricsDoc(t *testing.T) map[string]collector.MetricInfo {
	t.Helper()
	fams, err := metricsdoc.Read("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]collector.MetricInfo, len(fams))
	for n, f := range fams {
		out[n] = collector.MetricInfo{Name: f.Name, Type: f.Type, Labels: f.Labels}
	}
	return out
}

// TestMetricsDoc fails when docs/metrics.md and the metric families the code
// declares disagree in name, type or label set.
func TestMetricsDoc(t *testing.T) {
	doc := readMetricsDoc(t)
	code := map[string]collector.MetricInfo{}
	for _, m := range collector.Documented() {
		code[m.Name] = m
	}
	if len(code) < 10 {
		t.Fatalf("only %d metric families declared; the collectors are not linked in", len(code))
	}
	for name, c := range code {
		d, ok := doc[name]
		if !ok {
			t.Errorf("%s (%s, labels %v) is exported but missing from docs/metrics.md", name, c.Type, c.Labels)
			continue
		}
		if d.Type != c.Type {
			t.Errorf("%s: docs/metrics.md says type %s, code says %s", name, d.Type, c.Type)
		}
		if !sameSet(d.Labels, c.Labels) {
			t.Errorf("%s: docs/metrics.md says labels %v, code says %v", name, d.Labels, c.Labels)
		}
	}
	for name := range doc {
		if _, ok := code[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, which the code does not export", name)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, ",") == strings.Join(b, ",")
}

// mdLinkRE matches an inline markdown link's target: [text](target).
var mdLinkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinksResolve fails when a link of README.md, docs/*.md or a
// markdown file under deploy/ names a file of the repository that does not
// exist, or an #anchor that no heading of the target file has (GitHub's
// anchors: see githubAnchors). Links to other sites are not followed.
func TestDocsLinksResolve(t *testing.T) {
	var files []string
	for _, f := range docFiles(t) {
		if strings.HasSuffix(f, ".md") {
			files = append(files, f)
		}
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		anchors[file] = githubAnchors(string(b))
		return anchors[file]
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				checked++
				st, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: link %s: %v", file, i+1, target, err)
					continue
				}
				if anchor == "" {
					continue
				}
				if st.IsDir() || !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not markdown", file, i+1, target)
				} else if !anchorsOf(dest)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", file, i+1, target, dest, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d in-repo links found", checked)
	}
}

// githubAnchors returns the anchors GitHub gives the headings of a markdown
// text: the heading's text without markup, lower-cased, with every
// character but letters, digits, '_', '-' and spaces removed and spaces
// turned into '-'; a repeated anchor gets -1, -2, … Headings inside fenced
// code blocks are not headings.
func githubAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if fenced || hashes == 0 || hashes > 6 || !strings.HasPrefix(line[hashes:], " ") {
			continue
		}
		heading := mdLinkTextRE.ReplaceAllString(strings.TrimSpace(line[hashes:]), "$1")
		var sb strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				sb.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				sb.WriteRune(r)
			}
		}
		a := sb.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// mdLinkTextRE matches a link in a heading, whose anchor keeps its text only.
var mdLinkTextRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
