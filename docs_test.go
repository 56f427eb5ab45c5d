package main

import (
	"sort"
	"strings"
	"testing"

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
