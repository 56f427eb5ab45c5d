package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stall-exporter/stall_exporter/internal/metricsdoc"
	"github.com/stall-exporter/stall_exporter/tools/internal/selectors"
)

// TestDroppableMetrics keeps the list of docs/capacity.md honest: the
// metric families a fleet can drop by relabelling without losing any alert,
// recording rule, dashboard panel or variable are exactly the documented
// families that no rule of alerts/*.yml and no query of dashboards/*.json
// reads; and the metric_relabel_configs regexp the page gives drops every
// series of those families and no other.
func TestDroppableMetrics(t *testing.T) {
	doc, err := metricsdoc.Read("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	read := func(expr string) {
		names, err := selectors.MetricNames(expr)
		if err != nil {
			t.Errorf("%q: %v", expr, err)
		}
		for _, n := range names {
			if f, ok := metricsdoc.Lookup(doc, n); ok {
				used[f.Name] = true
			}
		}
	}
	exprs, annotations := ruleExprs(t)
	for _, expr := range exprs {
		read(expr)
	}
	// A metric an alert's description names (or queries) is where its reader looks next.
	named := regexp.MustCompile(`\bstall_[a-z0-9_]+\b`)
	for _, n := range named.FindAllString(annotations, -1) {
		if f, ok := metricsdoc.Lookup(doc, n); ok {
			used[f.Name] = true
		}
	}
	boards, _ := filepath.Glob("*.json")
	for _, f := range boards {
		m, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		values := lintValues(m)
		for _, v := range m.Templating.List {
			if sel, _, ok := v.LabelValues(); ok {
				e, _ := Expand(sel, values)
				read(e)
			}
		}
		for _, p := range m.Panels {
			for _, tg := range p.Targets {
				e, err := Expand(tg.Expr, values)
				if err != nil {
					t.Fatal(err)
				}
				read(e)
			}
		}
	}
	var want []string
	for name := range doc {
		if !used[name] {
			want = append(want, name)
		}
	}
	sort.Strings(want)

	b, err := os.ReadFile("../docs/capacity.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	var listed []string
	for _, m := range regexp.MustCompile("\\| `(stall_[a-z0-9_]+)` \\|").FindAllStringSubmatch(between(t, page, "droppable"), -1) {
		listed = append(listed, m[1])
	}
	sort.Strings(listed)
	if !slices.Equal(listed, want) {
		t.Errorf("docs/capacity.md lists as droppable:\n%s\nbut nothing in alerts/ or dashboards/ reads exactly:\n%s",
			strings.Join(listed, "\n"), strings.Join(want, "\n"))
	}

	// The relabelling snippet, anchored as Prometheus anchors a relabel regex.
	var cfg []struct {
		Regex  string `yaml:"regex"`
		Action string `yaml:"action"`
	}
	snippet := strings.TrimPrefix(strings.TrimSpace(strings.Trim(strings.TrimSpace(between(t, page, "droppable-relabel")), "`")), "yaml")
	var wrapped struct {
		Configs *[]struct {
			Regex  string `yaml:"regex"`
			Action string `yaml:"action"`
		} `yaml:"metric_relabel_configs"`
	}
	wrapped.Configs = &cfg
	if err := yaml.Unmarshal([]byte(snippet), &wrapped); err != nil || len(cfg) != 1 || cfg[0].Action != "drop" {
		t.Fatalf("docs/capacity.md: the droppable-relabel section must be one metric_relabel_configs drop rule (%v):\n%s", err, snippet)
	}
	re := regexp.MustCompile("^(?:" + cfg[0].Regex + ")$")
	for name, f := range doc {
		series := []string{name}
		if f.Type == "histogram" {
			series = []string{name + "_bucket", name + "_sum", name + "_count"}
		}
		for _, s := range series {
			if drop := re.MatchString(s); drop == used[name] {
				t.Errorf("the relabel regexp of docs/capacity.md drops %s: %v, but %s is read by a rule or a dashboard: %v", s, drop, name, used[name])
			}
		}
	}
}

// ruleExprs returns the expression of every rule of alerts/*.yml, and the
// text of all their annotations.
func ruleExprs(t *testing.T) ([]string, string) {
	t.Helper()
	var out []string
	var annotations strings.Builder
	for _, g := range ruleGroups(t) {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
			for _, a := range r.Annotations {
				annotations.WriteString(a + "\n")
			}
		}
	}
	return out, annotations.String()
}

// between returns the text of a page between <!-- name:begin --> and
// <!-- name:end -->.
func between(t *testing.T, page, name string) string {
	t.Helper()
	_, rest, ok1 := strings.Cut(page, "<!-- "+name+":begin -->")
	body, _, ok2 := strings.Cut(rest, "<!-- "+name+":end -->")
	if !ok1 || !ok2 {
		t.Fatalf("docs/capacity.md has no %s markers", name)
	}
	return body
}

// TestCapacityThresholds: every per-day count of the capacity dashboard
// that names an alert compares with a number that alert's expression
// compares with, so a threshold changed in alerts/*.yml cannot leave the
// dashboard counting against the old one.
func TestCapacityThresholds(t *testing.T) {
	alerts := map[string]string{}
	for _, g := range ruleGroups(t) {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = r.Expr
			}
		}
	}
	m, err := Load("stall-capacity.json")
	if err != nil {
		t.Fatal(err)
	}
	threshold := regexp.MustCompile(`[<>]=? ([0-9][0-9.]*(?: \* 2\^20)?)`)
	checked := 0
	for _, p := range m.Panels {
		for _, tg := range p.Targets {
			for _, word := range strings.Fields(tg.Legend) {
				expr, ok := alerts[word]
				if !ok {
					continue
				}
				for _, th := range threshold.FindAllStringSubmatch(tg.Expr, -1) {
					checked++
					if !strings.Contains(expr, th[1]) {
						t.Errorf("%q counts %s against %s, which its expression does not compare with: %s", p.Title, word, th[1], expr)
					}
				}
			}
		}
	}
	if checked < 12 {
		t.Errorf("only %d thresholds of named alerts found in the capacity dashboard", checked)
	}
}
