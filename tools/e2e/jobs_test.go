package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// The recording rules of alerts/exporter.yml that hold the job names: the
// only rules that may name a job.
const (
	exporterJobsRule = "job_instance:up:stall_exporter"
	probeJobsRule    = "job_instance:up:stall_probe"
)

// jobSelectors returns the job matchers of the two job-name rules, and
// fails when any other rule of alerts/*.yml matches on job.
func jobSelectors(t *testing.T) (exporter, probe *labels.Matcher) {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	_, rules := alertRules(t)
	for _, r := range rules {
		e, err := p.ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s%s: %v", r.Alert, r.Record, err)
		}
		var jobMatchers []*labels.Matcher
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				for _, m := range vs.LabelMatchers {
					if m.Name == model.JobLabel {
						jobMatchers = append(jobMatchers, m)
					}
				}
				if r.Record == exporterJobsRule || r.Record == probeJobsRule {
					if vs.Name != "up" {
						t.Errorf("%s reads %s, want Prometheus' up", r.Record, vs.Name)
					}
				}
			}
			return nil
		})
		switch r.Record {
		case exporterJobsRule, probeJobsRule:
			if len(jobMatchers) != 1 {
				t.Fatalf("%s: want one job matcher, has %v", r.Record, jobMatchers)
			}
			if r.Record == exporterJobsRule {
				exporter = jobMatchers[0]
			} else {
				probe = jobMatchers[0]
			}
		default:
			if len(jobMatchers) > 0 {
				t.Errorf("%s%s names a job (%v): only %s and %s may, so that job names are changed in one place",
					r.Alert, r.Record, jobMatchers, exporterJobsRule, probeJobsRule)
			}
		}
	}
	if exporter == nil || probe == nil {
		t.Fatalf("alerts/*.yml lacks the recording rules %s and %s", exporterJobsRule, probeJobsRule)
	}
	return exporter, probe
}

// scrapedJob is a job name a deployment path produces, and whether it
// scrapes /probe (else an exporter's own /metrics).
type scrapedJob struct {
	path, job string
	probe     bool
}

// relabelJob runs Prometheus' own relabeling over a target's labels and
// returns the job label it ends with ("" if the target is dropped).
func relabelJob(t *testing.T, start map[string]string, cfgs []*relabel.Config) string {
	t.Helper()
	for _, c := range cfgs {
		if err := c.Validate(model.UTF8Validation); err != nil {
			t.Fatalf("relabeling %+v: %v", c, err)
		}
	}
	lb := labels.NewBuilder(labels.FromMap(start))
	if !relabel.ProcessBuilder(lb, cfgs...) {
		return ""
	}
	return lb.Get(model.JobLabel)
}

// promConfigJobs returns the job names deploy/prometheus/prometheus.yml
// produces: each job's targets (the Kubernetes job's as the pod discovery
// would give it, see deployPromConfig) through its relabel_configs.
func promConfigJobs(t *testing.T) []scrapedJob {
	t.Helper()
	b, _ := deployPromConfig(t, promSetup{})
	var c struct {
		ScrapeConfigs []struct {
			JobName       string              `yaml:"job_name"`
			MetricsPath   string              `yaml:"metrics_path"`
			Params        map[string][]string `yaml:"params"`
			StaticConfigs []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
			RelabelConfigs []*relabel.Config `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	var jobs []scrapedJob
	for _, sc := range c.ScrapeConfigs {
		path := sc.MetricsPath
		if path == "" {
			path = "/metrics"
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				start := map[string]string{
					model.JobLabel: sc.JobName, model.AddressLabel: target,
					model.MetricsPathLabel: path, model.SchemeLabel: "http",
				}
				for k, v := range sc.Params {
					start[model.ParamLabelPrefix+k] = v[0]
				}
				for k, v := range st.Labels {
					start[k] = v
				}
				job := relabelJob(t, start, sc.RelabelConfigs)
				if job == "" {
					t.Errorf("prometheus.yml job %s drops its target %s", sc.JobName, target)
					continue
				}
				jobs = append(jobs, scrapedJob{"prometheus.yml job " + sc.JobName, job, path == "/probe"})
			}
		}
	}
	return jobs
}

// podMonitorJob returns the job name the prometheus-operator component's
// PodMonitor produces. Prometheus Operator (pkg/prometheus/promcfg.go,
// generatePodMonitorConfig) sets job to "<namespace>/<name>", then to the
// pod's jobLabel label if spec.jobLabel is set and the pod has it, and
// runs the endpoint's relabelings after both; this replays that order on
// the DaemonSet's pod.
func podMonitorJob(t *testing.T) scrapedJob {
	t.Helper()
	objs := withComponents(t, "deploy/kubernetes", "prometheus-operator")
	pm := onlyObject[*monitoringv1.PodMonitor](t, objs)
	pod := podMetaLabels("node-1")
	start := map[string]string{model.JobLabel: pm.Namespace + "/" + pm.Name, model.AddressLabel: "10.0.0.1:29110"}
	for k, v := range pod {
		start[k] = v.(string)
	}
	if pm.Spec.JobLabel != "" {
		key := "__meta_kubernetes_pod_label_" + strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(pm.Spec.JobLabel)
		if v := start[key]; v != "" {
			start[model.JobLabel] = v
		}
	}
	var cfgs []*relabel.Config
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		for _, rc := range ep.RelabelConfigs {
			cfgs = append(cfgs, operatorRelabel(t, rc))
		}
	}
	return scrapedJob{"the PodMonitor " + pm.Namespace + "/" + pm.Name, relabelJob(t, start, cfgs), false}
}

// operatorRelabel turns a PodMonitor relabeling into Prometheus' relabel
// configuration, as the operator writes it (the fields set, under
// Prometheus' names; the rest Prometheus' defaults).
func operatorRelabel(t *testing.T, rc monitoringv1.RelabelConfig) *relabel.Config {
	t.Helper()
	b, err := sigsyaml.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.NewReplacer("sourceLabels:", "source_labels:", "targetLabel:", "target_label:").Replace(string(b)))
	var c relabel.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("relabeling %s: %v", b, err)
	}
	return &c
}

// TestJobNameContract checks the job-name contract (docs/alerts.md "Job
// names"): every job name that deploy/prometheus/prometheus.yml and the
// kustomize PodMonitor produce matches the selector of its kind in
// alerts/exporter.yml (exporters' /metrics jobs for StallExporterDown,
// /probe jobs for StallProbeFailing) and not the other, and no other rule
// names a job.
func TestJobNameContract(t *testing.T) {
	exporter, probe := jobSelectors(t)
	jobs := append(promConfigJobs(t), podMonitorJob(t))
	seen := map[string]bool{}
	for _, j := range jobs {
		seen[j.job] = true
		own, other, kind := exporter, probe, "an exporter's /metrics"
		if j.probe {
			own, other, kind = probe, exporter, "/probe"
		}
		if !own.Matches(j.job) || other.Matches(j.job) {
			t.Errorf("%s scrapes %s as job %q: want it matched by %v and not by %v", j.path, kind, j.job, own, other)
		}
	}
	// The shipped paths produce the four documented names, no more.
	names := slices.Sorted(maps.Keys(seen))
	if want := []string{"stall", "stall-kubernetes", "stall-redis", "stall-rocketmq"}; !slices.Equal(names, want) {
		t.Errorf("job names %v, want %v", names, want)
	}
	if pm := podMonitorJob(t); pm.job != "stall-kubernetes" {
		t.Errorf("%s produces job %q, want stall-kubernetes (the name prometheus.yml's Kubernetes job has)", pm.path, pm.job)
	}
	t.Logf("jobs %v; selectors %v, %v", names, exporter, probe)
}
