package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Pod Security for both Kubernetes paths: the kustomize base here, the
// chart's configurations in TestHelmChart.

// podSecurityBaseline evaluates a pod template with the Pod Security
// Admission library (the checks the API server runs) at baseline, the level
// below privileged: the reasons it refuses the pod are why the pod needs
// privileged (at privileged every pod is admitted, so that level alone
// proves nothing). No reason means baseline admits it. Sorted.
func podSecurityBaseline(t *testing.T, pod corev1.PodTemplateSpec) []string {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelBaseline, Version: psaapi.LatestVersion()}
	res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec))
	slices.Sort(res.ForbiddenReasons)
	return res.ForbiddenReasons
}

// TestKustomizePodSecurity evaluates the DaemonSet's pod, alone and with
// the components that change it, at baseline, and checks the docs' claim:
// the pod needs the privileged level, for the host paths and CAP_SYSLOG
// (and, with the host network, for that), and the namespace label the docs
// give says privileged.
func TestKustomizePodSecurity(t *testing.T) {
	const dir = "deploy/kubernetes"
	const label = "pod-security.kubernetes.io/enforce=privileged"
	for _, doc := range []string{dir + "/kustomization.yaml", "docs/kubernetes.md", "README.md"} {
		if b, err := os.ReadFile(doc); err != nil || !strings.Contains(string(b), label) {
			t.Errorf("%s does not give the namespace label %s (%v)", doc, label, err)
		}
	}
	for _, c := range []struct {
		components []string
		refused    []string // baseline's forbidden reasons, sorted
	}{
		{nil, []string{"hostPath volumes", "non-default capabilities"}},
		{[]string{"hostnetwork"}, []string{"host namespaces", "hostPath volumes", "hostPort", "non-default capabilities"}},
		{[]string{"dns"}, []string{"host namespaces", "hostPath volumes", "non-default capabilities"}},
		{[]string{"writeback"}, []string{"forbidden AppArmor profile", "hostPath volumes", "non-default capabilities"}},
	} {
		objs := kustomize(t, dir)
		if c.components != nil {
			objs = withComponents(t, dir, c.components...)
		}
		pod := onlyObject[*appsv1.DaemonSet](t, objs).Spec.Template
		if got := podSecurityBaseline(t, pod); !slices.Equal(got, c.refused) {
			t.Errorf("components %v: baseline refuses %q, want %q (what the docs say the pod needs privileged for)",
				c.components, got, c.refused)
		}
	}
}
