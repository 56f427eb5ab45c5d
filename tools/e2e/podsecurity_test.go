package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// TestKustomizePodSecurity evaluates the DaemonSet's pod, alone and with
// the components that change it, with the Pod Security Admission library
// (the checks the API server runs) at the baseline level, and checks the
// docs' claim: the pod needs the privileged level, for the host paths and
// CAP_SYSLOG (and, with the host network, for that), and the namespace
// label the docs give says privileged.
func TestKustomizePodSecurity(t *testing.T) {
	const dir = "deploy/kubernetes"
	const label = "pod-security.kubernetes.io/enforce=privileged"
	for _, doc := range []string{dir + "/kustomization.yaml", "docs/kubernetes.md", "README.md"} {
		if b, err := os.ReadFile(doc); err != nil || !strings.Contains(string(b), label) {
			t.Errorf("%s does not give the namespace label %s (%v)", doc, label, err)
		}
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	baseline := api.LevelVersion{Level: api.LevelBaseline, Version: api.LatestVersion()}
	for _, c := range []struct {
		components []string
		refused    []string // baseline's forbidden reasons, sorted
	}{
		{nil, []string{"hostPath volumes", "non-default capabilities"}},
		{[]string{"hostnetwork"}, []string{"host namespaces", "hostPath volumes", "hostPort", "non-default capabilities"}},
		{[]string{"dns"}, []string{"host namespaces", "hostPath volumes", "non-default capabilities"}},
	} {
		objs := kustomize(t, dir)
		if c.components != nil {
			objs = withComponents(t, dir, c.components...)
		}
		pod := onlyObject[*appsv1.DaemonSet](t, objs).Spec.Template
		var refused []string
		for _, r := range eval.EvaluatePod(baseline, &pod.ObjectMeta, &pod.Spec) {
			if !r.Allowed {
				refused = append(refused, r.ForbiddenReason)
				t.Logf("components %v: baseline refuses %s: %s", c.components, r.ForbiddenReason, r.ForbiddenDetail)
			}
		}
		slices.Sort(refused)
		if !slices.Equal(refused, c.refused) {
			t.Errorf("components %v: baseline refuses %q, want %q (what the docs say the pod needs privileged for)",
				c.components, refused, c.refused)
		}
	}
}
