package dashboards

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/stall-exporter/stall_exporter/internal/metricsdoc"
	"github.com/stall-exporter/stall_exporter/tools/internal/selectors"
)

// TestGenerated regenerates every dashboard and fails when a committed JSON
// file differs, is missing, or has no generator.
func TestGenerated(t *testing.T) {
	files, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, b := range All() {
		made = append(made, b.File)
		want, err := b.Render()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(b.File)
		if err != nil {
			t.Errorf("%v (run `make dashboards`)", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make dashboards` and commit the result", b.File)
		}
	}
	for _, f := range files {
		if !slices.Contains(made, f) {
			t.Errorf("%s has no generator in this package: remove it or register its builder", f)
		}
	}
	if len(made) < 4 {
		t.Errorf("only %d dashboards registered", len(made))
	}
}

// Sentinel values for the built-in interval variables, so that the lint can
// tell which one a range uses after parsing.
var builtins = map[string]string{
	"__rate_interval": "1001s",
	"__interval":      "1002s",
	"__range":         "1003s",
	"__range_s":       "1004",
}

// lintValues are the values the lint substitutes: the built-in sentinels,
// and each template variable as a value no real label has, which the
// job/instance rule looks for in the parsed matchers.
func lintValues(m *Model) map[string]string {
	v := map[string]string{}
	for k, s := range builtins {
		v[k] = s
	}
	for _, tv := range m.Templating.List {
		v[tv.Name] = "VAR_" + tv.Name
		if tv.Type == "custom" {
			v[tv.Name] = tv.CurrentValue() // a number (top N) or a label name (group by)
		}
	}
	return v
}

// TestLint checks every dashboard JSON file in this directory against the
// dashboard-linter's rules (that tool cannot be installed here) and ours.
func TestLint(t *testing.T) {
	files, err := filepath.Glob("*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	doc, err := metricsdoc.Read("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	others, err := metricsdoc.Others("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	recorded, rollups := recordingRules(t)
	uids := map[string]string{}
	for _, f := range files {
		m, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		l := &linter{doc: doc, others: others, recorded: recorded, rollups: rollups}
		if prev, dup := uids[m.UID]; dup || m.UID == "" {
			l.errorf("", "uid %q empty or also used by %s", m.UID, prev)
		}
		uids[m.UID] = f
		l.dashboard(m)
		for _, p := range l.problems {
			t.Errorf("%s%s", f, p)
		}
	}
}

// linter collects the rule violations of one dashboard.
type linter struct {
	doc      map[string]metricsdoc.Family
	others   map[string]metricsdoc.Family
	recorded map[string]bool // recording rules of alerts/*.yml
	rollups  map[string]bool // the ones recorded once an hour or less often
	problems []string
}

// ruleGroup is a group of alerts/*.yml, as the dashboard tests read it.
type ruleGroup struct {
	Interval string `yaml:"interval"`
	Rules    []struct {
		Record      string            `yaml:"record"`
		Alert       string            `yaml:"alert"`
		Expr        string            `yaml:"expr"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"rules"`
}

// ruleGroups reads every group of alerts/*.yml.
func ruleGroups(t *testing.T) []ruleGroup {
	t.Helper()
	files, err := filepath.Glob("../alerts/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	var out []ruleGroup
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Groups []ruleGroup `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, doc.Groups...)
	}
	return out
}

// recordingRules reads the recording rules of alerts/*.yml: every name, and
// the roll-ups (groups evaluated every hour or less often).
func recordingRules(t *testing.T) (recorded, rollups map[string]bool) {
	t.Helper()
	recorded, rollups = map[string]bool{}, map[string]bool{}
	for _, g := range ruleGroups(t) {
		every, _ := model.ParseDuration(g.Interval)
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			recorded[r.Record] = true
			if time.Duration(every) >= time.Hour {
				rollups[r.Record] = true
			}
		}
	}
	return recorded, rollups
}

func (l *linter) errorf(where, format string, a ...any) {
	if where != "" {
		where = " " + where
	}
	l.problems = append(l.problems, where+": "+fmt.Sprintf(format, a...))
}

func (l *linter) dashboard(m *Model) {
	if m.Title == "" || !slices.Contains(m.Tags, Tag) {
		l.errorf("", "title %q and tag %q required", m.Title, Tag)
	}
	l.variables(m)
	for _, k := range m.Links {
		if k.Placement != "" {
			l.errorf("link "+k.Title, "placement %q: a placement only newer Grafana versions know, which hides the link in a menu there", k.Placement)
		}
	}
	values := lintValues(m)
	ids := map[int]bool{}
	for _, p := range m.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if ids[p.ID] || p.ID == 0 {
			l.errorf(where, "panel id missing or repeated")
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			l.errorf(where, "grid position %+v outside the 24-column grid", p.GridPos)
		}
		if p.Type == "row" {
			if p.Title == "" {
				l.errorf(where, "row without a title")
			}
			if !p.Collapsed && len(p.Panels) > 0 {
				l.errorf(where, "an expanded row with nested panels shows nothing in Grafana")
			}
			continue
		}
		l.panel(where, p, values)
	}
}

// variables: a datasource variable labelled "Data source"; job and instance
// variables; every query variable multi-value with All = .+, on the
// templated data source, its query label_values over documented metrics.
func (l *linter) variables(m *Model) {
	ds, ok := m.Variable("datasource")
	if !ok || ds.Type != "datasource" || ds.Label != "Data source" || ds.QueryString() != "prometheus" {
		l.errorf("", "want a datasource variable named datasource, labelled \"Data source\", of type prometheus; got %+v", ds)
	}
	for _, name := range []string{"cluster", "job", "instance"} {
		if _, ok := m.Variable(name); !ok {
			l.errorf("", "no %s variable", name)
		}
	}
	values := lintValues(m)
	for _, v := range m.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := "variable " + v.Name
		switch {
		case v.Name == "cluster":
			// The fleet's cluster: hidden, and its All matches series without the label.
			if v.Hide != 2 || v.Multi || !v.IncludeAll || v.AllValue != ".*" {
				l.errorf(where, "want hidden, single-value, include All and All value .*; got hide %d, multi %v, includeAll %v, allValue %q", v.Hide, v.Multi, v.IncludeAll, v.AllValue)
			}
		case !v.Multi || !v.IncludeAll || v.AllValue != ".+":
			l.errorf(where, "want multi, include All and All value .+; got multi %v, includeAll %v, allValue %q", v.Multi, v.IncludeAll, v.AllValue)
		}
		if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			l.errorf(where, "data source %+v, want ${datasource}", v.Datasource)
		}
		selector, _, ok := v.LabelValues()
		if !ok {
			l.errorf(where, "query %q is not label_values(selector, label)", v.QueryString())
			continue
		}
		expr, err := Expand(selector, values)
		if err != nil {
			l.errorf(where, "%v", err)
			continue
		}
		l.names(where, expr)
	}
}

func (l *linter) panel(where string, p Panel, values map[string]string) {
	if strings.TrimSpace(p.Title) == "" || len(strings.TrimSpace(p.Description)) < 40 {
		l.errorf(where, "needs a title and a description saying what to look for")
	}
	if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
		l.errorf(where, "data source %+v, want the ${datasource} variable", p.Datasource)
	}
	unit := p.FieldConfig.Defaults.Unit
	switch {
	case unit == "":
		l.errorf(where, "no unit")
	case unit == "none" && p.Type != "table":
		l.errorf(where, "unit none is only for tables of mixed settings")
	}
	if p.Type == "heatmap" {
		yAxis, _ := p.Options["yAxis"].(map[string]any)
		color, _ := p.Options["color"].(map[string]any)
		if u, _ := yAxis["unit"].(string); u == "" {
			l.errorf(where, "heatmap without a y-axis unit")
		}
		if s, _ := color["steps"].(float64); s < 2 {
			l.errorf(where, "heatmap colour steps %v: Grafana needs at least 2", color["steps"])
		}
		if calc, _ := p.Options["calculate"].(bool); calc {
			l.errorf(where, "heatmap of a Prometheus histogram must not re-bucket (calculate: false)")
		}
	}
	if len(p.Targets) == 0 {
		l.errorf(where, "no queries")
	}
	for _, tg := range p.Targets {
		if p.Type == "timeseries" && !tg.Instant {
			l.perHost(where, tg.Expr, values)
		}
		if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
			l.errorf(where, "query data source %+v, want ${datasource}", tg.Datasource)
		}
		expr, err := Expand(tg.Expr, values)
		if err != nil {
			l.errorf(where, "%v", err)
			continue
		}
		l.query(where, tg.Expr, expr)
	}
}

var rateFuncs = map[string]bool{"rate": true, "irate": true, "increase": true}

// query parses one expanded query and applies the PromQL rules.
func (l *linter) query(where, raw, expr string) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		l.errorf(where, "%q does not parse: %v", raw, err)
		return
	}
	l.names(where, expr)
	interval := func(d time.Duration) string {
		for k, s := range builtins {
			if want, _ := time.ParseDuration(s); want == d {
				return k
			}
		}
		return d.String()
	}
	parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			l.selector(where, raw, n, path)
		case *parser.MatrixSelector:
			got := interval(n.Range)
			call, _ := parent(path).(*parser.Call)
			vs, _ := n.VectorSelector.(*parser.VectorSelector)
			rollup := vs != nil && l.rollups[vs.Name]
			switch {
			case rollup && (got == "__rate_interval" || !strings.HasPrefix(got, "__") && n.Range%time.Hour != 0):
				l.errorf(where, "roll-up %s over %s in %q: read a roll-up over whole hours ($__range, $__interval with a minimum interval of 1h or more, or a multiple of 1h)", vs.Name, got, raw)
			case rollup:
			case call != nil && rateFuncs[call.Func.Name] && got != "__rate_interval" && !(call.Func.Name == "increase" && got == "__range"):
				l.errorf(where, "%s over %s in %q: use $__rate_interval (increase may also use $__range)", call.Func.Name, got, raw)
			case !strings.HasPrefix(got, "__"):
				l.errorf(where, "fixed range %s in %q: use $__rate_interval, $__interval or $__range", got, raw)
			}
		case *parser.SubqueryExpr:
			if !l.hourlySubquery(n) {
				l.errorf(where, "subquery in %q: Grafana's step already does this (only hourly roll-ups may be stepped through by whole hours over $__range)", raw)
			}
		case *parser.Call:
			if n.Func.Name == "histogram_quantile" {
				agg, ok := n.Args[1].(*parser.AggregateExpr)
				if !ok || agg.Without || !slices.Contains(agg.Grouping, "le") {
					l.errorf(where, "histogram_quantile in %q must aggregate its buckets by (…, le)", raw)
				}
			}
		}
		return nil
	})
}

// perHost: a graph must not draw one series per host of the selection by
// default (1,000 lines at 1,000 hosts): its query either aggregates the
// hosts away or ranks them with topk/bottomk($top, …), the Top N variable.
func (l *linter) perHost(where, raw string, values map[string]string) {
	v := map[string]string{}
	for k, s := range values {
		v[k] = s
	}
	v["top"] = "4242" // to recognise the variable after parsing
	expr, err := Expand(raw, v)
	if err != nil {
		return // reported by the query checks
	}
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return
	}
	if !BoundedByHost(e) {
		l.errorf(where, "%q draws one series per host: aggregate the hosts away or rank them with topk($top, …)", raw)
	}
}

// hourlySubquery: a subquery that steps through hourly roll-ups by whole hours
// (or by whole hours) over the dashboard's range, as the capacity tables'
// "when" and "hours over" columns do; nothing else needs one.
func (l *linter) hourlySubquery(sq *parser.SubqueryExpr) bool {
	if sq.Step < time.Hour || sq.Step%time.Hour != 0 || sq.Range != 1003*time.Second {
		return false
	}
	ok := true
	parser.Inspect(sq.Expr, func(n parser.Node, _ []parser.Node) error {
		if vs, isSel := n.(*parser.VectorSelector); isSel && !l.rollups[vs.Name] {
			ok = false
		}
		return nil
	})
	return ok
}

// selector: every selector filters on the job and instance variables, and a
// counter is read only through rate, irate or increase.
func (l *linter) selector(where, raw string, vs *parser.VectorSelector, path []parser.Node) {
	if _, inRange := parent(path).(*parser.MatrixSelector); l.rollups[vs.Name] && !inRange {
		l.errorf(where, "roll-up %s read as an instant vector in %q: it is recorded once an hour and an instant selector sees it only within 5 minutes of that; use *_over_time", vs.Name, raw)
	}
	has := func(label string) bool {
		for _, m := range vs.LabelMatchers {
			if m.Name == label && m.Type.String() == "=~" && m.Value == "VAR_"+label {
				return true
			}
		}
		return false
	}
	if !has("cluster") || !has("job") || !has("instance") {
		l.errorf(where, "selector %s in %q does not filter cluster=~\"$cluster\", job=~\"$job\" and instance=~\"$instance\"", vs, raw)
	}
	name := vs.Name
	f, documented := metricsdoc.Lookup(l.doc, name)
	counter := strings.HasSuffix(name, "_total") || (documented && f.Type == "counter") ||
		(documented && f.Type == "histogram" && name != f.Name)
	if !counter {
		return
	}
	ms, _ := parent(path).(*parser.MatrixSelector)
	var call *parser.Call
	if ms != nil && len(path) >= 2 {
		call, _ = path[len(path)-2].(*parser.Call)
	}
	if ms == nil || call == nil || !rateFuncs[call.Func.Name] {
		l.errorf(where, "counter %s in %q is not inside rate, irate or increase", name, raw)
	}
}

// names checks that every metric a query reads is documented.
func (l *linter) names(where, expr string) {
	names, err := selectors.MetricNames(expr)
	if err != nil {
		l.errorf(where, "%q: %v", expr, err)
		return
	}
	for _, n := range names {
		if _, ok := metricsdoc.Lookup(l.doc, n); ok {
			continue
		}
		if _, ok := l.others[n]; ok || l.recorded[n] {
			continue
		}
		l.errorf(where, "%s is not in docs/metrics.md (renamed or removed?)", n)
	}
}

func parent(path []parser.Node) parser.Node {
	if len(path) == 0 {
		return nil
	}
	return path[len(path)-1]
}

// TestLintCatches feeds the lint a dashboard that breaks each rule once and
// checks that each breach is reported.
func TestLintCatches(t *testing.T) {
	const bad = `{"uid": "bad", "title": "Bad", "tags": ["stall_exporter"],
	  "links": [{"title": "stall_exporter", "type": "dashboards", "placement": "inControlsMenu"}],
	  "templating": {"list": [
	    {"type": "datasource", "name": "datasource", "label": "Datasource", "query": "prometheus"},
	    {"type": "query", "name": "job", "query": "label_values(stall_vm_dirty_bytes, job)", "datasource": {"uid": "${datasource}"}, "multi": false, "includeAll": true, "allValue": ".+"},
	    {"type": "query", "name": "instance", "query": "label_values(stall_vm_dirty_bytez{job=~\"$job\"}, instance)", "datasource": {"uid": "${datasource}"}, "multi": true, "includeAll": true, "allValue": ".*"}
	  ]},
	  "panels": [
	    {"type": "row", "id": 1, "title": "Row", "gridPos": {"h": 1, "w": 24}, "panels": [{"type": "timeseries"}]},
	    {"type": "timeseries", "id": 2, "title": "No description", "datasource": {"uid": "prom-1"}, "gridPos": {"h": 8, "w": 12, "x": 16},
	     "targets": [
	       {"expr": "rate(stall_vm_major_faults_total{job=~\"$job\",instance=~\"$instance\"}[5m])", "datasource": {"uid": "${datasource}"}},
	       {"expr": "stall_vm_major_faults_total{job=~\"$job\",instance=~\"$instance\"}", "datasource": {"uid": "${datasource}"}},
	       {"expr": "stall_vm_dirty_bytes{job=~\"$job\"}", "datasource": {"uid": "${datasource}"}},
	       {"expr": "stall_vm_dirty_bytez{job=~\"$job\",instance=~\"$instance\"} * $foo", "datasource": {"uid": "${datasource}"}},
	       {"expr": "histogram_quantile(0.99, sum by (device) (rate(stall_disk_await_seconds_bucket{job=~\"$job\",instance=~\"$instance\"}[$__rate_interval])))"},
	       {"expr": "max_over_time(stall_vm_dirty_bytes{job=~\"$job\",instance=~\"$instance\"}[1h])", "datasource": {"uid": "${datasource}"}},
	       {"expr": "max_over_time(instance:stall_vm_dirty_throttle_ratio:max1h{job=~\"$job\",instance=~\"$instance\"}[$__rate_interval])", "datasource": {"uid": "${datasource}"}},
	       {"expr": "instance:stall_vm_dirty_throttle_ratio:max1h{job=~\"$job\",instance=~\"$instance\"} > 1", "datasource": {"uid": "${datasource}"}},
	       {"expr": "max_over_time(stall_vm_dirty_throttle_ratio{job=~\"$job\",instance=~\"$instance\"}[$__range:1h])", "datasource": {"uid": "${datasource}"}}
	     ]},
	    {"type": "heatmap", "id": 2, "title": "Heat", "description": "A heatmap whose colour scheme has a single step.", "datasource": {"uid": "${datasource}"},
	     "gridPos": {"h": 8, "w": 12}, "fieldConfig": {"defaults": {"unit": "s"}}, "options": {"calculate": true, "color": {"steps": 1}, "yAxis": {}},
	     "targets": [{"expr": "sum by (le) (rate(stall_disk_await_seconds_bucket{job=~\"$job\",instance=~\"$instance\"}[$__interval]))", "datasource": {"uid": "${datasource}"}}]}
	  ]}`
	path := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := metricsdoc.Read("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rollups := recordingRules(t)
	l := &linter{doc: doc, rollups: rollups}
	l.dashboard(m)
	all := strings.Join(l.problems, "\n")
	for _, want := range []string{
		`want a datasource variable named datasource, labelled "Data source"`,
		"variable job: want multi, include All and All value .+",
		"variable instance: want multi, include All and All value .+",
		"variable instance: stall_vm_dirty_bytez is not in docs/metrics.md",
		"an expanded row with nested panels shows nothing",
		`"No description": needs a title and a description`,
		`"No description": data source &{Type: UID:prom-1}, want the ${datasource} variable`,
		`"No description": no unit`,
		"outside the 24-column grid",
		"rate over 5m0s",
		"counter stall_vm_major_faults_total",
		`does not filter cluster=~"$cluster", job=~"$job" and instance=~"$instance"`,
		"no cluster variable",
		"no value for variable(s) foo",
		"histogram_quantile in",
		"query data source <nil>",
		"fixed range 1h0m0s",
		"panel id missing or repeated",
		"colour steps 1",
		"must not re-bucket",
		"heatmap without a y-axis unit",
		"rate over __interval",
		`placement "inControlsMenu"`,
		"roll-up instance:stall_vm_dirty_throttle_ratio:max1h over __rate_interval",
		"roll-up instance:stall_vm_dirty_throttle_ratio:max1h read as an instant vector",
		"subquery in",
		"draws one series per host",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("lint did not report %q; it reported:\n%s", want, all)
		}
	}
}
