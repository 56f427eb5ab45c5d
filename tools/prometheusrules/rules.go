// Package prometheusrules renders the alerting and recording rules of alerts/*.yml as Prometheus
// Operator PrometheusRule objects (monitoring.coreos.com/v1), one per rule file, for the
// prometheus-operator component of deploy/kubernetes. alerts/*.yml stay the one source of truth:
// `make prometheusrules` (go generate) rewrites deploy/kubernetes/prometheus-operator/prometheusrules.yaml,
// and a test fails when the committed file differs from what Render makes of the rule files.
package prometheusrules

//go:generate go run ./generate ../../alerts ../../deploy/kubernetes/prometheus-operator/prometheusrules.yaml

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// header starts the rendered file: what it is, where it comes from, how to remake it.
const header = `# Generated from alerts/*.yml by tools/prometheusrules (make prometheusrules): do not edit.
# One PrometheusRule per rule file, with the file's groups unchanged; the comments that say why
# each threshold is what it is are in the rule files. No namespace: the kustomization sets it.
`

// Name is the PrometheusRule's name for a rule file: stall-exporter-<file name without .yml>.
func Name(file string) string {
	return "stall-exporter-" + strings.TrimSuffix(filepath.Base(file), ".yml")
}

// Load decodes one Prometheus rule file strictly (a key the operator's RuleGroup and Rule types
// do not have is an error, so a rule never loses a field on its way into a PrometheusRule) and
// returns its PrometheusRule: named by Name, labelled app.kubernetes.io/name=stall-exporter.
func Load(file string) (*monitoringv1.PrometheusRule, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(spec.Groups) == 0 {
		return nil, fmt.Errorf("%s: no rule groups", file)
	}
	return &monitoringv1.PrometheusRule{
		TypeMeta: metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   Name(file),
			Labels: map[string]string{"app.kubernetes.io/name": "stall-exporter"},
		},
		Spec: spec,
	}, nil
}

// Render returns the multi-document YAML of the PrometheusRules of every *.yml file directly in
// dir (alerts/), in file name order, after the generated-file header.
func Render(dir string) ([]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no rule files in %s", dir)
	}
	var out bytes.Buffer
	out.WriteString(header)
	for _, f := range files {
		pr, err := Load(f)
		if err != nil {
			return nil, err
		}
		b, err := yaml.Marshal(pr)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return out.Bytes(), nil
}
