package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
	"github.com/stall-exporter/stall_exporter/tools/internal/promtool"
)

// alertRule is one rule of an alerts/*.yml file, as far as the deploy and
// end-to-end tests read it.
type alertRule struct {
	Alert  string            `json:"alert"`
	Record string            `json:"record"`
	Expr   string            `json:"expr"`
	Labels map[string]string `json:"labels"`
}

// alertRules reads every rule of every alerts/*.yml file (the rule files;
// alerts/tests holds promtool's replays). No file yet is no rule.
func alertRules(t *testing.T) (files []string, rules []alertRule) {
	t.Helper()
	files, err := filepath.Glob("alerts/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []struct {
				Rules []alertRule `json:"rules"`
			} `json:"groups"`
		}
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			rules = append(rules, g.Rules...)
		}
	}
	return files, rules
}

// promSetup says how deployPromConfig adapts deploy/prometheus/prometheus.yml
// to a test run. Empty fields keep the file's values.
type promSetup struct {
	exporter string              // host:port replacing the example's localhost:29110
	targets  map[string][]string // /probe module → targets replacing the example's
	rulesDir string              // directory replacing the rule_files directory
	interval string              // scrape and evaluation interval (and scrape timeout)
	node     string              // node name the Kubernetes job's pod reports
	noAlerts bool                // drop the alerting section (no Alertmanager runs)
}

// The Kubernetes pod the stall-kubernetes job would discover, as the
// labels Prometheus' pod discovery gives it.
func podMetaLabels(node string) map[string]any {
	return map[string]any{
		"__meta_kubernetes_namespace":                        "monitoring",
		"__meta_kubernetes_pod_name":                         "stall-exporter-test",
		"__meta_kubernetes_pod_node_name":                    node,
		"__meta_kubernetes_pod_label_app_kubernetes_io_name": "stall-exporter",
		"__meta_kubernetes_pod_container_port_name":          "metrics",
	}
}

// The shipped Prometheus configuration, and the Kubernetes job kept apart
// for Prometheus builds with Kubernetes discovery (pasted under its
// scrape_configs).
const (
	promConfigFile = "deploy/prometheus/prometheus.yml"
	promK8sJobFile = "deploy/prometheus/kubernetes-job.yml"
)

// deployPromConfig returns deploy/prometheus/prometheus.yml with the job of
// kubernetes-job.yml pasted in, adapted to a test run, and the scrape jobs
// it holds. Debian's Prometheus is built
// without Kubernetes discovery, so each kubernetes_sd_configs becomes a
// static target carrying the labels pod discovery would give the
// exporter's pod: the job's relabeling then runs for real. Everything else
// (jobs, paths, params, relabeling) is the file's own.
func deployPromConfig(t *testing.T, s promSetup) (config []byte, jobs []string) {
	t.Helper()
	var c map[string]any
	if err := yaml.Unmarshal(pastedPromConfig(t), &c); err != nil {
		t.Fatal(err)
	}
	if s.interval != "" {
		g, _ := c["global"].(map[string]any)
		g["scrape_interval"], g["scrape_timeout"], g["evaluation_interval"] = s.interval, s.interval, s.interval
	}
	if s.noAlerts {
		delete(c, "alerting")
	}
	if s.rulesDir != "" {
		files, _ := c["rule_files"].([]any)
		for i, f := range files {
			files[i] = filepath.Join(s.rulesDir, filepath.Base(f.(string)))
		}
	}
	scrapes, _ := c["scrape_configs"].([]any)
	for _, sc := range scrapes {
		job := sc.(map[string]any)
		jobs = append(jobs, job["job_name"].(string))
		static := func(targets []string, labels map[string]any) {
			entry := map[string]any{"targets": targets}
			if labels != nil {
				entry["labels"] = labels
			}
			job["static_configs"] = []any{entry}
		}
		params, _ := job["params"].(map[string]any)
		modules, _ := params["module"].([]any)
		switch {
		case job["kubernetes_sd_configs"] != nil:
			checkKubernetesSD(t, job)
			delete(job, "kubernetes_sd_configs")
			addr := s.exporter
			if addr == "" {
				addr = "localhost:29110"
			}
			node := s.node
			if node == "" {
				node = "node-1"
			}
			static([]string{addr}, podMetaLabels(node))
		case len(modules) == 1 && s.targets != nil:
			targets, ok := s.targets[modules[0].(string)]
			if !ok {
				t.Fatalf("job %v probes module %v, which the test has no target for", job["job_name"], modules[0])
			}
			static(targets, nil)
		case s.exporter != "" && len(modules) == 0:
			static([]string{s.exporter}, nil)
		}
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if s.exporter != "" {
		out = bytes.ReplaceAll(out, []byte("localhost:29110"), []byte(s.exporter))
	}
	return out, jobs
}

// pastedPromConfig returns prometheus.yml with kubernetes-job.yml pasted
// under its scrape_configs, as its comment tells a user to.
func pastedPromConfig(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	job, err := os.ReadFile(promK8sJobFile)
	if err != nil {
		t.Fatal(err)
	}
	const at = "\nscrape_configs:\n"
	if bytes.Count(b, []byte(at)) != 1 {
		t.Fatalf("%s has no scrape_configs: line to paste %s under", promConfigFile, promK8sJobFile)
	}
	return bytes.Replace(b, []byte(at), append([]byte(at), job...), 1)
}

// checkKubernetesSD decodes a job's kubernetes_sd_configs strictly into the
// fields of Prometheus' configuration reference (no promtool here can: see
// deployPromConfig), and checks that its keep rule selects the DaemonSet's
// pod label and port name.
func checkKubernetesSD(t *testing.T, job map[string]any) {
	t.Helper()
	raw, err := yaml.Marshal(job["kubernetes_sd_configs"])
	if err != nil {
		t.Fatal(err)
	}
	var sds []struct {
		Role           string `json:"role"`
		APIServer      string `json:"api_server"`
		KubeconfigFile string `json:"kubeconfig_file"`
		Namespaces     *struct {
			OwnNamespace bool     `json:"own_namespace"`
			Names        []string `json:"names"`
		} `json:"namespaces"`
		Selectors []struct {
			Role  string `json:"role"`
			Label string `json:"label"`
			Field string `json:"field"`
		} `json:"selectors"`
		AttachMetadata *struct {
			Node bool `json:"node"`
		} `json:"attach_metadata"`
	}
	if err := yaml.UnmarshalStrict(raw, &sds); err != nil {
		t.Fatalf("job %v: kubernetes_sd_configs: %v", job["job_name"], err)
	}
	roles := []string{"pod", "node", "service", "endpoints", "endpointslice", "ingress"}
	for _, sd := range sds {
		if !slices.Contains(roles, sd.Role) {
			t.Errorf("kubernetes_sd_configs role %q", sd.Role)
		}
		for _, sel := range sd.Selectors {
			if !slices.Contains(roles, sel.Role) || sel.Label != "app.kubernetes.io/name=stall-exporter" {
				t.Errorf("kubernetes_sd_configs selector %+v: want role pod and the DaemonSet's label", sel)
			}
		}
		if sd.Namespaces != nil && len(sd.Namespaces.Names) > 0 {
			t.Errorf("kubernetes_sd_configs namespaces %v: the pod label selects the DaemonSet's pods, in whichever namespace deploy/kubernetes/kustomization.yaml sets (the one place it is named)", sd.Namespaces.Names)
		}
	}
}

// The rule file layout of the docs: alerts/*.yml in a directory of their
// own beside prometheus.yml, which loads them by a path relative to itself.
const (
	rulesInstallDir = "rules/stall"
	rulesInstall    = "install -m 0644 alerts/*.yml /etc/prometheus/" + rulesInstallDir + "/"
)

// TestDeployConfigs checks the shipped Prometheus and Alertmanager
// configurations with the real promtool and amtool: prometheus.yml as it
// is under Prometheus 2 (Debian's) and 3, with its rule files (alerts/*.yml
// installed as the README and docs/alerts.md say, in rules/stall/ beside
// prometheus.yml, which the configuration loads as it is), and with
// kubernetes-job.yml pasted in under Prometheus 3 (Debian's 2.42 has no
// Kubernetes discovery); routing by severity for every alert the rules
// define, and inhibitions that name only those alerts.
func TestDeployConfigs(t *testing.T) {
	files, rules := alertRules(t)
	etc := t.TempDir() // stands for /etc/prometheus
	if err := os.MkdirAll(filepath.Join(etc, rulesInstallDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, rulesInstallDir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, doc := range []string{"README.md", "docs/alerts.md", "deploy/prometheus/prometheus.yml"} {
		if b, err := os.ReadFile(doc); err != nil || !strings.Contains(string(b), rulesInstall) {
			t.Errorf("%s does not install the rules with %q (%v)", doc, rulesInstall, err)
		}
	}
	_, jobs := deployPromConfig(t, promSetup{})
	for _, want := range []string{"stall", "stall-kubernetes", "stall-redis", "stall-rocketmq"} {
		if !slices.Contains(jobs, want) {
			t.Errorf("prometheus.yml and kubernetes-job.yml have no job %s (jobs %v)", want, jobs)
		}
	}
	shipped, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, name, bin string, cfg []byte) {
		t.Helper()
		path := filepath.Join(etc, "prometheus.yml")
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "check", "config", path).CombinedOutput()
		if err != nil {
			t.Errorf("%s: promtool check config: %v\n%s", name, err, out)
		}
		if n := strings.Count(string(out), " rules found"); n != len(files) {
			t.Errorf("%s: promtool checked %d rule files, want alerts/*.yml's %d:\n%s", name, n, len(files), out)
		}
	}
	for _, v := range promtool.Versions {
		t.Run(fmt.Sprintf("prometheus%d", v), func(t *testing.T) {
			bin := promtool.Require(t, v)
			check(t, promConfigFile, bin, shipped)
			if v >= 3 {
				check(t, promConfigFile+" with "+promK8sJobFile, bin, pastedPromConfig(t))
			}
		})
	}

	amtool := collectortest.RequireTool(t, "amtool")
	const am = "deploy/prometheus/alertmanager.yml"
	out, err := exec.Command(amtool, "check-config", am).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("amtool check-config: %v\n%s", err, out)
	}
	receiver := map[string]string{"critical": "pager", "warning": "chat", "info": "tickets"}
	route := func(labels ...string) string {
		args := append([]string{"config", "routes", "test", "--config.file=" + am}, labels...)
		out, err := exec.Command(amtool, args...).Output()
		if err != nil {
			t.Fatalf("amtool %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	for severity, want := range receiver {
		if got := route("alertname=Example", "severity="+severity); got != want {
			t.Errorf("severity %s routes to %q, want %q", severity, got, want)
		}
	}
	alerts := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		severity := r.Labels["severity"]
		want, ok := receiver[severity]
		if !ok {
			t.Errorf("alert %s has severity %q; Alertmanager routes critical, warning and info", r.Alert, severity)
			continue
		}
		if got := route("alertname="+r.Alert, "severity="+severity); got != want {
			t.Errorf("alert %s (%s) routes to %q, want %q", r.Alert, severity, got, want)
		}
	}
	checkInhibitions(t, am, alerts)
}

// checkInhibitions fails when an inhibition of the Alertmanager
// configuration names an alert that no alerts/*.yml file defines.
func checkInhibitions(t *testing.T, path string, alerts map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		InhibitRules []struct {
			SourceMatchers []string          `json:"source_matchers"`
			TargetMatchers []string          `json:"target_matchers"`
			SourceMatch    map[string]string `json:"source_match"`
			TargetMatch    map[string]string `json:"target_match"`
		} `json:"inhibit_rules"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.InhibitRules) == 0 {
		t.Fatalf("%s has no inhibition", path)
	}
	alertname := regexp.MustCompile(`^\s*alertname\s*(=~|=)\s*"?([^"]*)"?\s*$`)
	for i, r := range c.InhibitRules {
		var names []string
		for _, m := range append(r.SourceMatchers, r.TargetMatchers...) {
			if sub := alertname.FindStringSubmatch(m); sub != nil {
				names = append(names, strings.Split(sub[2], "|")...)
			}
		}
		for _, m := range []map[string]string{r.SourceMatch, r.TargetMatch} {
			if n, ok := m["alertname"]; ok {
				names = append(names, n)
			}
		}
		for _, n := range names {
			if !alerts[n] {
				t.Errorf("inhibit rule %d names alert %s, which no alerts/*.yml defines", i, n)
			}
		}
	}
}

// TestSystemdUnit rates the unit's hardening with systemd-analyze (offline,
// as on a host without the unit installed), checks it with
// systemd-analyze verify, and checks the capabilities and the credential.
func TestSystemdUnit(t *testing.T) {
	analyze := collectortest.RequireTool(t, "systemd-analyze")
	const unit = "deploy/systemd/stall_exporter.service"
	out, err := exec.Command(analyze, "security", "--offline=true", "--threshold=30", unit).CombinedOutput()
	score := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || score == nil {
		t.Fatalf("systemd-analyze security rates the unit above 3.0 (or failed): %v\n%s", err, out)
	}
	t.Logf("systemd-analyze security: exposure %s", score[1])

	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string][]string{}
	for _, l := range strings.Split(string(text), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			settings[k] = append(settings[k], v)
		}
	}
	for key, want := range map[string]string{
		"CapabilityBoundingSet": "CAP_SYSLOG",
		"AmbientCapabilities":   "CAP_SYSLOG",
		"DynamicUser":           "yes",
		"NoNewPrivileges":       "yes",
		"LoadCredential":        "redis-password:/etc/stall_exporter/redis-password",
	} {
		if got := settings[key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %s", key, got, want)
		}
	}
	if exec := settings["ExecStart"]; len(exec) != 1 || !strings.Contains(exec[0], "--redis.password-file=%d/redis-password") {
		t.Errorf("ExecStart=%v does not read the credential (--redis.password-file=%%d/redis-password)", exec)
	}

	// verify needs the binary at ExecStart's path: point it at a built one.
	bin := e2etest.Build(t, ".")
	dir := t.TempDir()
	copyUnit := strings.ReplaceAll(string(text), "/usr/local/bin/stall_exporter", bin)
	path := filepath.Join(dir, "stall_exporter.service")
	if err := os.WriteFile(path, []byte(copyUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// decodeManifests decodes every document of a multi-document YAML stream
// strictly (an unknown or misspelt field is an error) into the Kubernetes
// API type of its kind.
func decodeManifests(t *testing.T, name string, data []byte) []any {
	t.Helper()
	var objs []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 Namespace":
			obj = &corev1.Namespace{}
		case "v1 ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 DaemonSet":
			obj = &appsv1.DaemonSet{}
		case "v1 ResourceQuota":
			obj = &corev1.ResourceQuota{}
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "monitoring.coreos.com/v1 PodMonitor":
			obj = &monitoringv1.PodMonitor{}
		case "monitoring.coreos.com/v1 ServiceMonitor":
			obj = &monitoringv1.ServiceMonitor{}
		case "monitoring.coreos.com/v1 Probe":
			obj = &monitoringv1.Probe{}
		case "monitoring.coreos.com/v1 PrometheusRule":
			obj = &monitoringv1.PrometheusRule{}
		default:
			t.Fatalf("%s document %d: unexpected %s %s", name, i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", name, i, meta.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// kustomize renders a kustomization directory with kustomize's own Go API
// (krusty, the engine of `kustomize build` and `kubectl kustomize`, on the
// real file system with its default load restrictions) and decodes the
// result strictly. No outside binary is needed.
func kustomize(t *testing.T, dir string) []any {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return decodeManifests(t, dir, out)
}

func onlyObject[T any](t *testing.T, objs []any) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T, found %d", zero, len(found))
	}
	return found[0]
}

// kustomization is what TestKubernetesManifests reads of deploy/kubernetes/kustomization.yaml.
type kustomization struct {
	Namespace string `json:"namespace"`
	Images    []struct {
		Name, NewName, NewTag string
	} `json:"images"`
}

// withComponents renders a copy of the kustomization directory dir with the
// components switched on as its comments say (the components: line and
// each name uncommented), in the order given.
func withComponents(t *testing.T, dir string, components ...string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "\n# components:\n") {
		t.Fatal("kustomization.yaml has no commented components: line to switch on")
	}
	list := ""
	for _, c := range components {
		line := "#   - " + c + "\n"
		if !strings.Contains(text, line) {
			t.Fatalf("kustomization.yaml has no commented component %s to switch on", c)
		}
		text = strings.Replace(text, line, "", 1)
		list += "  - " + c + "\n"
	}
	text = strings.Replace(text, "\n# components:\n", "\ncomponents:\n"+list, 1)
	variant := t.TempDir()
	if err := os.CopyFS(variant, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(variant, "kustomization.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, variant)
}

// allObjects returns every object of type T.
func allObjects[T any](objs []any) []T {
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// TestKubernetesManifests renders deploy/kubernetes, alone and with each of
// its components, with kustomize, decodes every manifest strictly into the
// API types, and checks what the deploy kit promises: the namespace set in
// one place and not owned, the release's image, IfNotPresent, Linux nodes
// only and no virtual ones, no NoExecute toleration, no fixed priority
// class, probes on a cheap path, its own service account, read-only host
// paths, resources, a headless Service; the prometheus-operator component's
// PodMonitor and PrometheusRules with the release label; the
// system-node-critical component's priority and quota.
func TestKubernetesManifests(t *testing.T) {
	const dir = "deploy/kubernetes"
	files, err := filepath.Glob(dir + "/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	patches, _ := filepath.Glob(dir + "/*/*.yaml")
	for _, f := range append(files, patches...) {
		if filepath.Base(f) == "kustomization.yaml" {
			continue // kustomize itself reads these, strictly
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, "-args.yaml") {
			checkAppendPatch(t, f, b, "/spec/template/spec/containers/0/args/-", "a flag to the args",
				func(v string) bool { return strings.HasPrefix(v, "--") })
			continue
		}
		if strings.HasSuffix(f, "-capabilities.yaml") {
			checkAppendPatch(t, f, b, "/spec/template/spec/containers/0/securityContext/capabilities/add/-", "a capability",
				func(v string) bool { return v != "" && strings.ToUpper(v) == v && !strings.HasPrefix(v, "CAP_") })
			continue
		}
		for _, o := range decodeManifests(t, f, b) {
			if m, ok := o.(metav1.Object); ok && m.GetNamespace() != "" {
				t.Errorf("%s: %s names namespace %s; kustomization.yaml sets it, in one place", f, m.GetName(), m.GetNamespace())
			}
		}
	}

	var kust kustomization
	b, err := os.ReadFile(dir + "/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil || len(kust.Images) != 1 || kust.Namespace == "" {
		t.Fatalf("kustomization.yaml: want one image entry and the namespace (the one place each is set): %v %+v", err, kust)
	}
	image := kust.Images[0].NewName + ":" + kust.Images[0].NewTag
	if want := "ghcr.io/stall-exporter/stall_exporter:" + releaseVersion(t); image != want {
		t.Errorf("image %s: want the release's, %s", image, want)
	}

	objs := kustomize(t, dir)
	if ns := allObjects[*corev1.Namespace](objs); len(ns) > 0 {
		t.Errorf("the base creates Namespace %s: kubectl delete -k would delete it with everything in it", ns[0].Name)
	}
	for _, o := range objs {
		if m := o.(metav1.Object); m.GetNamespace() != kust.Namespace {
			t.Errorf("%s in namespace %q, want the kustomization's %s", m.GetName(), m.GetNamespace(), kust.Namespace)
		}
	}
	ds := onlyObject[*appsv1.DaemonSet](t, objs)
	sa := onlyObject[*corev1.ServiceAccount](t, objs)
	svc := onlyObject[*corev1.Service](t, objs)
	pod := ds.Spec.Template
	c := pod.Spec.Containers[0]
	probeOK := func(p *corev1.Probe, path string) bool {
		return p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal == "metrics" && p.HTTPGet.Path == path && p.TimeoutSeconds >= 2
	}
	var noExecute []corev1.Toleration
	for _, tol := range pod.Spec.Tolerations {
		if tol.Effect != corev1.TaintEffectNoSchedule {
			noExecute = append(noExecute, tol)
		}
	}
	for _, ok := range []struct {
		what string
		ok   bool
	}{
		{"image " + c.Image + " is the kustomization's " + image, c.Image == image},
		{"imagePullPolicy IfNotPresent", c.ImagePullPolicy == corev1.PullIfNotPresent},
		{"no priority class (the system-node-critical component sets one)", pod.Spec.PriorityClassName == ""},
		{"nodeSelector kubernetes.io/os: linux", pod.Spec.NodeSelector["kubernetes.io/os"] == "linux"},
		{"an affinity that keeps off Fargate and virtual-kubelet nodes", keepsOffVirtualNodes(pod.Spec.Affinity)},
		{fmt.Sprintf("NoSchedule tolerations only, not %+v", noExecute), len(noExecute) == 0 && len(pod.Spec.Tolerations) > 0},
		{"readiness probe on /-/ready, liveness probe on /-/healthy", probeOK(c.ReadinessProbe, "/-/ready") && probeOK(c.LivenessProbe, "/-/healthy")},
		{"own service account", pod.Spec.ServiceAccountName == sa.Name && sa.Name != "default"},
		{"no API token mounted", pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken},
		{"not on the host network by default", !pod.Spec.HostNetwork},
		{"selector matches the pod labels", labelsMatch(ds.Spec.Selector.MatchLabels, pod.Labels)},
		{"read-only root file system", c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem},
		{"no privilege escalation", c.SecurityContext != nil && c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation},
		{"capabilities: drop ALL, add only SYSLOG", c.SecurityContext != nil && c.SecurityContext.Capabilities != nil &&
			slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) &&
			slices.Equal(c.SecurityContext.Capabilities.Add, []corev1.Capability{"SYSLOG"})},
		{"headless Service", svc.Spec.ClusterIP == corev1.ClusterIPNone},
		{"Service selects the pods", labelsMatch(svc.Spec.Selector, pod.Labels)},
		{"Service targets the metrics port", len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].TargetPort.StrVal == "metrics"},
		{"metrics port 29110", len(c.Ports) == 1 && c.Ports[0].Name == "metrics" && c.Ports[0].ContainerPort == 29110},
		{"no Prometheus Operator object without its component", len(allObjects[*monitoringv1.PodMonitor](objs))+len(allObjects[*monitoringv1.PrometheusRule](objs)) == 0},
	} {
		if !ok.ok {
			t.Errorf("DaemonSet kit: want %s", ok.what)
		}
	}

	// Requests cover the measured peak RSS (22.8 MiB, docs/benchmarks.md); limits are above requests.
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Memory().Cmp(resource.MustParse("23Mi")) < 0 || lim.Memory().Cmp(*req.Memory()) < 0 || req.Cpu().IsZero() || lim.Cpu().Cmp(*req.Cpu()) < 0 {
		t.Errorf("resources %v / %v: want requests above the measured RSS and limits above requests", req, lim)
	}
	hostPaths := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = true
		}
	}
	if len(hostPaths) < 3 {
		t.Errorf("host paths %v: want /proc, /sys and /dev/kmsg", hostPaths)
	}
	checkHostMounts(t, "the base", pod)
	// The cgroup_dirty collector (on by default) reads the host's cgroup
	// hierarchy where its mountinfo shows it: in the container, under the
	// /sys host path (docs/cgroup-dirty.md).
	if at := hostCgroupMount(pod); at != "/host/sys/fs/cgroup" {
		t.Errorf("the base shows the host's /sys/fs/cgroup at %q, want /host/sys/fs/cgroup", at)
	}

	checkOperatorComponent(t, dir, kust.Namespace, pod.Labels)

	// The system-node-critical component: the priority, and the quota that
	// admits it outside kube-system (GKE), scoped to that class alone.
	crit := withComponents(t, dir, "system-node-critical")
	if pc := onlyObject[*appsv1.DaemonSet](t, crit).Spec.Template.Spec.PriorityClassName; pc != "system-node-critical" {
		t.Errorf("system-node-critical component: priorityClassName %q", pc)
	}
	rq := onlyObject[*corev1.ResourceQuota](t, crit)
	if sel := rq.Spec.ScopeSelector; sel == nil || len(sel.MatchExpressions) != 1 ||
		sel.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
		!slices.Equal(sel.MatchExpressions[0].Values, []string{"system-node-critical"}) || rq.Namespace != kust.Namespace {
		t.Errorf("system-node-critical component: ResourceQuota %s/%s scope %+v: want one scoped to the priority class system-node-critical",
			rq.Namespace, rq.Name, rq.Spec.ScopeSelector)
	}

	// The hostnetwork component.
	hds := onlyObject[*appsv1.DaemonSet](t, withComponents(t, dir, "hostnetwork"))
	hc := hds.Spec.Template.Spec.Containers[0]
	if !hds.Spec.Template.Spec.HostNetwork || hds.Spec.Template.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet ||
		len(hc.Ports) != 1 || hc.Ports[0].HostPort != hc.Ports[0].ContainerPort || hc.Image != image ||
		!slices.Contains(hc.Args, "--path.procfs=/host/proc") {
		t.Errorf("hostNetwork variant: hostNetwork %v, dnsPolicy %s, ports %+v, image %s, args %v",
			hds.Spec.Template.Spec.HostNetwork, hds.Spec.Template.Spec.DNSPolicy, hc.Ports, hc.Image, hc.Args)
	}

	// The dns component.
	dds := onlyObject[*appsv1.DaemonSet](t, withComponents(t, dir, "dns"))
	dc := dds.Spec.Template.Spec.Containers[0]
	caps := dc.SecurityContext.Capabilities
	if !dds.Spec.Template.Spec.HostNetwork || !slices.Contains(dc.Args, "--collector.dns") ||
		!slices.Contains(dc.Args, "--dns.cgroup-root=/host/cgroup") || caps == nil ||
		!slices.Contains(caps.Add, "NET_RAW") || !slices.Contains(caps.Add, "BPF") || !slices.Contains(caps.Add, "NET_ADMIN") {
		t.Errorf("dns variant: hostNetwork %v, args %v, capabilities %+v", dds.Spec.Template.Spec.HostNetwork, dc.Args, caps)
	}
	checkHostMounts(t, "the dns component", dds.Spec.Template)
	if at := hostCgroupMount(dds.Spec.Template); at != "/host/cgroup" && at != "/host/sys/fs/cgroup" {
		t.Errorf("dns variant: the host's /sys/fs/cgroup at %q", at)
	}

	// The writeback component: no host network; the host's cgroup2 root
	// for naming the paused tasks' cgroups; the eBPF and /proc/<pid>/io
	// capabilities added to SYSLOG; no AppArmor confinement (the default
	// profile refuses ptrace-checked reads of the node's processes).
	wds := onlyObject[*appsv1.DaemonSet](t, withComponents(t, dir, "writeback"))
	wc := wds.Spec.Template.Spec.Containers[0]
	wbCaps := []corev1.Capability{"SYSLOG", "BPF", "PERFMON", "DAC_READ_SEARCH", "SYS_PTRACE"}
	if wds.Spec.Template.Spec.HostNetwork || !slices.Contains(wc.Args, "--collector.writeback") ||
		!slices.Contains(wc.Args, "--writeback.cgroup-root=/host/cgroup") || wc.SecurityContext.Capabilities == nil ||
		!slices.Equal(wc.SecurityContext.Capabilities.Add, wbCaps) || !slices.Equal(wc.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("writeback variant: hostNetwork %v, args %v, capabilities %+v (want add %v)",
			wds.Spec.Template.Spec.HostNetwork, wc.Args, wc.SecurityContext.Capabilities, wbCaps)
	}
	if ap := wc.SecurityContext.AppArmorProfile; ap == nil || ap.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("writeback variant: AppArmor profile %+v, want Unconfined", ap)
	}
	if sc := wc.SecurityContext; sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.SeccompProfile == nil {
		t.Errorf("writeback variant: the base's security context lost: %+v", sc)
	}
	checkHostMounts(t, "the writeback component", wds.Spec.Template)
	if !slices.ContainsFunc(wc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/host/cgroup" }) ||
		hostCgroupMount(wds.Spec.Template) == "" {
		t.Errorf("writeback variant: no host cgroup at /host/cgroup: %+v", wc.VolumeMounts)
	}

	// The argument- and capability-adding components at once, in either
	// order: each adds its own flags and capabilities, so none loses the
	// others' (a patch that set the whole list, and the later one won).
	for _, order := range [][]string{{"hostnetwork", "dns"}, {"dns", "hostnetwork"}, {"dns", "writeback"}, {"writeback", "dns", "hostnetwork"}} {
		pod := onlyObject[*appsv1.DaemonSet](t, withComponents(t, dir, order...)).Spec.Template
		c := pod.Spec.Containers[0]
		want := []string{"--path.procfs=/host/proc"}
		var wantCaps []corev1.Capability
		if slices.Contains(order, "hostnetwork") {
			want = append(want, "--redis.addr=redis://127.0.0.1:6379")
		}
		if slices.Contains(order, "dns") {
			want = append(want, "--collector.dns", "--dns.cgroup-root=/host/cgroup")
			wantCaps = append(wantCaps, "NET_RAW", "NET_ADMIN", "BPF")
		}
		if slices.Contains(order, "writeback") {
			want = append(want, "--collector.writeback", "--writeback.cgroup-root=/host/cgroup")
			wantCaps = append(wantCaps, "PERFMON", "DAC_READ_SEARCH", "SYS_PTRACE")
		}
		for _, w := range want {
			if n := slices.Index(c.Args, w); n < 0 || slices.Index(c.Args[n+1:], w) >= 0 {
				t.Errorf("components %q: want %s once in args %v", order, w, c.Args)
			}
		}
		for _, w := range append(wantCaps, "SYSLOG") {
			if !slices.Contains(c.SecurityContext.Capabilities.Add, w) {
				t.Errorf("components %q: %s missing from the capabilities %v", order, w, c.SecurityContext.Capabilities.Add)
			}
		}
		cgroups := 0
		for _, v := range pod.Spec.Volumes {
			if v.HostPath != nil && v.HostPath.Path == "/sys/fs/cgroup" {
				cgroups++
			}
		}
		if want := min(1, len(wantCaps)); cgroups != want {
			t.Errorf("components %q: %d volumes of the host's /sys/fs/cgroup, want %d", order, cgroups, want)
		}
	}

	// Every component at once, as the kustomization lists them.
	all := withComponents(t, dir, "prometheus-operator", "system-node-critical", "hostnetwork", "dns", "writeback")
	if n := len(allObjects[*monitoringv1.PrometheusRule](all)); n == 0 || len(allObjects[*corev1.ResourceQuota](all)) != 1 ||
		!onlyObject[*appsv1.DaemonSet](t, all).Spec.Template.Spec.HostNetwork ||
		!slices.Contains(onlyObject[*appsv1.DaemonSet](t, all).Spec.Template.Spec.Containers[0].Args, "--collector.writeback") {
		t.Errorf("every component at once: %d PrometheusRules, the quota, the host network or the writeback collector missing", n)
	}
}

// keepsOffVirtualNodes reports whether a required node affinity excludes
// AWS Fargate nodes (eks.amazonaws.com/compute-type=fargate) and
// virtual-kubelet nodes (type=virtual-kubelet) in every term.
func keepsOffVirtualNodes(a *corev1.Affinity) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		excluded := map[string]bool{}
		for _, e := range term.MatchExpressions {
			if e.Operator == corev1.NodeSelectorOpNotIn {
				for _, v := range e.Values {
					excluded[e.Key+"="+v] = true
				}
			}
		}
		if !excluded["eks.amazonaws.com/compute-type=fargate"] || !excluded["type=virtual-kubelet"] {
			return false
		}
	}
	return len(terms) > 0
}

// checkOperatorComponent renders the base with the prometheus-operator
// component and checks its objects: a PodMonitor that selects the
// DaemonSet's pods on the metrics port and names instances after their
// node, and one PrometheusRule per alerts/*.yml file, every one of them in
// the kustomization's namespace and labelled release= for
// kube-prometheus-stack's selectors. (The PodMonitor's job name is
// checked against the rules in jobs_test.go.)
func checkOperatorComponent(t *testing.T, dir, namespace string, podLabels map[string]string) {
	t.Helper()
	objs := withComponents(t, dir, "prometheus-operator")
	pm := onlyObject[*monitoringv1.PodMonitor](t, objs)
	eps := pm.Spec.PodMetricsEndpoints
	for _, ok := range []struct {
		what string
		ok   bool
	}{
		{"PodMonitor selects the pods", labelsMatch(pm.Spec.Selector.MatchLabels, podLabels)},
		{"PodMonitor scrapes the metrics port", len(eps) == 1 && eps[0].Port != nil && *eps[0].Port == "metrics"},
		{"PodMonitor names instances after their node", len(eps) == 1 &&
			slices.ContainsFunc(eps[0].RelabelConfigs, func(r monitoringv1.RelabelConfig) bool {
				return r.TargetLabel == "instance" && slices.Equal(r.SourceLabels, []monitoringv1.LabelName{"__meta_kubernetes_pod_node_name"})
			})},
		{"PodMonitor in the kustomization's namespace", pm.Namespace == namespace},
	} {
		if !ok.ok {
			t.Errorf("prometheus-operator component: want %s", ok.what)
		}
	}
	files, _ := alertRules(t)
	rules := allObjects[*monitoringv1.PrometheusRule](objs)
	if len(rules) != len(files) {
		t.Errorf("prometheus-operator component: %d PrometheusRules for %d alerts/*.yml files", len(rules), len(files))
	}
	release := pm.Labels["release"]
	if release == "" {
		t.Error("prometheus-operator component: the PodMonitor has no release label (kube-prometheus-stack selects by it)")
	}
	for _, r := range rules {
		if r.Labels["release"] != release || r.Namespace != namespace || len(r.Spec.Groups) == 0 {
			t.Errorf("PrometheusRule %s/%s: release label %q (want the PodMonitor's %q), %d groups",
				r.Namespace, r.Name, r.Labels["release"], release, len(r.Spec.Groups))
		}
	}
}

// checkAppendPatch checks a component's *-args.yaml or *-capabilities.yaml:
// a JSON patch whose every operation appends one value (valid) at path, the
// container's args or added capabilities, so components compose.
func checkAppendPatch(t *testing.T, file string, b []byte, path, what string, valid func(string) bool) {
	t.Helper()
	var ops []struct {
		Op, Path string
		Value    string
	}
	if err := yaml.UnmarshalStrict(b, &ops); err != nil || len(ops) == 0 {
		t.Errorf("%s: want a JSON patch of add operations: %v", file, err)
	}
	for _, op := range ops {
		if op.Op != "add" || op.Path != path || !valid(op.Value) {
			t.Errorf("%s: operation %+v does not append %s", file, op, what)
		}
	}
}

// checkHostMounts checks that every host path the pod mounts is read-only,
// recursively where the runtime can (recursiveReadOnly: the runtimes bind a
// host directory with the mounts under it, and readOnly alone leaves those,
// such as the cgroup hierarchy under /sys, writable by the container's root).
func checkHostMounts(t *testing.T, what string, pod corev1.PodTemplateSpec) {
	t.Helper()
	hostPaths := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			hp := hostPaths[m.Name]
			if hp == nil {
				continue
			}
			rro := m.RecursiveReadOnly != nil && *m.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled
			switch {
			case !m.ReadOnly:
				t.Errorf("%s: host path %s mounted read-write at %s", what, hp.Path, m.MountPath)
			case hp.Type != nil && *hp.Type == corev1.HostPathDirectory && !rro:
				t.Errorf("%s: host directory %s mounted at %s without recursiveReadOnly: the mounts under it stay writable", what, hp.Path, m.MountPath)
			}
		}
	}
}

// hostCgroupMount returns where the container sees the host's
// /sys/fs/cgroup: under a host path of it or of a directory above it, which
// the runtimes bind with the mounts under it (rbind), so that the cgroup2
// mount (or v1's tmpfs and controllers) is there too; "" if nowhere.
func hostCgroupMount(pod corev1.PodTemplateSpec) string {
	const cgroup = "/sys/fs/cgroup"
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = filepath.Clean(v.HostPath.Path)
		}
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		hp, ok := hostPaths[m.Name]
		if !ok || m.SubPath != "" {
			continue
		}
		if rel, err := filepath.Rel(hp, cgroup); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(m.MountPath, rel)
		}
	}
	return ""
}

// labelsMatch reports whether every selector label is on the pod.
func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestDeploySystemdUnits checks every unit in deploy/systemd with the real
// systemd-analyze verify: unknown keys, bad values and sections fail it.
// verify also fails a unit whose ExecStart binary is missing, and the
// binaries the units start (the exporter in /usr/local/bin, RocketMQ's
// scripts in /opt/rocketmq/bin) are not installed here, so each unit is
// verified from a copy whose ExecStart runs the test binary instead; the
// rest of the unit is as shipped, and verify must pass it silently.
func TestDeploySystemdUnits(t *testing.T) {
	analyze := collectortest.RequireTool(t, "systemd-analyze")
	units, err := filepath.Glob("deploy/systemd/*.service")
	if err != nil || len(units) < 3 {
		t.Fatalf("want the exporter's, the name server's and the broker's units, found %v (%v)", units, err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	execStart := regexp.MustCompile(`(?m)^(ExecStart=[-@:+!]*)/\S+`)
	dir := t.TempDir()
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !execStart.Match(b) {
			t.Errorf("%s: no ExecStart with an absolute path", u)
			continue
		}
		installed := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(installed, execStart.ReplaceAll(b, []byte("${1}"+self)), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "verify", "--man=no", installed)
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
}

// systemdUnit installs the exporter's unit and the given drop-ins of
// deploy/systemd (file → name under stall_exporter.service.d) as systemd
// would load them once installed, with the test binary standing in for the
// exporter (verify checks that ExecStart's binary exists and is
// executable; any executable will do). edit, when not nil, rewrites each
// drop-in's text first. It returns the unit's and the drop-ins' texts, in
// order, and runs systemd-analyze on the installed unit.
func systemdUnit(t *testing.T, analyze string, edit func(string) string, dropIns ...[2]string) (texts []string, systemd func(args ...string) ([]byte, error)) {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	install := func(src, dst string, edit func(string) string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "/usr/local/bin/stall_exporter", self)
		if edit != nil {
			text = edit(text)
		}
		if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, text)
	}
	install("deploy/systemd/stall_exporter.service", filepath.Join(dir, "stall_exporter.service"), nil)
	for _, d := range dropIns {
		install(filepath.Join("deploy/systemd", d[0]), filepath.Join(dir, "stall_exporter.service.d", d[1]), edit)
	}
	return texts, func(args ...string) ([]byte, error) {
		cmd := exec.Command(analyze, args...)
		cmd.Dir = dir
		// The trailing colon keeps the default unit path after ours, for
		// the targets the unit orders itself after.
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
		return cmd.CombinedOutput()
	}
}

// verifyAndRate runs systemd-analyze verify (silent) and security on the
// installed unit, fails above threshold (tenths: 30 is 3.0), and checks
// that the rating lists each of the exposures in shown, which only the
// drop-ins add (so the rating is of the unit with them).
func verifyAndRate(t *testing.T, what string, systemd func(args ...string) ([]byte, error), threshold int, shown ...string) {
	t.Helper()
	out, err := systemd("verify", "--man=no", "stall_exporter.service")
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify (%s): %v\n%s", what, err, out)
	}
	out, err = systemd("security", "--offline=true", fmt.Sprintf("--threshold=%d", threshold), "stall_exporter.service")
	score := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || score == nil {
		t.Fatalf("systemd-analyze security rates the %s above %d.%d (or failed): %v\n%s", what, threshold/10, threshold%10, err, out)
	}
	for _, want := range shown {
		if !regexp.MustCompile(`✗ ` + regexp.QuoteMeta(want) + ` `).Match(out) {
			t.Errorf("systemd-analyze security does not show the %s's %s: was it loaded?\n%s", what, want, out)
		}
	}
	t.Logf("systemd-analyze security, %s: exposure %s", what, score[1])
}

// TestSystemdDNSDropIn combines the unit with the dns drop-in as systemd
// would load them once installed (stall_exporter.service and
// stall_exporter.service.d/dns.conf on SYSTEMD_UNIT_PATH), verifies the
// pair, rates it, and checks that the combined SystemCallFilter lets
// through every system call the dns collector makes — which the base
// unit's filter alone does not.
func TestSystemdDNSDropIn(t *testing.T) {
	analyze := collectortest.RequireTool(t, "systemd-analyze")
	texts, systemd := systemdUnit(t, analyze, nil, [2]string{"stall_exporter-dns.conf", "dns.conf"})
	base, dropIn := texts[0], texts[1]
	// The rating must be of the pair: the drop-in's packet sockets and
	// CAP_BPF show up as exposures the base unit does not have.
	verifyAndRate(t, "unit with the dns drop-in", systemd, 30, "RestrictAddressFamilies=~AF_PACKET", "CapabilityBoundingSet=~CAP_BPF")

	// Every system call the exporter made in a run with --collector.dns
	// (strace -f -c, lookups captured, eBPF attribution attached, /proc
	// read): among them the capture socket with its filter, buffer and
	// statistics (socket, bind, setsockopt, getsockopt, recvmsg), the
	// interface list over netlink (sendto, recvfrom), the BPF maps,
	// programs and cgroup links (bpf), and cilium/ebpf's RLIMIT_MEMLOCK
	// probe and raise (prlimit64; Go never calls setrlimit on Linux).
	needs := []string{
		"accept4", "access", "arch_prctl", "bind", "bpf", "brk", "clone3", "close", "epoll_create1",
		"epoll_ctl", "epoll_pwait", "eventfd2", "execve", "fcntl", "fstat", "futex", "getpid",
		"getrandom", "getsockname", "getsockopt", "gettid", "listen", "madvise", "mmap", "mprotect",
		"munmap", "nanosleep", "newfstatat", "openat", "prctl", "pread64", "prlimit64", "read",
		"readlinkat", "recvfrom", "recvmsg", "rseq", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
		"sched_getaffinity", "sched_yield", "sendto", "set_robust_list", "set_tid_address", "setsockopt",
		"sigaltstack", "socket", "statfs", "tgkill", "uname", "write",
	}
	expand := syscallSets(t, analyze)
	combined := combinedSyscallFilter(t, expand, base, dropIn)
	for _, sc := range needs {
		if !combined[sc] {
			t.Errorf("the combined SystemCallFilter denies %s, which the exporter with the dns collector calls", sc)
		}
	}
	// Without the drop-in, bpf() is denied (@privileged): the drop-in is
	// what puts it back, and this test can fail.
	if alone := combinedSyscallFilter(t, expand, base); alone["bpf"] || !alone["socket"] {
		t.Errorf("the base unit alone: bpf allowed %v, socket allowed %v; want false, true", alone["bpf"], alone["socket"])
	}
}

// TestSystemdWritebackDropIn does for the writeback drop-in what
// TestSystemdDNSDropIn does for the dns one, for the drop-in as shipped
// (tracefs mounted), with its three lines for hosts without tracefs
// uncommented, and together with the dns drop-in: both must keep both
// collectors on whichever ExecStart= systemd takes (the later file's).
func TestSystemdWritebackDropIn(t *testing.T) {
	analyze := collectortest.RequireTool(t, "systemd-analyze")
	writeback := [2]string{"stall_exporter-writeback.conf", "writeback.conf"}
	texts, systemd := systemdUnit(t, analyze, nil, writeback)
	base, dropIn := texts[0], texts[1]
	verifyAndRate(t, "unit with the writeback drop-in", systemd, 30,
		"CapabilityBoundingSet=~CAP_SYS_PTRACE", "CapabilityBoundingSet=~CAP_BPF", "SystemCallFilter=~@debug")

	// Every system call the exporter made with --collector.writeback as
	// root on this machine's 6.18 kernel (strace -f; the program loaded
	// and attached, three scrapes): the BPF map and program (bpf), the
	// perf event it hangs on (perf_event_open, and ioctl to attach and
	// enable it), the cgroup and /proc walks (getdents64, openat, read),
	// cilium/ebpf's RLIMIT_MEMLOCK probe (prlimit64). This machine mounts
	// no tracefs, so that run also read the event's format from a private
	// tracefs: fsopen, fsconfig, fsmount, only in noTracefs below.
	needs := []string{
		"accept4", "access", "arch_prctl", "bind", "bpf", "brk", "clone3", "close", "epoll_create1",
		"epoll_ctl", "epoll_pwait", "eventfd2", "execve", "fcntl", "fstat", "futex", "getdents64",
		"getpid", "getrandom", "getsockname", "gettid", "ioctl", "listen", "lseek", "madvise", "mmap",
		"mprotect", "munmap", "nanosleep", "newfstatat", "openat", "perf_event_open", "prctl", "pread64",
		"prlimit64", "read", "readlinkat", "recvfrom", "rseq", "rt_sigaction", "rt_sigprocmask",
		"rt_sigreturn", "sched_getaffinity", "sched_yield", "sendto", "set_robust_list", "set_tid_address",
		"setsockopt", "sigaltstack", "socket", "statfs", "tgkill", "uname", "write",
	}
	noTracefs := []string{"fsopen", "fsconfig", "fsmount"}
	expand := syscallSets(t, analyze)
	combined := combinedSyscallFilter(t, expand, base, dropIn)
	for _, sc := range needs {
		if !combined[sc] {
			t.Errorf("the combined SystemCallFilter denies %s, which the exporter with the writeback collector calls", sc)
		}
	}
	for _, sc := range noTracefs {
		if combined[sc] {
			t.Errorf("the drop-in as shipped allows %s: the private tracefs is for hosts without one, on the commented lines", sc)
		}
	}
	if alone := combinedSyscallFilter(t, expand, base); alone["bpf"] || alone["perf_event_open"] || !alone["openat"] {
		t.Errorf("the base unit alone: bpf allowed %v, perf_event_open allowed %v, openat allowed %v; want false, false, true",
			alone["bpf"], alone["perf_event_open"], alone["openat"])
	}
	for _, want := range []string{"CAP_BPF", "CAP_PERFMON", "CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"} {
		if !regexp.MustCompile(`(?m)^AmbientCapabilities=.*\b` + want + `\b`).MatchString(dropIn) {
			t.Errorf("the writeback drop-in does not grant %s", want)
		}
	}

	// Without tracefs: the three commented lines uncommented, as the
	// drop-in says. Measured 3.2 here: CAP_SYS_ADMIN and @mount.
	uncomment := regexp.MustCompile(`(?m)^# ((AmbientCapabilities|CapabilityBoundingSet)=CAP_SYS_ADMIN|SystemCallFilter=fsopen .*)$`)
	texts, systemd = systemdUnit(t, analyze, func(s string) string { return uncomment.ReplaceAllString(s, "$1") }, writeback)
	if n := len(uncomment.FindAllString(dropIn, -1)); n != 3 {
		t.Errorf("the writeback drop-in has %d of the three commented lines for hosts without tracefs", n)
	}
	verifyAndRate(t, "unit with the writeback drop-in, no tracefs", systemd, 35, "CapabilityBoundingSet=~CAP_SYS_ADMIN", "SystemCallFilter=~@mount")
	combined = combinedSyscallFilter(t, expand, texts...)
	for _, sc := range append(needs, noTracefs...) {
		if !combined[sc] {
			t.Errorf("without tracefs, the combined SystemCallFilter denies %s, which the exporter with the writeback collector calls", sc)
		}
	}

	// With the dns drop-in: one ExecStart= in both, with both variables,
	// so whichever systemd takes runs both collectors. Measured 3.2 here.
	texts, systemd = systemdUnit(t, analyze, nil, [2]string{"stall_exporter-dns.conf", "dns.conf"}, writeback)
	verifyAndRate(t, "unit with the dns and writeback drop-ins", systemd, 35, "RestrictAddressFamilies=~AF_PACKET", "CapabilityBoundingSet=~CAP_SYS_PTRACE")
	execStart := regexp.MustCompile(`(?m)^ExecStart=(/.*)$`)
	dnsExec, wbExec := execStart.FindStringSubmatch(texts[1]), execStart.FindStringSubmatch(texts[2])
	if dnsExec == nil || wbExec == nil || dnsExec[1] != wbExec[1] ||
		!strings.Contains(wbExec[1], "$STALL_EXPORTER_DNS_ARGS") || !strings.Contains(wbExec[1], "$STALL_EXPORTER_WRITEBACK_ARGS") {
		t.Errorf("the dns and writeback drop-ins' ExecStart= differ or lack a collector's variable:\n%v\n%v", dnsExec, wbExec)
	}
	combined = combinedSyscallFilter(t, expand, texts...)
	for _, sc := range append(needs, "getsockopt", "recvmsg") {
		if !combined[sc] {
			t.Errorf("with both drop-ins, the combined SystemCallFilter denies %s", sc)
		}
	}
}

// syscallSets returns a function that expands a SystemCallFilter item (a
// system call or a @set) into system calls, as `systemd-analyze
// syscall-filter` lists them, sets within sets included.
func syscallSets(t *testing.T, analyze string) func(item string) []string {
	cache := map[string][]string{}
	var expand func(item string) []string
	expand = func(item string) []string {
		if !strings.HasPrefix(item, "@") {
			return []string{item}
		}
		if s, ok := cache[item]; ok {
			return s
		}
		out, err := exec.Command(analyze, "syscall-filter", item).Output()
		if err != nil {
			t.Fatalf("systemd-analyze syscall-filter %s: %v", item, err)
		}
		var calls []string
		for i, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			if i == 0 || l == "" || strings.HasPrefix(l, "#") {
				continue // the set's name, its description, blank lines
			}
			calls = append(calls, expand(l)...)
		}
		if len(calls) == 0 {
			t.Fatalf("systemd-analyze syscall-filter %s lists no system call", item)
		}
		cache[item] = calls
		return calls
	}
	return expand
}

// combinedSyscallFilter applies the SystemCallFilter= lines of unit files
// in order, as systemd.exec(5) says: the first line sets an allow list, a
// later line adds to it, a line starting with ~ removes from it, an empty
// one resets it. It returns the allowed system calls.
func combinedSyscallFilter(t *testing.T, expand func(string) []string, units ...string) map[string]bool {
	t.Helper()
	var allowed map[string]bool
	for _, u := range units {
		for _, l := range strings.Split(u, "\n") {
			v, ok := strings.CutPrefix(strings.TrimSpace(l), "SystemCallFilter=")
			if !ok {
				continue
			}
			deny := strings.HasPrefix(v, "~")
			v = strings.TrimPrefix(v, "~")
			switch {
			case strings.TrimSpace(v) == "":
				allowed = nil
				continue
			case allowed == nil && deny:
				t.Fatalf("SystemCallFilter=~%s starts a deny list; the unit is meant to allow a list", v)
			case allowed == nil:
				allowed = map[string]bool{}
			}
			for _, item := range strings.Fields(v) {
				for _, sc := range expand(item) {
					allowed[sc] = !deny
				}
			}
		}
	}
	if allowed == nil {
		t.Fatal("no SystemCallFilter= in the unit")
	}
	return allowed
}
