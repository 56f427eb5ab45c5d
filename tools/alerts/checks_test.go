package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/metricsdoc"
	"github.com/stall-exporter/stall_exporter/tools/internal/promtool"
)

// collected gathers what the checks report, for tests of the checks themselves.
type collected []string

func (c *collected) Errorf(format string, args ...any) { *c = append(*c, fmt.Sprintf(format, args...)) }

func (c collected) expect(t *testing.T, want ...string) {
	t.Helper()
	all := strings.Join(c, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("no problem reported mentioning %q; reported:\n%s", w, all)
		}
	}
}

// TestChecksCatchMistakes feeds the convention, coverage and lead checks rules and replays with
// the mistakes they exist for, and expects each to be reported.
func TestChecksCatchMistakes(t *testing.T) {
	doc, err := metricsdoc.Read("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	bad := []rule{
		{File: "x.yml", Alert: "dirty_pages", Expr: "stall_vm_dirty_bytes > 1 and stall_vm_dirty_pages > 0", For: "5m",
			Labels:      map[string]string{"severity": "page"},
			Annotations: map[string]string{"summary": "{{ $labels.instance }}", "description": "dirty: {{ $value }}", "runbook_url": "https://example.org/"}},
		{File: "x.yml", Record: "dirty_ratio", Expr: "stall_vm_dirty_throttle_ratio"},
	}
	var got collected
	checkRules(&got, bad, doc, map[string]bool{}, map[string]bool{})
	got.expect(t, "not CamelCase", `severity "page"`, "plain sentence", "state the value with its unit",
		"runbook_url", "has no section", "Threshold:", "why for: is 5m", "reads stall_vm_dirty_pages", "level:metric:operations")

	rules := []rule{
		{Alert: "A", Expr: "instance:x:ratio > 1"},
		{Record: "instance:x:ratio", Expr: "stall_vm_dirty_throttle_ratio"},
		{Alert: "B", Expr: "stall_vm_dirty_bytes > 1"},
	}
	firing := alertTest{EvalTime: "5m", Alertname: "A"}
	firing.ExpAlerts = append(firing.ExpAlerts, struct {
		ExpLabels      map[string]string `yaml:"exp_labels"`
		ExpAnnotations map[string]string `yaml:"exp_annotations"`
	}{})
	tests := []testFile{{
		Path: "tests/incident-9.yml", Incident: 9, Failure: 4 * time.Minute, Lead: []string{"A", "C"},
		Groups: []testGroup{
			{Name: "fires", AlertRuleTest: []alertTest{firing}},
			{Name: "silent without data", AlertRuleTest: []alertTest{{EvalTime: "5m", Alertname: "A"}}},
		},
	}}
	got = nil
	checkCoverage(&got, rules, tests)
	got.expect(t, `asserts A silent without any stall_vm_dirty_throttle_ratio series`,
		"B: no test group asserts it firing", "B: no test group in which it does not fire")

	got = nil
	replayLeads(&got, rules, tests)
	got.expect(t, "assert it silent at 4m45s too", "lead alert A fires at 5m, not before the failure at 4m",
		"lead alert C is never asserted firing")

	// A detection delay: the lead alert must fire at or after the failure, within the bound.
	silentBefore := alertTest{EvalTime: "4m45s", Alertname: "A"}
	delayed := func(failure, bound time.Duration) []testFile {
		return []testFile{{
			Path: "tests/incident-9.yml", Incident: 9, Failure: failure, Lead: []string{"A"},
			DelayBound: bound, DelayText: "the sign is the failure",
			Groups: []testGroup{{Name: "storm", AlertRuleTest: []alertTest{silentBefore, firing}}},
		}}
	}
	got = nil
	replayLeads(&got, rules, delayed(4*time.Minute, 2*time.Minute))
	if len(got) != 0 {
		t.Errorf("a lead alert 1m after the failure, within a 2m detection-delay bound, was reported: %v", got)
	}
	got = nil
	replayLeads(&got, rules, delayed(6*time.Minute, 2*time.Minute))
	got.expect(t, "lead alert A fires at 5m, before the failure at 6m: a lead, not a detection delay")
	got = nil
	replayLeads(&got, rules, delayed(2*time.Minute, 2*time.Minute))
	got.expect(t, "lead alert A fires 3m after the failure, later than the detection-delay bound of 2m")

	// One version's onset: each version's first firing needs its own silence one evaluation
	// earlier, a version that never fires an alert fails the coverage, and the lead table gives
	// both times.
	only := func(a alertTest, v int) alertTest { a.Only = v; return a }
	later := firing
	later.EvalTime = "5m15s"
	perVersionTests := []testFile{{
		Path: "tests/incident-9.yml", Incident: 9, Failure: 6 * time.Minute, Lead: []string{"A"},
		Groups: []testGroup{{Name: "storm", InputSeries: inputs("stall_vm_dirty_throttle_ratio", "stall_vm_dirty_bytes"),
			AlertRuleTest: []alertTest{silentBefore, only(firing, 2), later,
				only(alertTest{EvalTime: "5m", Alertname: "B"}, 3), only(firing2(firing, "B"), 2)}}},
	}}
	got = nil
	rows, _ := replayLeads(&got, rules, perVersionTests)
	got.expect(t, "A is first asserted firing at 5m15s; assert it silent at 5m too, so the replay pins when it fires (Prometheus 3)")
	if len(rows) != 2 || rows[0].fired[2] != 5*time.Minute || rows[0].fired[3] != 5*time.Minute+15*time.Second {
		t.Errorf("replayLeads per version: got %+v, want A at 5m under 2 and 5m15s under 3", rows)
	}
	if s := perVersion(rows[0].fired, func(d time.Duration) string { return d.String() }); s != "2.x: 5m0s; 3.x: 5m15s" {
		t.Errorf("perVersion: %q", s)
	}
	got = nil
	checkCoverage(&got, rules, perVersionTests)
	got.expect(t, "B: no test group asserts it firing (Prometheus 3)")

	got = nil
	replayLeads(&got, rules, []testFile{{
		Path: "tests/incident-9.yml", Incident: 9, Failure: 6 * time.Minute, Lead: []string{"A"},
		Groups: []testGroup{{Name: "storm", AlertRuleTest: []alertTest{silentBefore, firing}}},
	}})
	if len(got) != 0 {
		t.Errorf("a replay whose assertions hold for both versions was reported: %v", got)
	}
}

// firing2 is the firing assertion a for another alert.
func firing2(a alertTest, alert string) alertTest {
	a.Alertname = alert
	return a
}

// inputs is one input series of each metric.
func inputs(names ...string) []inputSeries {
	var out []inputSeries
	for _, n := range names {
		out = append(out, inputSeries{Series: n + `{instance="x"}`, Values: "0+0x20"})
	}
	return out
}

// TestStrictVersionCatchesUnexpectedAlerts checks that the generated assertions bite, under each
// Prometheus version: the incident-7 replay without its own assertions must fail, because its
// alerts fire unasserted.
func TestStrictVersionCatchesUnexpectedAlerts(t *testing.T) {
	var tf testFile
	for _, f := range loadTests(t) {
		if f.Incident == 7 {
			tf = f
		}
	}
	b, err := os.ReadFile(tf.Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _, _ := strings.Cut(string(b), "    alert_rule_test:")
	// One assertion of its own, which sets how far the generated ones reach.
	body += "    alert_rule_test:\n      - eval_time: 20m\n        alertname: RedisDown\n        exp_alerts: []\n"
	stripped := filepath.Join(t.TempDir(), "stripped.yml")
	if err := os.WriteFile(stripped, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs("*.yml")
	if err != nil {
		t.Fatal(err)
	}
	tf.Path, tf.RuleFiles = stripped, []string{rules}
	tf.Groups[0].AlertRuleTest = []alertTest{{EvalTime: "20m", Alertname: "RedisDown"}}
	var alerts []string
	for _, r := range loadRules(t) {
		if r.Alert != "" {
			alerts = append(alerts, r.Alert)
		}
	}
	for _, v := range promtool.Versions {
		t.Run(fmt.Sprintf("prometheus%d", v), func(t *testing.T) {
			bin := promtool.Require(t, v)
			p := filepath.Join(t.TempDir(), "strict.yml")
			if err := os.WriteFile(p, strictVersion(t, tf, alerts, v), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "test", "rules", p).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "RedisClientOutputBuffersGrowing") {
				t.Errorf("an unasserted alert did not fail the strict replay: %v\n%s", err, out)
			}
		})
	}
}
