// Package alerts holds the Prometheus alerting and recording rules (alerts/*.yml) and their
// promtool replays (alerts/tests/*.yml). It has no Go code of its own: these tests keep the rules
// honest. They run promtool on every file, under Prometheus 2 and 3 (promtool_test.go), check the
// conventions every alert must follow, count for each alert the replays in which it fires and
// those in which it must stay silent, and check (or, with -update, rewrite) the lead-time table of
// docs/alerts.md from the replays.
package alerts

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/stall-exporter/stall_exporter/internal/metricsdoc"
	"github.com/stall-exporter/stall_exporter/tools/internal/promtool"
	"github.com/stall-exporter/stall_exporter/tools/internal/selectors"
)

var update = flag.Bool("update", false, "rewrite the generated series of alerts/tests/ (replay_test.go) and the generated tables of docs/alerts.md")

// pendingIncidents are the incidents of docs/alerts.md without a replay yet, with the reason. A
// replay file for one of them must come with the removal of its entry here.
var pendingIncidents = map[int]string{}

const (
	// numIncidents is the number of incidents the rules are written for (docs/alerts.md).
	numIncidents = 8
	// evalInterval is the scrape and rule evaluation interval of every replay.
	evalInterval = 15 * time.Second
	runbookURL   = "https://github.com/stall-exporter/stall_exporter/blob/main/docs/runbooks.md#"
)

// reporter is where the checks report problems: the test itself, or a collector in
// TestChecksCatchMistakes, which feeds them broken rules and replays.
type reporter interface {
	Errorf(format string, args ...any)
}

// rule is one alerting or recording rule of alerts/*.yml.
type rule struct {
	File        string
	Group       string
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
	Comment     string            `yaml:"-"`
}

func (r rule) name() string {
	if r.Alert != "" {
		return r.Alert
	}
	return r.Record
}

// loadRules reads every rule file directly under alerts/.
func loadRules(t *testing.T) []rule {
	t.Helper()
	files, err := filepath.Glob("*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	var out []rule
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Groups []struct {
				Name  string      `yaml:"name"`
				Rules []yaml.Node `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range doc.Groups {
			for _, n := range g.Rules {
				var r rule
				if err := n.Decode(&r); err != nil {
					t.Fatalf("%s line %d: %v", f, n.Line, err)
				}
				r.File, r.Group, r.Comment = f, g.Name, n.HeadComment
				out = append(out, r)
			}
		}
	}
	return out
}

// testFile is one promtool test file of alerts/tests/, with the metadata of its header comment.
type testFile struct {
	Path               string
	RuleFiles          []string    `yaml:"rule_files"`
	EvaluationInterval string      `yaml:"evaluation_interval"`
	Groups             []testGroup `yaml:"tests"`

	// Header metadata (lines "# key: value" at the top of the file).
	Incident     int           // incident number, 0 if not an incident replay
	Title        string        // incident title, or what a baseline replays
	Baseline     bool          // a healthy baseline: nothing may fire
	Clock        time.Duration // wall-clock time of eval_time 0 (since midnight)
	HasClock     bool
	Failure      time.Duration // eval_time of the incident's failure moment
	FailureText  string
	AfterTheFact string // non-empty: the replay's alerts come after the failure, and why
	// DelayBound and DelayText (a "# detection-delay:" line): the failure cannot be led, because
	// the sign is the failure itself; the lead alerts must fire at or after it, within DelayBound.
	DelayBound time.Duration
	DelayText  string
	Lead       []string
}

type testGroup struct {
	Name          string        `yaml:"name"`
	Interval      string        `yaml:"interval"`
	InputSeries   []inputSeries `yaml:"input_series"`
	AlertRuleTest []alertTest   `yaml:"alert_rule_test"`
	ExprTests     []exprTest    `yaml:"promql_expr_test"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertTest struct {
	EvalTime  string `yaml:"eval_time"`
	Alertname string `yaml:"alertname"`
	ExpAlerts []struct {
		ExpLabels      map[string]string `yaml:"exp_labels"`
		ExpAnnotations map[string]string `yaml:"exp_annotations"`
	} `yaml:"exp_alerts"`
	Only int `yaml:"-"` // the one Prometheus version the assertion holds for, 0 for all (promtool_test.go)
}

// UnmarshalYAML reads the assertion, and from the comment above it the version it holds for.
func (a *alertTest) UnmarshalYAML(n *yaml.Node) error {
	type plain alertTest
	if err := n.Decode((*plain)(a)); err != nil {
		return err
	}
	a.Only = onlyVersion(n.HeadComment)
	return nil
}

// exprTest is a promql_expr_test; only the version it holds for is read here.
type exprTest struct{ Only int }

// UnmarshalYAML reads the version from the comment above the expression test.
func (e *exprTest) UnmarshalYAML(n *yaml.Node) error {
	e.Only = onlyVersion(n.HeadComment)
	return nil
}

// under reports whether an assertion limited to only holds under Prometheus version.
func under(only, version int) bool { return only == 0 || only == version }

func (a alertTest) at(rep reporter, file string) time.Duration {
	d, err := model.ParseDuration(a.EvalTime)
	if err != nil {
		rep.Errorf("%s: eval_time %q: %v", file, a.EvalTime, err)
	}
	return time.Duration(d)
}

var headerLine = regexp.MustCompile(`^# (incident|baseline|clock|failure|after-the-fact|detection-delay|lead): (.+)$`)

func loadTests(t *testing.T) []testFile {
	t.Helper()
	paths, err := filepath.Glob("tests/*.yml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	var out []testFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		tf := testFile{Path: p}
		if err := yaml.Unmarshal(b, &tf); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "#") {
				break
			}
			m := headerLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			switch v := strings.TrimSpace(m[2]); m[1] {
			case "incident":
				num, title, _ := strings.Cut(v, " ")
				if tf.Incident, err = strconv.Atoi(num); err != nil {
					t.Fatalf("%s: incident %q: want a number and a title", p, v)
				}
				tf.Title = strings.TrimSpace(title)
			case "baseline":
				tf.Baseline, tf.Title = true, v
			case "clock":
				c, err := time.Parse("15:04:05", v)
				if err != nil {
					t.Fatalf("%s: clock %q: %v", p, v, err)
				}
				tf.HasClock = true
				tf.Clock = time.Duration(c.Hour())*time.Hour + time.Duration(c.Minute())*time.Minute + time.Duration(c.Second())*time.Second
			case "failure":
				at, text, _ := strings.Cut(v, " ")
				d, err := model.ParseDuration(at)
				if err != nil {
					t.Fatalf("%s: failure %q: want an eval time and a description: %v", p, v, err)
				}
				tf.Failure, tf.FailureText = time.Duration(d), strings.TrimSpace(text)
			case "after-the-fact":
				tf.AfterTheFact = v
			case "detection-delay":
				at, text, _ := strings.Cut(v, " ")
				d, err := model.ParseDuration(at)
				if err != nil || d <= 0 || strings.TrimSpace(text) == "" {
					t.Fatalf("%s: detection-delay %q: want a bound (a duration) and why the failure cannot be led", p, v)
				}
				tf.DelayBound, tf.DelayText = time.Duration(d), strings.TrimSpace(text)
			case "lead":
				for _, a := range strings.Split(v, ",") {
					tf.Lead = append(tf.Lead, strings.TrimSpace(a))
				}
			}
		}
		out = append(out, tf)
	}
	return out
}

// TestPromtoolCheckRules runs `promtool check rules` on every rule file, under each version.
func TestPromtoolCheckRules(t *testing.T) {
	files, _ := filepath.Glob("*.yml")
	for _, v := range promtool.Versions {
		t.Run(fmt.Sprintf("prometheus%d", v), func(t *testing.T) {
			bin := promtool.Require(t, v)
			out, err := exec.Command(bin, append([]string{"check", "rules"}, files...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool check rules: %v\n%s", err, out)
			}
		})
	}
}

// TestPromtoolTestRules runs `promtool test rules` on every replay, with generated assertions
// added: every alert a test group does not assert firing must stay silent at every evaluation from
// 0 to the group's last eval_time. An alert that fires where nobody expects it fails the test, and
// a healthy baseline is proven silent at every step, not only at the times it names. Each file runs
// under Prometheus 2 and 3, with the assertions that hold for that version (promtool_test.go); the
// files run in parallel (promtool is single-threaded).
func TestPromtoolTestRules(t *testing.T) {
	var alerts []string
	for _, r := range loadRules(t) {
		if r.Alert != "" {
			alerts = append(alerts, r.Alert)
		}
	}
	tests := loadTests(t)
	for _, v := range promtool.Versions {
		t.Run(fmt.Sprintf("prometheus%d", v), func(t *testing.T) {
			t.Parallel()
			bin := promtool.Require(t, v)
			dir := t.TempDir()
			for _, tf := range tests {
				p := filepath.Join(dir, filepath.Base(tf.Path))
				if err := os.WriteFile(p, strictVersion(t, tf, alerts, v), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Run(filepath.Base(tf.Path), func(t *testing.T) {
					t.Parallel()
					out, err := exec.Command(bin, "test", "rules", p).CombinedOutput()
					if err != nil {
						t.Errorf("promtool %d test rules %s (its Prometheus %d assertions, and every other alert asserted silent): %v\n%s",
							v, tf.Path, v, err, out)
					}
				})
			}
		})
	}
}

// strictVersion returns the test file as Prometheus version runs it: rule_files made absolute, the
// assertions of other versions left out and, per test group, empty exp_alerts for every alert the
// group never asserts firing under version, at every evaluation up to its last eval_time.
func strictVersion(t *testing.T, tf testFile, alerts []string, version int) []byte {
	t.Helper()
	b, err := os.ReadFile(tf.Path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Dir(tf.Path))
	if err != nil {
		t.Fatal(err)
	}
	var files []any
	for _, f := range tf.RuleFiles {
		if !filepath.IsAbs(f) {
			f = filepath.Join(abs, f)
		}
		files = append(files, f)
	}
	doc["rule_files"] = files
	groups := doc["tests"].([]any)
	for i, g := range tf.Groups {
		fires := map[string]bool{}
		var last time.Duration
		gm := groups[i].(map[string]any)
		all, _ := gm["alert_rule_test"].([]any)
		var extra []any
		for j, a := range g.AlertRuleTest {
			if !under(a.Only, version) {
				continue
			}
			extra = append(extra, all[j])
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
			last = max(last, a.at(t, tf.Path))
		}
		if exprs, ok := gm["promql_expr_test"].([]any); ok {
			var kept []any
			for j, e := range g.ExprTests {
				if under(e.Only, version) {
					kept = append(kept, exprs[j])
				}
			}
			gm["promql_expr_test"] = kept
		}
		for _, name := range alerts {
			if fires[name] {
				continue
			}
			for at := time.Duration(0); at <= last; at += evalInterval {
				extra = append(extra, map[string]any{
					"eval_time": model.Duration(at).String(), "alertname": name, "exp_alerts": []any{},
				})
			}
		}
		gm["alert_rule_test"] = extra
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTestFileShape checks what every replay shares: all rule files loaded, a 15 s scrape and
// evaluation interval, and the header that says what the file replays.
func TestTestFileShape(t *testing.T) {
	for _, tf := range loadTests(t) {
		if len(tf.RuleFiles) != 1 || tf.RuleFiles[0] != "../*.yml" {
			t.Errorf("%s: rule_files must be [../*.yml], so every alert is checked in every replay", tf.Path)
		}
		if tf.EvaluationInterval != "15s" {
			t.Errorf("%s: evaluation_interval %q, want 15s", tf.Path, tf.EvaluationInterval)
		}
		for _, g := range tf.Groups {
			if g.Interval != "15s" {
				t.Errorf("%s %q: interval %q, want 15s (a 15 s scrape)", tf.Path, g.Name, g.Interval)
			}
			if g.Name == "" {
				t.Errorf("%s: a test group without a name", tf.Path)
			}
			for _, a := range g.AlertRuleTest {
				if a.Only != 0 && !contains(promtool.Versions, a.Only) {
					t.Errorf("%s %q: %s at %s is for Prometheus %d only, which the replays do not run under", tf.Path, g.Name, a.Alertname, a.EvalTime, a.Only)
				}
			}
			for _, e := range g.ExprTests {
				if e.Only != 0 && !contains(promtool.Versions, e.Only) {
					t.Errorf("%s %q: an expression test is for Prometheus %d only, which the replays do not run under", tf.Path, g.Name, e.Only)
				}
			}
		}
		switch {
		case tf.Incident != 0 && tf.Baseline:
			t.Errorf("%s: both an incident and a baseline", tf.Path)
		case tf.Incident != 0:
			if tf.Title == "" || tf.Failure == 0 || tf.FailureText == "" || len(tf.Lead) == 0 || !tf.HasClock {
				t.Errorf("%s: an incident replay needs '# incident: N title', '# failure: <eval time> <what>', '# lead: Alert' and '# clock: HH:MM:SS'", tf.Path)
			}
			if len(tf.Groups) != 1 {
				t.Errorf("%s: an incident replay is one timeline (one test group), has %d", tf.Path, len(tf.Groups))
			}
			if tf.AfterTheFact != "" && tf.DelayBound != 0 {
				t.Errorf("%s: after-the-fact and detection-delay exclude each other", tf.Path)
			}
		case tf.Baseline:
			for _, g := range tf.Groups {
				for _, a := range g.AlertRuleTest {
					if len(a.ExpAlerts) > 0 {
						t.Errorf("%s: baseline %q asserts %s firing", tf.Path, g.Name, a.Alertname)
					}
				}
			}
		}
	}
}

var (
	camelCase = regexp.MustCompile(`^[A-Z][a-zA-Z0-9]*$`)
	// level:metric:operations, lower case (Prometheus' recording rule naming).
	recordName  = regexp.MustCompile(`^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z0-9_]+$`)
	valueInDesc = regexp.MustCompile(`\$value\s*\|\s*(humanize|humanizePercentage|humanizeDuration|humanize1024)\s*}}`)
	heading     = regexp.MustCompile(`^#{1,6} +(.+?) *$`)
)

// TestRuleConventions checks every rule: names, labels, annotations, the runbook section, the
// comment that says where each threshold comes from, and that every metric an expression reads
// is documented.
func TestRuleConventions(t *testing.T) {
	doc, err := metricsdoc.Read("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	checkRules(t, loadRules(t), doc, otherExporterMetrics(t), runbookAnchors(t))
}

func checkRules(t reporter, rules []rule, doc map[string]metricsdoc.Family, other, anchors map[string]bool) {
	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	seen := map[string]bool{}
	for _, r := range rules {
		where := fmt.Sprintf("%s: %s", r.File, r.name())
		if seen[r.name()] && r.Alert != "" {
			t.Errorf("%s: defined twice", where)
		}
		seen[r.name()] = true
		names, err := selectors.MetricNames(r.Expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		onlyInfo := len(names) > 0
		for _, n := range names {
			f, ok := metricsdoc.Lookup(doc, n)
			switch {
			case ok:
				onlyInfo = onlyInfo && f.Type == "info"
			case recorded[n], other[n]:
				onlyInfo = false
			default:
				t.Errorf("%s reads %s, which neither docs/metrics.md, a recording rule nor docs/alerts.md (other exporters) defines", where, n)
			}
		}
		if r.Record != "" {
			if !recordName.MatchString(r.Record) {
				t.Errorf("%s: recording rule name is not level:metric:operations", where)
			}
			continue
		}
		if !camelCase.MatchString(r.Alert) {
			t.Errorf("%s: alert name is not CamelCase", where)
		}
		switch r.Labels["severity"] {
		case "info", "warning", "critical":
		default:
			t.Errorf("%s: severity %q, want info, warning or critical", where, r.Labels["severity"])
		}
		if s := r.Annotations["summary"]; s == "" || !strings.HasSuffix(s, ".") || strings.Contains(s, "{{") {
			t.Errorf("%s: summary %q: want a plain sentence", where, s)
		}
		d := r.Annotations["description"]
		if onlyInfo {
			if !strings.Contains(d, "$labels.") {
				t.Errorf("%s: the description of an alert on an info metric must state the label values", where)
			}
		} else if !valueInDesc.MatchString(d) {
			t.Errorf("%s: the description must state the value with its unit ($value | humanize, humanizePercentage, humanizeDuration or humanize1024)", where)
		}
		anchor := strings.ToLower(r.Alert)
		if r.Annotations["runbook_url"] != runbookURL+anchor {
			t.Errorf("%s: runbook_url %q, want %s", where, r.Annotations["runbook_url"], runbookURL+anchor)
		}
		if !anchors[anchor] {
			t.Errorf("%s: docs/runbooks.md has no section %q", where, r.Alert)
		}
		if !strings.Contains(r.Comment, "Threshold:") {
			t.Errorf("%s: the comment above the rule must say where its threshold comes from (Threshold: …)", where)
		}
		if r.For != "" && !strings.Contains(r.Comment, "for: ") {
			t.Errorf("%s: the comment above the rule must say why for: is %s", where, r.For)
		}
	}
}

// runbookAnchors returns the GitHub anchors of the headings of docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if m := heading.FindStringSubmatch(line); m != nil && !fenced {
			out[githubAnchor(m[1])] = true
		}
	}
	return out
}

// githubAnchor is the id GitHub gives a Markdown heading: lower case, punctuation other than
// '-' and '_' dropped, spaces to '-'.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

var otherMetricRow = regexp.MustCompile("^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| [^|]*\\S[^|]* \\|")

// otherExporterMetrics returns the metrics of other exporters that docs/alerts.md names (with
// their source) between its other-metrics markers.
func otherExporterMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range strings.Split(section(t, readAlertsDoc(t), "other-metrics"), "\n") {
		if m := otherMetricRow.FindStringSubmatch(line); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// TestAlertCoverage counts, for every alert, the test groups in which it is asserted firing and
// the groups in which it is only asserted silent. Each alert needs both, and a silent group must
// feed every metric the alert reads (through recording rules too): silence on missing data proves
// nothing.
func TestAlertCoverage(t *testing.T) {
	checkCoverage(t, loadRules(t), loadTests(t))
}

func checkCoverage(t reporter, rules []rule, tests []testFile) {
	for _, v := range promtool.Versions {
		checkCoverageUnder(versioned{t, v}, rules, forVersion(tests, v))
	}
}

// versioned adds the Prometheus version to what a check reports.
type versioned struct {
	reporter
	version int
}

func (r versioned) Errorf(format string, args ...any) {
	r.reporter.Errorf(format+" (Prometheus %d)", append(args, r.version)...)
}

// forVersion returns the tests with the alert assertions of other Prometheus versions left out.
func forVersion(tests []testFile, version int) []testFile {
	out := make([]testFile, len(tests))
	for i, tf := range tests {
		tf.Groups = append([]testGroup(nil), tf.Groups...)
		for j, g := range tf.Groups {
			var kept []alertTest
			for _, a := range g.AlertRuleTest {
				if under(a.Only, version) {
					kept = append(kept, a)
				}
			}
			tf.Groups[j].AlertRuleTest = kept
		}
		out[i] = tf
	}
	return out
}

// checkCoverageUnder is checkCoverage for the assertions of one Prometheus version.
func checkCoverageUnder(t reporter, rules []rule, tests []testFile) {
	byRecord := map[string]string{}
	for _, r := range rules {
		if r.Record != "" {
			byRecord[r.Record] = r.Expr
		}
	}
	type count struct{ firing, silent []string }
	counts := map[string]*count{}
	for _, r := range rules {
		if r.Alert != "" {
			counts[r.Alert] = &count{}
		}
	}
	for _, tf := range tests {
		for _, g := range tf.Groups {
			inputs := map[string]bool{}
			for _, s := range g.InputSeries {
				name, _, _ := strings.Cut(s.Series, "{")
				inputs[strings.TrimSpace(name)] = true
			}
			firing, silent := map[string]bool{}, map[string]bool{}
			for _, a := range g.AlertRuleTest {
				if _, ok := counts[a.Alertname]; !ok {
					t.Errorf("%s %q: asserts %s, which no rule file defines", tf.Path, g.Name, a.Alertname)
					continue
				}
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
			where := fmt.Sprintf("%s %q", tf.Path, g.Name)
			for name := range firing {
				counts[name].firing = append(counts[name].firing, where)
			}
			for name := range silent {
				if firing[name] {
					continue
				}
				var expr string
				for _, r := range rules {
					if r.Alert == name {
						expr = r.Expr
					}
				}
				for _, m := range baseMetrics(expr, byRecord) {
					if !inputs[m] {
						t.Errorf("%s asserts %s silent without any %s series: silence on missing data proves nothing", where, name, m)
					}
				}
				counts[name].silent = append(counts[name].silent, where)
			}
		}
	}
	for name, c := range counts {
		if len(c.firing) == 0 {
			t.Errorf("%s: no test group asserts it firing", name)
		}
		if len(c.silent) == 0 {
			t.Errorf("%s: no test group in which it does not fire asserts it silent", name)
		}
	}
}

// baseMetrics returns the exported metric names an expression reads, following recording rules.
// An expression that does not parse reads nothing here; TestRuleConventions reports it.
func baseMetrics(expr string, byRecord map[string]string) []string {
	names, _ := selectors.MetricNames(expr)
	var out []string
	for _, n := range names {
		if e, ok := byRecord[n]; ok {
			out = append(out, baseMetrics(e, byRecord)...)
		} else {
			out = append(out, n)
		}
	}
	return out
}

// leadRow is one line of the lead-time table.
type leadRow struct {
	tf       testFile
	alert    string
	severity string
	fired    map[int]time.Duration // by Prometheus version, eval time of the first firing evaluation
}

// replayLeads finds, in every incident replay, when each alert it asserts firing first fires under
// each Prometheus version: the earliest eval_time asserting it firing under that version, which
// must come with an assertion that it was silent one evaluation earlier (so the replay pins the
// moment, not a later one). An incident may have several replays, each a setting of its own (a
// host, a container) under its own title.
func replayLeads(t reporter, rules []rule, tests []testFile) (rows []leadRow, incidents map[int][]testFile) {
	severity := map[string]string{}
	for _, r := range rules {
		severity[r.Alert] = r.Labels["severity"]
	}
	incidents = map[int][]testFile{}
	for _, tf := range tests {
		if tf.Incident == 0 {
			continue
		}
		for _, prev := range incidents[tf.Incident] {
			if prev.Title == tf.Title {
				t.Errorf("incident %d replayed twice under one title: %s and %s", tf.Incident, prev.Path, tf.Path)
			}
		}
		incidents[tf.Incident] = append(incidents[tf.Incident], tf)
		if len(tf.Groups) == 0 {
			continue
		}
		byAlert := map[string]*leadRow{}
		var order []string
		for _, v := range promtool.Versions {
			first := map[string]time.Duration{}
			silentAt := map[string]map[time.Duration]bool{}
			for _, a := range tf.Groups[0].AlertRuleTest {
				if !under(a.Only, v) {
					continue
				}
				at := a.at(t, tf.Path)
				if len(a.ExpAlerts) == 0 {
					if silentAt[a.Alertname] == nil {
						silentAt[a.Alertname] = map[time.Duration]bool{}
					}
					silentAt[a.Alertname][at] = true
					continue
				}
				if f, ok := first[a.Alertname]; !ok || at < f {
					first[a.Alertname] = at
				}
			}
			for alert, f := range first {
				if !silentAt[alert][f-evalInterval] {
					t.Errorf("%s: %s is first asserted firing at %s; assert it silent at %s too, so the replay pins when it fires (Prometheus %d)",
						tf.Path, alert, model.Duration(f), model.Duration(f-evalInterval), v)
				}
				if byAlert[alert] == nil {
					byAlert[alert] = &leadRow{tf: tf, alert: alert, severity: severity[alert], fired: map[int]time.Duration{}}
					order = append(order, alert)
				}
				byAlert[alert].fired[v] = f
			}
			for _, l := range tf.Lead {
				f, ok := first[l]
				switch {
				case !ok:
					t.Errorf("%s: lead alert %s is never asserted firing (Prometheus %d)", tf.Path, l, v)
				case tf.DelayBound != 0 && f < tf.Failure:
					t.Errorf("%s: lead alert %s fires at %s, before the failure at %s: a lead, not a detection delay; remove the detection-delay line (Prometheus %d)",
						tf.Path, l, model.Duration(f), model.Duration(tf.Failure), v)
				case tf.DelayBound != 0 && f-tf.Failure > tf.DelayBound:
					t.Errorf("%s: lead alert %s fires %s after the failure, later than the detection-delay bound of %s (Prometheus %d)",
						tf.Path, l, model.Duration(f-tf.Failure), model.Duration(tf.DelayBound), v)
				case tf.AfterTheFact == "" && tf.DelayBound == 0 && f >= tf.Failure:
					t.Errorf("%s: lead alert %s fires at %s, not before the failure at %s (Prometheus %d)",
						tf.Path, l, model.Duration(f), model.Duration(tf.Failure), v)
				}
			}
		}
		for _, alert := range order {
			rows = append(rows, *byAlert[alert])
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].tf.Incident != rows[j].tf.Incident {
			return rows[i].tf.Incident < rows[j].tf.Incident
		}
		if a, b := rows[i].earliest(), rows[j].earliest(); a != b {
			return a < b
		}
		return rows[i].alert < rows[j].alert
	})
	return rows, incidents
}

// earliest is the first firing under any version.
func (r leadRow) earliest() time.Duration {
	e := time.Duration(-1)
	for _, f := range r.fired {
		if e < 0 || f < e {
			e = f
		}
	}
	return e
}

// TestIncidentsReplayed checks that every incident has a replay, or a reason in pendingIncidents.
func TestIncidentsReplayed(t *testing.T) {
	_, incidents := replayLeads(t, loadRules(t), loadTests(t))
	for n := 1; n <= numIncidents; n++ {
		_, replayed := incidents[n]
		_, pending := pendingIncidents[n]
		switch {
		case replayed && pending:
			t.Errorf("incident %d has a replay: remove it from pendingIncidents", n)
		case !replayed && !pending:
			t.Errorf("incident %d has no replay in alerts/tests/", n)
		}
	}
}

// TestAlertsDoc checks that the generated tables of docs/alerts.md match the replays; -update
// rewrites them.
func TestAlertsDoc(t *testing.T) {
	rows, incidents := replayLeads(t, loadRules(t), loadTests(t))
	doc := readAlertsDoc(t)
	want := replaceSection(t, doc, "lead-times", leadTable(rows, incidents))
	want = replaceSection(t, want, "baselines", baselineTable(t))
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile("../docs/alerts.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/alerts.md does not match the replays in alerts/tests/; run `make rules-doc` (cd tools && go test ./alerts -run TestAlertsDoc -update)")
}

func readAlertsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func markers(name string) (string, string) {
	return "<!-- " + name + ":begin -->\n", "<!-- " + name + ":end -->"
}

func section(t *testing.T, doc, name string) string {
	t.Helper()
	begin, end := markers(name)
	_, rest, ok1 := strings.Cut(doc, begin)
	body, _, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("docs/alerts.md has no %s markers", name)
	}
	return body
}

func replaceSection(t *testing.T, doc, name, body string) string {
	t.Helper()
	old := section(t, doc, name)
	begin, end := markers(name)
	return strings.Replace(doc, begin+old+end, begin+body+end, 1)
}

func leadTable(rows []leadRow, incidents map[int][]testFile) string {
	var b bytes.Buffer
	b.WriteString("| Incident | Alert | Severity | Fired in the replay | Failure moment | Lead |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for n := 1; n <= numIncidents; n++ {
		if reason, ok := pendingIncidents[n]; ok {
			fmt.Fprintf(&b, "| %d | — | — | — | — | no replay yet: %s |\n", n, reason)
			continue
		}
		for _, tf := range incidents[n] {
			first := true
			for _, r := range rows {
				if r.tf.Path != tf.Path {
					continue
				}
				fired := perVersion(r.fired, func(f time.Duration) string { return fmtClock(tf.Clock + f) })
				leadText := perVersion(r.fired, func(f time.Duration) string {
					switch lead := tf.Failure - f; {
					case lead > 0:
						return fmtDuration(lead)
					case lead == 0:
						return "0 (at the failure)"
					default:
						return fmtDuration(-lead) + " after"
					}
				})
				switch {
				case tf.AfterTheFact != "":
					leadText += "; **after the fact** " + tf.AfterTheFact
				case tf.DelayBound != 0 && contains(tf.Lead, r.alert):
					leadText += fmt.Sprintf("; **detection delay** (bound %s): %s", fmtDuration(tf.DelayBound), tf.DelayText)
				}
				name := "`" + r.alert + "`"
				if contains(tf.Lead, r.alert) {
					name = "**" + name + "**"
				}
				incident, failure := "", ""
				if first {
					incident = fmt.Sprintf("%d %s ([replay](../alerts/%s))", n, tf.Title, filepath.ToSlash(tf.Path))
					failure = fmtClock(tf.Clock+tf.Failure) + " " + tf.FailureText
					first = false
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n",
					incident, name, r.severity, fired, failure, leadText)
			}
		}
	}
	return b.String()
}

// perVersion renders a figure that may differ between Prometheus versions: once where every version
// agrees, else "2.x: …; 3.x: …", a version that never fires it as "never".
func perVersion(fired map[int]time.Duration, text func(time.Duration) string) string {
	var parts []string
	same := true
	for i, v := range promtool.Versions {
		s := "never"
		if f, ok := fired[v]; ok {
			s = text(f)
		}
		same = same && (i == 0 || fired[v] == fired[promtool.Versions[0]])
		parts = append(parts, fmt.Sprintf("%d.x: %s", v, s))
	}
	if same && len(fired) == len(promtool.Versions) {
		return text(fired[promtool.Versions[0]])
	}
	return strings.Join(parts, "; ")
}

func baselineTable(t *testing.T) string {
	var b bytes.Buffer
	b.WriteString("| Baseline | Replayed | Length |\n|---|---|---|\n")
	for _, tf := range loadTests(t) {
		if !tf.Baseline {
			continue
		}
		var last time.Duration
		for _, g := range tf.Groups {
			for _, a := range g.AlertRuleTest {
				last = max(last, a.at(t, tf.Path))
			}
		}
		fmt.Fprintf(&b, "| [%s](../alerts/%s) | %s | %s |\n", strings.TrimSuffix(filepath.Base(tf.Path), ".yml"),
			filepath.ToSlash(tf.Path), tf.Title, fmtDuration(last))
	}
	return b.String()
}

func contains[T comparable](list []T, s T) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fmtDuration prints 2m15s, 4m, 45s, 1h10m.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func fmtClock(d time.Duration) string {
	d %= 24 * time.Hour
	return fmt.Sprintf("%02d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}
