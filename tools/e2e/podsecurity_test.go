package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// Pod Security for both Kubernetes paths: the kustomize base here, the
// chart's configurations in TestHelmChart.

// podSecurityBaseline evaluates a pod template with the Pod Security
// Admission library at baseline, the level below privileged: the reasons it
// refuses the pod are why the pod needs privileged (at privileged every pod
// is admitted, so that level alone proves nothing). No reason means
// baseline admits it.
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

// TestKustomizePodSecurity evaluates the kustomize base's pod, and its pod
// with each component switched on, with the Pod Security Admission library
// as TestHelmChart does the chart's: baseline refuses each for its host
// paths and capabilities (and the host network's namespace and port), so
// each needs privileged. The variants are kustomizations of their own over
// the base and its components, as a user's overlay would be.
func TestKustomizePodSecurity(t *testing.T) {
	// kustomize takes no absolute paths: the overlay and a copy of the base
	// side by side.
	tree := t.TempDir()
	if err := os.CopyFS(filepath.Join(tree, "kubernetes"), os.DirFS("deploy/kubernetes")); err != nil {
		t.Fatal(err)
	}
	const base = "../kubernetes"
	for _, c := range []struct {
		components []string
		want       []string
	}{
		{nil, []string{"hostPath volumes", "non-default capabilities"}},
		{[]string{"hostnetwork"}, []string{"host namespaces", "hostPath volumes", "hostPort", "non-default capabilities"}},
		{[]string{"dns"}, []string{"host namespaces", "hostPath volumes", "non-default capabilities"}},
	} {
		overlay := filepath.Join(tree, "overlay-"+strings.Join(append([]string{"base"}, c.components...), "-"))
		if err := os.Mkdir(overlay, 0o755); err != nil {
			t.Fatal(err)
		}
		k := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": []string{base}}
		var comps []string
		for _, name := range c.components {
			comps = append(comps, base+"/"+name)
		}
		if comps != nil {
			k["components"] = comps
		}
		b, err := yaml.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		ds := onlyObject[*appsv1.DaemonSet](t, kustomize(t, overlay))
		if got := podSecurityBaseline(t, ds.Spec.Template); !slices.Equal(got, c.want) {
			t.Errorf("components %v: Pod Security baseline refuses the kustomize pod for %q, want %q", c.components, got, c.want)
		}
	}
}
