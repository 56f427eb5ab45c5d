package prometheusrules

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

const (
	alertsDir = "../../alerts"
	generated = "../../deploy/kubernetes/prometheus-operator/prometheusrules.yaml"
)

// TestGenerated fails when the committed PrometheusRules differ from what the rule files render
// to: a rule changed in alerts/ and `make prometheusrules` not run.
func TestGenerated(t *testing.T) {
	want, err := Render(alertsDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of step with alerts/*.yml: run `make prometheusrules`", generated)
	}
}

// TestSameRules decodes each committed PrometheusRule and compares its spec with its rule file,
// both read as plain YAML (so a field lost or changed on the way through the operator's types
// shows), and runs `promtool check rules` on the specs.
func TestSameRules(t *testing.T) {
	promtool := collectortest.RequireTool(t, "promtool")
	b, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(alertsDir, "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")[1:] // after the header
	if len(docs) != len(files) {
		t.Fatalf("%d PrometheusRules for %d rule files", len(docs), len(files))
	}
	dir := t.TempDir()
	var specs []string
	for i, f := range files {
		var pr monitoringv1.PrometheusRule
		if err := yaml.UnmarshalStrict([]byte(docs[i]), &pr); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if pr.Kind != "PrometheusRule" || pr.APIVersion != "monitoring.coreos.com/v1" || pr.Name != Name(f) ||
			pr.Labels["app.kubernetes.io/name"] != "stall-exporter" || pr.Namespace != "" {
			t.Errorf("document %d: %s %s %s/%s labels %v: want PrometheusRule %s, labelled, without namespace",
				i, pr.APIVersion, pr.Kind, pr.Namespace, pr.Name, pr.Labels, Name(f))
		}
		spec, err := yaml.Marshal(pr.Spec)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fromSpec, fromFile map[string]any
		if err := yaml.Unmarshal(spec, &fromSpec); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(src, &fromFile); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromSpec, fromFile) {
			t.Errorf("%s: the PrometheusRule's groups differ from the file's", pr.Name)
		}
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, spec, 0o644); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, p)
	}
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, specs...)...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the PrometheusRules' groups: %v\n%s", err, out)
	}
}

// TestLoadStrict: a rule file with a key the operator's types lack is refused, rather than
// rendered without it.
func TestLoadStrict(t *testing.T) {
	f := filepath.Join(t.TempDir(), "typo.yml")
	rule := "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        fro: 5m\n"
	if err := os.WriteFile(f, []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(f); err == nil || !strings.Contains(err.Error(), "fro") {
		t.Errorf("Load of a rule with the key fro: %v, want an error naming it", err)
	}
}
