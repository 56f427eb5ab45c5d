package collector

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricInfo documents one metric family; docs/metrics.md must list every
// family recorded here, and a test enforces it.
type MetricInfo struct {
	Name   string
	Type   string // counter, gauge, histogram, info
	Labels []string
}

var (
	docMu      sync.Mutex
	documented = map[string]MetricInfo{}
)

// Document records a metric family for the docs/metrics.md consistency test.
// NewMetric and the Declare functions call it for the collectors' families;
// a family built outside the framework is documented by calling it
// directly (main does for stall_exporter_build_info, which client_golang's
// version collector makes).
func Document(name, typ string, labels ...string) {
	docMu.Lock()
	defer docMu.Unlock()
	documented[name] = MetricInfo{Name: name, Type: typ, Labels: labels}
}

// Documented returns every recorded metric family, sorted by name.
func Documented() []MetricInfo {
	docMu.Lock()
	defer docMu.Unlock()
	return slices.SortedFunc(maps.Values(documented), func(a, b MetricInfo) int { return strings.Compare(a.Name, b.Name) })
}

// Metric is a constant-metric descriptor with its value type.
type Metric struct {
	Desc *prometheus.Desc
	Type prometheus.ValueType
}

// NewMetric builds a descriptor for stall_<name> and documents it. help must
// say where the value comes from.
func NewMetric(name, help string, typ prometheus.ValueType, labels ...string) Metric {
	fq := Namespace + "_" + name
	kind := "gauge"
	if typ == prometheus.CounterValue {
		kind = "counter"
	}
	if strings.HasSuffix(fq, "_info") {
		kind = "info"
	}
	Document(fq, kind, labels...)
	d := prometheus.NewDesc(fq, help, labels, nil)
	families.Store(d, Family{Name: fq, Help: help, Type: typ})
	return Metric{Desc: d, Type: typ}
}

// Family is the metric family of a descriptor made by NewMetric.
type Family struct {
	Name, Help string
	Type       prometheus.ValueType
}

var families sync.Map // *prometheus.Desc → Family, filled by NewMetric

// FamilyOf returns the family of a descriptor made by NewMetric, so the
// exporter can group the constant metrics of a scrape into families
// without a prometheus.Registry (client_golang keeps a descriptor's name
// private).
func FamilyOf(d *prometheus.Desc) (Family, bool) {
	f, ok := families.Load(d)
	if !ok {
		return Family{}, false
	}
	return f.(Family), true
}

// Send emits one sample. Label values must match the descriptor's labels and
// be valid UTF-8 (see LabelValue); otherwise it panics, as
// prometheus.MustNewConstMetric does.
func (m Metric) Send(ch chan<- prometheus.Metric, v float64, labelValues ...string) {
	ch <- m.New(v, labelValues...)
}

// New returns one sample (a client_golang constant metric); it panics like
// Send.
func (m Metric) New(v float64, labelValues ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(m.Desc, m.Type, v, labelValues...)
}

// Stateful declares a metric family a collector keeps between scrapes as a
// client_golang collector (a histogram, a counter or gauge vector updated as
// events arrive: the sampler, the RocketMQ log follower, the DNS capture) or
// sends as a constant histogram it accumulates (the RocketMQ put-latency
// windows). Declared once in a package-level var with DeclareHistogram,
// DeclareCounter or DeclareGauge, it is documented at init for
// docs/metrics.md whether or not the collector is enabled; each instance
// builds its own vectors from it, so tests and /probe targets never share
// counts.
type Stateful struct {
	Name    string // stall_<name>
	Help    string
	Labels  []string
	Buckets []float64 // histograms only
	kind    string    // as Document takes it: counter, gauge, histogram
}

// DeclareHistogram declares and documents the histogram stall_<name> with
// the given upper bounds (+Inf is implied). help must say where the value
// comes from.
func DeclareHistogram(name, help string, buckets []float64, labels ...string) Stateful {
	return declare("histogram", name, help, buckets, labels)
}

// DeclareCounter declares and documents the counter stall_<name> (name ends
// in _total).
func DeclareCounter(name, help string, labels ...string) Stateful {
	return declare("counter", name, help, nil, labels)
}

// DeclareGauge declares and documents the gauge stall_<name>.
func DeclareGauge(name, help string, labels ...string) Stateful {
	return declare("gauge", name, help, nil, labels)
}

func declare(kind, name, help string, buckets []float64, labels []string) Stateful {
	s := Stateful{Name: Namespace + "_" + name, Help: help, Labels: labels, Buckets: buckets, kind: kind}
	Document(s.Name, kind, labels...)
	return s
}

// must panics when a Stateful is built as another type than declared.
func (s Stateful) must(kind string) {
	if s.kind != kind {
		panic(fmt.Sprintf("metric %s is declared as a %s, not a %s", s.Name, s.kind, kind))
	}
}

// HistogramVec builds a new histogram vector.
func (s Stateful) HistogramVec() *prometheus.HistogramVec {
	s.must("histogram")
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: s.Name, Help: s.Help, Buckets: s.Buckets}, s.Labels)
}

// Histogram builds a new histogram; the family must have no labels.
func (s Stateful) Histogram() prometheus.Histogram {
	s.must("histogram")
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: s.Name, Help: s.Help, Buckets: s.Buckets})
}

// CounterVec builds a new counter vector.
func (s Stateful) CounterVec() *prometheus.CounterVec {
	s.must("counter")
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: s.Name, Help: s.Help}, s.Labels)
}

// Counter builds a new counter; the family must have no labels.
func (s Stateful) Counter() prometheus.Counter {
	s.must("counter")
	return prometheus.NewCounter(prometheus.CounterOpts{Name: s.Name, Help: s.Help})
}

// GaugeVec builds a new gauge vector.
func (s Stateful) GaugeVec() *prometheus.GaugeVec {
	s.must("gauge")
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: s.Name, Help: s.Help}, s.Labels)
}

// Desc is the descriptor of a histogram the collector accumulates itself
// and sends with prometheus.MustNewConstHistogram (the broker's put-latency
// windows); not a NewMetric family, it is gathered by the registry.
func (s Stateful) Desc() *prometheus.Desc {
	return prometheus.NewDesc(s.Name, s.Help, s.Labels, nil)
}
