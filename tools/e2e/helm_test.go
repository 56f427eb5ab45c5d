package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/promql"
	promtemplate "github.com/prometheus/prometheus/template"
	yamlv3 "go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The chart, rendered as `helm template` and checked as `helm lint --strict`
// would, through helm's own Go API (helm.sh/helm/v4): no helm binary, no
// cluster.
const (
	chartDir     = "deploy/helm/stall-exporter"
	chartRelease = "stall-exporter"
	chartNS      = "monitoring"
)

var updateChartReadme = flag.Bool("update", false, "rewrite the values table of "+chartDir+"/README.md from values.yaml")

// helmTemplate renders the chart with vals as `helm template` does (an
// install in client-only dry-run mode: no API server, default
// capabilities) and returns the manifest.
func helmTemplate(vals map[string]any) (string, error) {
	return helmTemplateDir(chartDir, vals)
}

func helmTemplateDir(dir string, vals map[string]any) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = chartRelease
	install.Namespace = chartNS
	rel, err := install.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		return "", err
	}
	r, ok := rel.(*releasev1.Release)
	if !ok {
		return "", fmt.Errorf("helm returned a %T, not a v1 release", rel)
	}
	return r.Manifest, nil
}

// chartValues reads one of the chart's ci/ values files.
func chartValues(t *testing.T, name string) map[string]any {
	t.Helper()
	vals, err := common.ReadValuesFile(filepath.Join(chartDir, "ci", name))
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// renderChart lints the chart with vals (strict: a warning fails) and
// returns the rendered objects, each decoded strictly into its Kubernetes
// or monitoring.coreos.com type.
func renderChart(t *testing.T, name string, vals map[string]any) []any {
	t.Helper()
	lint := action.NewLint()
	lint.Strict = true
	lint.Namespace = chartNS
	res := lint.Run([]string{chartDir}, vals)
	for _, m := range res.Messages {
		t.Logf("helm lint %s: %s", name, m)
	}
	if len(res.Errors) > 0 || res.TotalChartsLinted != 1 {
		t.Fatalf("helm lint --strict %s: %d charts linted, errors %v", name, res.TotalChartsLinted, res.Errors)
	}
	manifest, err := helmTemplate(vals)
	if err != nil {
		t.Fatalf("helm template %s: %v", name, err)
	}
	return decodeManifests(t, chartDir+" with "+name, []byte(manifest))
}

func objectsOf[T any](objs []any) []T {
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// chartConfigs is the chart's test matrix: each values file of ci/ and what
// it must render. baseline is what Pod Security's baseline level refuses in
// the pod (the chart README's table gives the same reasons, and says the
// level is privileged for each).
var chartConfigs = []struct {
	file        string
	kinds       map[string]int
	hostNetwork bool
	caps        []corev1.Capability
	args        []string // flags the exporter must get, beyond the --path.* ones
	baseline    []string
}{
	{
		file:     "default-values.yaml",
		kinds:    map[string]int{"DaemonSet": 1, "ServiceAccount": 1, "Service": 1},
		caps:     []corev1.Capability{"SYSLOG"},
		baseline: []string{"hostPath volumes", "non-default capabilities"},
	},
	{
		file:        "hostnetwork-targets-values.yaml",
		kinds:       map[string]int{"DaemonSet": 1, "ServiceAccount": 1, "Service": 1},
		hostNetwork: true,
		caps:        []corev1.Capability{"SYSLOG"},
		args: []string{"--redis.addr=redis://127.0.0.1:6379", "--redis.password-file=/etc/stall_exporter/redis/password",
			"--rocketmq.broker=127.0.0.1:10911", "--rocketmq.log-dir=/var/log/rocketmq"},
		baseline: []string{"host namespaces", "hostPath volumes", "hostPort", "non-default capabilities"},
	},
	{
		file:        "dns-values.yaml",
		kinds:       map[string]int{"DaemonSet": 1, "ServiceAccount": 1, "Service": 1},
		hostNetwork: true,
		caps:        []corev1.Capability{"SYSLOG", "NET_RAW", "NET_ADMIN", "BPF"},
		args:        []string{"--collector.dns", "--dns.cgroup-root=/host/cgroup"},
		baseline:    []string{"host namespaces", "hostPath volumes", "hostPort", "non-default capabilities"},
	},
	{
		file:     "writeback-values.yaml",
		kinds:    map[string]int{"DaemonSet": 1, "ServiceAccount": 1, "Service": 1},
		caps:     []corev1.Capability{"SYSLOG", "BPF", "PERFMON", "DAC_READ_SEARCH", "SYS_PTRACE"},
		args:     []string{"--collector.writeback", "--writeback.cgroup-root=/host/cgroup"},
		baseline: []string{"forbidden AppArmor profile", "hostPath volumes", "non-default capabilities"},
	},
	{
		file: "operator-values.yaml",
		kinds: map[string]int{"DaemonSet": 1, "ServiceAccount": 1, "Service": 1, "PodMonitor": 1,
			"PrometheusRule": -1, "ConfigMap": -1, "Probe": 2}, // -1: one per alerts/*.yml, dashboards/*.json
		caps:     []corev1.Capability{"SYSLOG"},
		args:     []string{"--redis.probe.allowed-targets=redis-1.example:6379", "--rocketmq.probe.allowed-targets=broker-a.example:10911"},
		baseline: []string{"hostPath volumes", "non-default capabilities"},
	},
	{
		file:     "servicemonitor-values.yaml",
		kinds:    map[string]int{"DaemonSet": 1, "ServiceAccount": 1, "Service": 1, "ServiceMonitor": 1},
		caps:     []corev1.Capability{"SYSLOG"},
		baseline: []string{"hostPath volumes", "non-default capabilities"},
	},
	{
		file:     "off-values.yaml",
		kinds:    map[string]int{"DaemonSet": 1},
		args:     []string{"--no-collector.kmsg"},
		baseline: []string{"hostPath volumes"},
	},
}

// TestHelmChart lints and renders the chart for each values file of its
// ci/ directory, decodes every object strictly, and checks the DaemonSet's
// pod: image, host network, capabilities, flags, read-only host paths, and
// the Pod Security level the chart README states for it.
func TestHelmChart(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tested []string
	for _, c := range chartConfigs {
		tested = append(tested, filepath.Join(chartDir, "ci", c.file))
	}
	if slices.Sort(files); !slices.Equal(files, slices.Sorted(slices.Values(tested))) {
		t.Errorf("ci/ holds %v; the test matrix covers %v", files, tested)
	}
	alertFiles, _ := filepath.Glob("alerts/*.yml")
	dashboards, _ := filepath.Glob("dashboards/*.json")
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	flags := exporterFlags(t)

	for _, c := range chartConfigs {
		t.Run(strings.TrimSuffix(c.file, "-values.yaml"), func(t *testing.T) {
			objs := renderChart(t, c.file, chartValues(t, c.file))
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[reflect.TypeOf(o).Elem().Name()]++
			}
			want := maps.Clone(c.kinds)
			for k, n := range want {
				if n == -1 && k == "PrometheusRule" {
					want[k] = len(alertFiles)
				} else if n == -1 && k == "ConfigMap" {
					want[k] = len(dashboards)
				}
			}
			if !maps.Equal(kinds, want) {
				t.Errorf("rendered kinds %v, want %v", kinds, want)
			}

			ds := onlyObject[*appsv1.DaemonSet](t, objs)
			pod := ds.Spec.Template
			ctr := pod.Spec.Containers[0]
			if want := "ghcr.io/stall-exporter/stall_exporter:" + releaseVersion(t); ctr.Image != want {
				t.Errorf("image %s, want %s (the chart's appVersion)", ctr.Image, want)
			}
			if pod.Spec.HostNetwork != c.hostNetwork {
				t.Errorf("hostNetwork %v, want %v", pod.Spec.HostNetwork, c.hostNetwork)
			}
			if c.hostNetwork && (pod.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || ctr.Ports[0].HostPort != 29110) {
				t.Errorf("on the host network: dnsPolicy %q, ports %+v", pod.Spec.DNSPolicy, ctr.Ports)
			}
			var caps []corev1.Capability
			if sc := ctr.SecurityContext; sc != nil && sc.Capabilities != nil {
				caps = sc.Capabilities.Add
				if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
					t.Errorf("capabilities drop %v, want ALL", sc.Capabilities.Drop)
				}
			}
			if !slices.Equal(caps, c.caps) {
				t.Errorf("capabilities add %v, want %v", caps, c.caps)
			}
			for _, a := range append([]string{"--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root"}, c.args...) {
				if !slices.Contains(ctr.Args, a) {
					t.Errorf("args %v lack %s", ctr.Args, a)
				}
			}
			for _, a := range ctr.Args {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !flags[name] {
					t.Errorf("arg %s: the exporter has no flag --%s (README's flag reference)", a, name)
				}
			}
			mounted := map[string]string{}
			for _, m := range ctr.VolumeMounts {
				if !m.ReadOnly {
					t.Errorf("volume %s mounted read-write at %s", m.Name, m.MountPath)
				}
				mounted[m.Name] = m.MountPath
			}
			for _, v := range pod.Spec.Volumes {
				if _, ok := mounted[v.Name]; !ok {
					t.Errorf("volume %s is not mounted", v.Name)
				}
			}
			checkHostMounts(t, c.file, pod)
			// The cgroup_dirty collector is on in every configuration: the host's
			// hierarchy must be in the container's mountinfo (docs/cgroup-dirty.md).
			if at := hostCgroupMount(pod); at != "/host/sys/fs/cgroup" {
				t.Errorf("the host's /sys/fs/cgroup is at %q in the container, want /host/sys/fs/cgroup", at)
			}
			if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
				t.Error("the pod mounts an API token; the exporter never talks to the API")
			}
			if c.file != "off-values.yaml" && (ctr.LivenessProbe == nil || ctr.ReadinessProbe == nil) {
				t.Error("want liveness and readiness probes")
			}
			if !labelsMatch(ds.Spec.Selector.MatchLabels, pod.Labels) {
				t.Errorf("selector %v does not match the pod labels %v", ds.Spec.Selector.MatchLabels, pod.Labels)
			}
			for _, svc := range objectsOf[*corev1.Service](objs) {
				if !labelsMatch(svc.Spec.Selector, pod.Labels) || svc.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("Service: selector %v, clusterIP %q; want the pods, headless", svc.Spec.Selector, svc.Spec.ClusterIP)
				}
			}
			for _, o := range objs {
				if ns := reflect.ValueOf(o).Elem().FieldByName("Namespace").String(); ns != chartNS {
					t.Errorf("%T in namespace %q, want the release's %s", o, ns, chartNS)
				}
			}

			got := podSecurityBaseline(t, pod)
			if !slices.Equal(got, c.baseline) {
				t.Errorf("Pod Security baseline refuses the pod for %q, want %q", got, c.baseline)
			}
			// The README's Pod Security table: a row per values file that says
			// privileged and gives baseline's reasons.
			row := regexp.MustCompile(`(?m)^\|[^\n]*` + regexp.QuoteMeta(c.file) + `[^\n]*$`).Find(readme)
			for _, r := range append([]string{"privileged"}, c.baseline...) {
				if !bytes.Contains(row, []byte(r)) {
					t.Errorf("the chart README's Pod Security row for %s (%q) does not say %q", c.file, row, r)
				}
			}
		})
	}
}

// exporterFlags returns the exporter's flags as the README's flag
// reference lists them (the --help output `make readme-flags` writes there),
// each boolean one under both of its names (collector.dns, no-collector.dns).
func exporterFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, _ := strings.Cut(string(b), "<!-- flags:begin -->")
	ref, _, _ = strings.Cut(ref, "<!-- flags:end -->")
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--(\[no-\])?([a-z0-9.-]+)`).FindAllStringSubmatch(ref, -1) {
		flags[m[2]] = true
		if m[1] != "" {
			flags["no-"+m[2]] = true
		}
	}
	if len(flags) < 50 {
		t.Fatalf("README's flag reference lists %d flags", len(flags))
	}
	return flags
}

// TestHelmChartMatchesKustomize keeps the two Kubernetes paths in step: the
// chart's container (defaults, with the dns collector, with the writeback
// collector) reads the same host paths at the same places with the same
// flags, security context, resources and probes as the kustomize base's
// (and its dns and writeback components').
func TestHelmChartMatchesKustomize(t *testing.T) {
	tree := t.TempDir()
	if err := os.CopyFS(filepath.Join(tree, "kubernetes"), os.DirFS("deploy/kubernetes")); err != nil {
		t.Fatal(err)
	}
	overlay := func(components ...string) string {
		dir := filepath.Join(tree, strings.Join(components, "+"))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../kubernetes]\ncomponents:\n"
		for _, c := range components {
			k += "  - ../kubernetes/" + c + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct{ values, kustomization string }{
		{"default-values.yaml", filepath.Join(tree, "kubernetes")},
		{"dns-values.yaml", overlay("dns")},
		{"writeback-values.yaml", overlay("writeback")},
	} {
		chart := onlyObject[*appsv1.DaemonSet](t, renderChart(t, c.values, chartValues(t, c.values))).Spec.Template.Spec
		kust := onlyObject[*appsv1.DaemonSet](t, kustomize(t, c.kustomization)).Spec.Template.Spec
		hc, kc := chart.Containers[0], kust.Containers[0]
		// The chart names the listening port, which service.port sets.
		args := slices.DeleteFunc(slices.Clone(hc.Args), func(a string) bool { return strings.HasPrefix(a, "--web.listen-address=") })
		// A strategic-merge patch puts the component's volumes first: the
		// order means nothing.
		byName := func(a, b string) int { return strings.Compare(a, b) }
		for _, m := range [][]corev1.VolumeMount{hc.VolumeMounts, kc.VolumeMounts} {
			slices.SortFunc(m, func(a, b corev1.VolumeMount) int { return byName(a.Name, b.Name) })
		}
		for _, v := range [][]corev1.Volume{chart.Volumes, kust.Volumes} {
			slices.SortFunc(v, func(a, b corev1.Volume) int { return byName(a.Name, b.Name) })
		}
		for _, d := range []struct {
			what          string
			chart, kustom any
		}{
			{"args", args, kc.Args},
			{"volume mounts", hc.VolumeMounts, kc.VolumeMounts},
			{"volumes", chart.Volumes, kust.Volumes},
			{"security context", hc.SecurityContext, kc.SecurityContext},
			{"resources", hc.Resources, kc.Resources},
			{"host network", chart.HostNetwork, kust.HostNetwork},
			{"DNS policy", chart.DNSPolicy, kust.DNSPolicy},
			{"liveness probe", hc.LivenessProbe, kc.LivenessProbe},
			{"readiness probe", hc.ReadinessProbe, kc.ReadinessProbe},
		} {
			if !reflect.DeepEqual(d.chart, d.kustom) {
				t.Errorf("%s: the chart's %s differ from kustomize's:\n chart     %+v\n kustomize %+v", c.values, d.what, d.chart, d.kustom)
			}
		}
	}
}

// TestHelmChartValues checks what the values schema and the chart refuse:
// a misspelt key, a value of the wrong type, an override of an alert that
// does not exist, a ServiceMonitor or Probe without the Service.
func TestHelmChartValues(t *testing.T) {
	for _, c := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"hostNetwrok": true}, "hostNetwrok"},
		{map[string]any{"service": map[string]any{"port": "metrics"}}, "port"},
		{map[string]any{"prometheusRules": map[string]any{"enabled": true, "alerts": map[string]any{"NoSuchAlert": map[string]any{"disabled": true}}}}, "NoSuchAlert"},
		{map[string]any{"prometheusRules": map[string]any{"alerts": map[string]any{"StallExporterDown": map[string]any{"severity": "page"}}}}, "severity"},
		{map[string]any{"service": map[string]any{"enabled": false}, "prometheus": map[string]any{"monitor": map[string]any{"enabled": true}}}, "service.enabled"},
		{map[string]any{"service": map[string]any{"enabled": false}, "prometheus": map[string]any{"probe": map[string]any{"enabled": true}}}, "service.enabled"},
	} {
		_, err := helmTemplate(c.vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %v: error %v, want one naming %s", c.vals, err, c.want)
		}
	}
}

// TestHelmChartWithoutLinks renders a copy of the chart whose alerts and
// dashboards links are plain files holding the link's target, as a
// checkout without symbolic links (git's core.symlinks=false) has them:
// asked for rules or dashboards, the chart refuses, instead of rendering
// none.
func TestHelmChartWithoutLinks(t *testing.T) {
	dir := t.TempDir()
	err := filepath.WalkDir(chartDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		dst := filepath.Join(dir, rel)
		if d.Type()&os.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, []byte(target), 0o644)
		}
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := helmTemplateDir(dir, nil); err != nil {
		t.Errorf("the defaults need neither alerts nor dashboards, yet: %v", err)
	}
	for _, key := range []string{"prometheusRules", "dashboards"} {
		_, err := helmTemplateDir(dir, map[string]any{key: map[string]any{"enabled": true}})
		if err == nil || !strings.Contains(err.Error(), "symbolic links") {
			t.Errorf("%s.enabled in a chart without its links: error %v, want one about the links", key, err)
		}
	}
}

// TestHelmChartPackage packages the chart as `make release` does (helm's
// packager with SOURCE_DATE_EPOCH, tools/chartpackage) and checks the archive
// (checkChartArchive); TestRelease checks the one in the release.
func TestHelmChartPackage(t *testing.T) {
	epoch := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	pkg := action.NewPackage()
	pkg.Destination = t.TempDir()
	pkg.SourceDateEpoch = &epoch
	archive, err := pkg.Run(chartDir, nil)
	if err != nil {
		t.Fatalf("helm package: %v", err)
	}
	checkChartArchive(t, archive, epoch)
}

// checkChartArchive reads a packaged chart: every entry under stall-exporter/,
// mode 0644, owner 0, with the time epoch, in a gzip header without name or
// time; exactly the chart's files, with the rule files and dashboards (which the
// chart holds as symbolic links to alerts/ and dashboards/) and the licence as
// the repository's bytes, and neither the replays beside the rules nor ci/;
// loaded back by helm's loader, Chart.yaml's version and an appVersion of
// VERSION.
func checkChartArchive(t *testing.T, archive string, epoch time.Time) {
	t.Helper()
	raw := readBytes(t, archive)
	t.Logf("%s: %d bytes", filepath.Base(archive), len(raw))
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q at %v; want neither", zr.Name, zr.ModTime)
	}
	inArchive := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(h.Name, chartRelease+"/")
		if !ok || h.Typeflag != tar.TypeReg || h.Mode != 0o644 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: type %c mode %o uid %d gid %d time %v; want a file under %s/, 0644, 0 0, %v",
				h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime, chartRelease, epoch)
		}
		if inArchive[name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}

	// The repository's files the archive must hold, and nothing else.
	fromRepo := map[string]string{"LICENSE": "LICENSE"}
	for _, pattern := range []string{"alerts/*.yml", "dashboards/*.json"} {
		files, _ := filepath.Glob(pattern)
		if len(files) == 0 {
			t.Fatalf("no %s to compare with", pattern)
		}
		for _, f := range files {
			fromRepo[f] = f
		}
	}
	for _, f := range []string{".helmignore", "README.md", "values.yaml", "values.schema.json"} {
		fromRepo[f] = filepath.Join(chartDir, f)
	}
	templates, _ := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	for _, f := range templates {
		fromRepo["templates/"+filepath.Base(f)] = f
	}
	want := append(slices.Collect(maps.Keys(fromRepo)), "Chart.yaml") // Chart.yaml: helm writes its own from the metadata
	if got := slices.Sorted(maps.Keys(inArchive)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("the packaged chart holds %v\nwant %v", got, slices.Sorted(slices.Values(want)))
	}
	for name, source := range fromRepo {
		if got, ok := inArchive[name]; ok && !bytes.Equal(got, readBytes(t, source)) {
			t.Errorf("%s in the packaged chart is not the repository's %s", name, source)
		}
	}

	ch, err := loader.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	src, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Name != chartRelease || ch.Metadata.Version != src.Metadata.Version || ch.Metadata.AppVersion != releaseVersion(t) || ch.Schema == nil {
		t.Errorf("packaged chart: %s version %s, appVersion %s, schema %d bytes; want %s %s, %s, a schema",
			ch.Metadata.Name, ch.Metadata.Version, ch.Metadata.AppVersion, len(ch.Schema), chartRelease, src.Metadata.Version, releaseVersion(t))
	}
	if !strings.HasSuffix(archive, "/"+chartRelease+"-"+src.Metadata.Version+".tgz") {
		t.Errorf("%s: want %s-%s.tgz", archive, chartRelease, src.Metadata.Version)
	}
}

// ruleFile is one alerts/*.yml file, decoded strictly into the
// PrometheusRule spec's types.
func ruleFile(t *testing.T, path string) []monitoringv1.RuleGroup {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f.Groups
}

// renderedRules renders the chart with the operator values and vals merged
// over them, and returns each PrometheusRule's groups by the rule file they
// come from (alerts/<name>.yml → <name>).
func renderedRules(t *testing.T, over map[string]any) map[string][]monitoringv1.RuleGroup {
	t.Helper()
	vals := chartutil.MergeTables(over, chartValues(t, "operator-values.yaml"))
	rules := map[string][]monitoringv1.RuleGroup{}
	for _, pr := range objectsOf[*monitoringv1.PrometheusRule](renderChart(t, "operator-values.yaml", vals)) {
		name, ok := strings.CutPrefix(pr.Name, chartRelease+"-")
		if !ok {
			t.Fatalf("PrometheusRule %s is not named after the release", pr.Name)
		}
		if pr.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("PrometheusRule %s labels %v: want release kube-prometheus-stack", pr.Name, pr.Labels)
		}
		rules[name] = pr.Spec.Groups
	}
	return rules
}

// TestHelmPrometheusRules checks the chart's PrometheusRules against
// alerts/*.yml: without overrides, one per file with exactly its groups,
// accepted by promtool check rules; with overrides, the fields they change
// and nothing else differ.
func TestHelmPrometheusRules(t *testing.T) {
	promtool := collectortest.RequireTool(t, "promtool")
	base := renderedRules(t, nil)
	files, _ := filepath.Glob("alerts/*.yml")
	if len(base) != len(files) {
		t.Errorf("%d PrometheusRules for %d rule files", len(base), len(files))
	}
	dir := t.TempDir()
	var written []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yml")
		want := ruleFile(t, f)
		if !reflect.DeepEqual(base[name], want) {
			t.Errorf("PrometheusRule for %s: groups differ from the file's", f)
		}
		b, err := yaml.Marshal(map[string]any{"groups": base[name]})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		written = append(written, p)
	}
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, written...)...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the rendered PrometheusRules: %v\n%s", err, out)
	}

	const runbooks = "https://runbooks.example.com/stall"
	over := renderedRules(t, map[string]any{"prometheusRules": map[string]any{
		"runbookUrlBase": runbooks,
		"alerts": map[string]any{
			"StallSamplerOverrunning":     map[string]any{"disabled": true},
			"RedisClientsWaitingOnOutput": map[string]any{"for": "5m", "severity": "critical", "labels": map[string]any{"team": "cache"}},
			"StallExporterDown":           map[string]any{"labels": map[string]any{"team": "platform"}},
		},
	}})
	baseRules, overRules := flatRules(t, base), flatRules(t, over)
	var gone []string
	for name := range baseRules {
		if _, ok := overRules[name]; !ok {
			gone = append(gone, name)
		}
	}
	if !slices.Equal(gone, []string{"StallSamplerOverrunning"}) || len(overRules) != len(baseRules)-1 {
		t.Errorf("overrides dropped %v (%d rules of %d left), want StallSamplerOverrunning only", gone, len(overRules), len(baseRules))
	}
	want := map[string]string{
		"RedisClientsWaitingOnOutput for":             "5m",
		"RedisClientsWaitingOnOutput labels.severity": "critical",
		"RedisClientsWaitingOnOutput labels.team":     "cache",
		"StallExporterDown labels.team":               "platform",
	}
	anchors := 0
	for name, r := range baseRules {
		if u, ok := r["annotations.runbook_url"]; ok {
			if _, anchor, ok := strings.Cut(u, "#"); ok && name != "StallSamplerOverrunning" {
				want[name+" annotations.runbook_url"] = runbooks + "#" + anchor
				anchors++
			}
		}
	}
	if anchors == 0 {
		t.Fatal("no rule has a runbook_url with an anchor")
	}
	changed := map[string]string{}
	for name, o := range overRules {
		b := baseRules[name]
		keys := maps.Clone(b)
		maps.Copy(keys, o)
		for k := range keys {
			if b[k] != o[k] {
				changed[name+" "+k] = o[k]
			}
		}
	}
	if !maps.Equal(changed, want) {
		for k, v := range changed {
			if want[k] != v {
				t.Errorf("override changed %s to %q; not asked for", k, v)
			}
		}
		for k, v := range want {
			if changed[k] != v {
				t.Errorf("override did not set %s to %q (got %q)", k, v, changed[k])
			}
		}
	}
}

// flatRules flattens every rule of every group into its fields ("expr",
// "labels.severity", "annotations.summary", …), keyed by alert or record
// name (the group's name first for a recording rule defined twice).
func flatRules(t *testing.T, files map[string][]monitoringv1.RuleGroup) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for file, groups := range files {
		for _, g := range groups {
			for _, r := range g.Rules {
				var m map[string]any
				b, _ := json.Marshal(r)
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatal(err)
				}
				fields := map[string]string{"file": file, "group": g.Name}
				var walk func(prefix string, v any)
				walk = func(prefix string, v any) {
					if sub, ok := v.(map[string]any); ok {
						for k, x := range sub {
							walk(strings.TrimPrefix(prefix+"."+k, "."), x)
						}
						return
					}
					fields[prefix] = fmt.Sprint(v)
				}
				walk("", m)
				name := r.Alert
				if name == "" {
					name = g.Name + "/" + r.Record
				}
				if _, dup := out[name]; dup {
					t.Fatalf("rule %s defined twice", name)
				}
				out[name] = fields
			}
		}
	}
	return out
}

// TestHelmJobContract replays, with promtool and the chart's rendered
// rules, what each of the chart's scrape paths yields when it fails: the
// job that the PodMonitor, the ServiceMonitor and the Probes give the
// series (read from the rendered objects) with up at 0 fires
// StallExporterDown or StallProbeFailing.
func TestHelmJobContract(t *testing.T) {
	promtool := collectortest.RequireTool(t, "promtool")
	objs := renderChart(t, "operator-values.yaml", chartutil.MergeTables(
		map[string]any{"prometheus": map[string]any{"monitor": map[string]any{"enabled": true}}},
		chartValues(t, "operator-values.yaml")))

	type path struct {
		what, job, instance, alert string
	}
	var paths []path
	monitorJob := func(what string, rcs []monitoringv1.RelabelConfig) {
		// The Operator writes job=<namespace>/<name> before these relabelings:
		// the last of them that writes job decides.
		job := ""
		for _, rc := range rcs {
			if rc.TargetLabel == "job" {
				if len(rc.SourceLabels) > 0 || rc.Replacement == nil || (rc.Action != "" && !strings.EqualFold(rc.Action, "replace")) {
					t.Fatalf("%s: relabeling %+v writes job from something other than a fixed name", what, rc)
				}
				job = *rc.Replacement
			}
		}
		if job == "" {
			t.Fatalf("%s sets no job: the Operator's <namespace>/<name> would stay, which no rule matches", what)
		}
		paths = append(paths, path{what, job, "node-1", "StallExporterDown"})
	}
	pm := onlyObject[*monitoringv1.PodMonitor](t, objs)
	monitorJob("PodMonitor", pm.Spec.PodMetricsEndpoints[0].RelabelConfigs)
	sm := onlyObject[*monitoringv1.ServiceMonitor](t, objs)
	monitorJob("ServiceMonitor", sm.Spec.Endpoints[0].RelabelConfigs)
	svc := onlyObject[*corev1.Service](t, objs)
	for _, p := range objectsOf[*monitoringv1.Probe](objs) {
		if want := fmt.Sprintf("%s.%s.svc:29110", svc.Name, svc.Namespace); p.Spec.ProberSpec.URL != want || p.Spec.ProberSpec.Path != "/probe" {
			t.Errorf("Probe %s: prober %s%s, want %s/probe", p.Name, p.Spec.ProberSpec.URL, p.Spec.ProberSpec.Path, want)
		}
		if p.Spec.Targets.StaticConfig == nil || len(p.Spec.Targets.StaticConfig.Targets) == 0 {
			t.Fatalf("Probe %s has no static targets", p.Name)
		}
		paths = append(paths, path{"Probe " + p.Spec.Module, p.Spec.JobName, p.Spec.Targets.StaticConfig.Targets[0], "StallProbeFailing"})
	}
	for _, o := range []struct {
		name   string
		labels map[string]string
	}{{"PodMonitor", pm.Labels}, {"ServiceMonitor", sm.Labels}} {
		if o.labels["release"] != "kube-prometheus-stack" {
			t.Errorf("%s labels %v: want release kube-prometheus-stack", o.name, o.labels)
		}
	}
	jobs := map[string]string{}
	for _, p := range paths {
		jobs[p.what] = p.job
	}
	if want := map[string]string{"PodMonitor": "stall-kubernetes", "ServiceMonitor": "stall-kubernetes",
		"Probe redis": "stall-redis", "Probe rocketmq": "stall-rocketmq"}; !maps.Equal(jobs, want) {
		t.Errorf("job names %v, want the contract's %v", jobs, want)
	}

	// The rendered rules, as Prometheus would load them from the
	// PrometheusRules, and a replay per path.
	dir := t.TempDir()
	rules := map[string]monitoringv1.Rule{}
	for _, pr := range objectsOf[*monitoringv1.PrometheusRule](objs) {
		b, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pr.Name+".yml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					rules[r.Alert] = r
				}
			}
		}
	}
	var tests []any
	for _, p := range paths {
		labels := map[string]string{"job": p.job, "instance": p.instance}
		series := fmt.Sprintf(`up{instance=%q,job=%q}`, p.instance, p.job)
		rule, ok := rules[p.alert]
		if !ok {
			t.Fatalf("the rendered rules have no %s", p.alert)
		}
		exp := maps.Clone(labels)
		maps.Copy(exp, rule.Labels)
		tests = append(tests, map[string]any{
			"name":         p.what + ": job " + p.job + " down",
			"interval":     "15s",
			"input_series": []any{map[string]any{"series": series, "values": "0+0x40"}},
			"alert_rule_test": []any{map[string]any{
				"eval_time": "10m",
				"alertname": p.alert,
				// Every scrape failed: the average of up over 5 minutes is 0.
				"exp_alerts": []any{map[string]any{"exp_labels": exp, "exp_annotations": expandAnnotations(t, rule, labels, 0)}},
			}},
		})
	}
	test, err := yaml.Marshal(map[string]any{"rule_files": []string{"*.yml"}, "evaluation_interval": "15s", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(dir, "job-contract.test.yaml")
	if err := os.WriteFile(testFile, test, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", filepath.Base(testFile))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules (the chart's job names against its rules): %v\n%s\n%s", err, out, test)
	}
}

// expandAnnotations expands an alert's annotations for one firing series as
// Prometheus' rule manager does (the same $labels, $value and functions).
func expandAnnotations(t *testing.T, r monitoringv1.Rule, labels map[string]string, value float64) map[string]string {
	t.Helper()
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	data := promtemplate.AlertTemplateData(labels, nil, "", promql.Sample{F: value})
	out := map[string]string{}
	for k, text := range r.Annotations {
		noQuery := func(context.Context, string, time.Time) (promql.Vector, error) {
			return nil, errors.New("the replay's annotations run no query")
		}
		exp := promtemplate.NewTemplateExpander(context.Background(), defs+text, "__alert_"+r.Alert, data, 0, noQuery, &url.URL{}, nil)
		s, err := exp.Expand()
		if err != nil {
			t.Fatalf("%s annotation %s: %v", r.Alert, k, err)
		}
		out[k] = s
	}
	return out
}

// TestHelmChartReadme keeps the chart README's values table in step with
// values.yaml: a row for every key with a "# --" comment, and a comment for
// every value (on it or on an enclosing key). -update rewrites the table.
func TestHelmChartReadme(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(values, &doc); err != nil {
		t.Fatal(err)
	}
	var rows []string
	var walk func(prefix string, m *yamlv3.Node, documented bool)
	walk = func(prefix string, m *yamlv3.Node, documented bool) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := strings.TrimPrefix(prefix+"."+k.Value, ".")
			desc, ok := docComment(k.HeadComment)
			if ok {
				var val any
				if err := v.Decode(&val); err != nil {
					t.Fatal(err)
				}
				def, _ := json.Marshal(val)
				typ := map[string]string{"!!str": "string", "!!int": "int", "!!bool": "bool", "!!map": "object", "!!seq": "list", "!!null": "null"}[v.Tag]
				rows = append(rows, fmt.Sprintf("| `%s` | %s | `%s` | %s |", key, typ, strings.ReplaceAll(string(def), "|", `\|`), strings.ReplaceAll(desc, "|", `\|`)))
			}
			switch {
			case v.Kind == yamlv3.MappingNode && len(v.Content) > 0 && !ok:
				walk(key, v, documented || ok)
			case !ok && !documented:
				t.Errorf("values.yaml: %s has no \"# --\" comment", key)
			}
		}
	}
	walk("", doc.Content[0], false)
	table := "| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n"

	path := filepath.Join(chartDir, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- values:begin -->\n", "<!-- values:end -->"
	before, rest, ok1 := strings.Cut(string(readme), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %q … %q markers", path, begin, end)
	}
	want := before + begin + table + end + after
	if want == string(readme) {
		return
	}
	if *updateChartReadme {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the values table is not values.yaml's; run make chart-readme", path)
}

// docComment returns the text of a "# --" head comment, its lines joined.
func docComment(c string) (string, bool) {
	_, text, ok := strings.Cut(c, "# --")
	if !ok {
		return "", false
	}
	var words []string
	for _, l := range strings.Split(text, "\n") {
		words = append(words, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#")))
	}
	return strings.TrimSpace(strings.Join(words, " ")), true
}
