package main

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
)

var docRow = regexp.MustCompile("^\\| `(stall_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")

// readMetricsDoc parses the tables of docs/metrics.md into name → info.
func readMetricsDoc(t *testing.T) map[string]collector.MetricInfo {
	t.Helper()
	f, err := os.Open("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]collector.MetricInfo{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := docRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			l = strings.Trim(strings.TrimSpace(l), "`")
			if l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		out[m[1]] = collector.MetricInfo{Name: m[1], Type: m[2], Labels: labels}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
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
