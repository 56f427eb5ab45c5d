package collector

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Paths are the mount points every file read goes through (a container
// with the host under /host, tests on fixtures).
type Paths struct {
	Procfs string // --path.procfs, default /proc
	Sysfs  string // --path.sysfs, default /sys
	Rootfs string // --path.rootfs, default /
}

// Proc returns a path under the procfs mount point.
func (p Paths) Proc(elem ...string) string {
	return filepath.Join(append([]string{p.Procfs}, elem...)...)
}

// Sys returns a path under the sysfs mount point.
func (p Paths) Sys(elem ...string) string {
	return filepath.Join(append([]string{p.Sysfs}, elem...)...)
}

// Root returns an absolute host path (such as /dev/kmsg or a log directory)
// re-rooted under --path.rootfs.
func (p Paths) Root(path string) string {
	if p.Rootfs == "" || p.Rootfs == "/" {
		return path
	}
	return filepath.Join(p.Rootfs, path)
}

// MaxLabelBytes is the length limit of every label value taken from a
// peer or a process (a Redis command, client group or key name, a broker
// name, version or config value, a process name): the peer chooses the
// length, and each distinct value is a series.
const MaxLabelBytes = 128

// LabelValue makes a string that came from outside (a Redis command or key
// name, a broker name or version) safe as a label value: invalid UTF-8,
// which client_golang refuses and MustNewConstMetric panics on, becomes
// U+FFFD, and so does every control character (C0 including tab and
// newline, DEL, C1: a NUL makes grep call the whole exposition binary, an
// escape sequence rewrites a terminal); then a value longer than maxLen bytes
// is cut at a rune boundary and marked with "…". maxLen is MaxLabelBytes for
// a label value taken from a peer; a shorter one only bounds a value that
// is not (a quote of peer text in an error, a cgroup name), and maxLen <= 0
// means no length limit. A value that needs none of this is returned as it
// is, without allocating.
func LabelValue(s string, maxLen int) string {
	if !plainASCII(s) {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return utf8.RuneError
			}
			return r
		}, strings.ToValidUTF8(s, "\uFFFD"))
	}
	if maxLen > 0 && len(s) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// plainASCII reports whether s is printable ASCII only (the common case of
// LabelValue, checked without decoding runes).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

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
// NewMetric and the Declare functions call it; nothing else should.
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

var parseErrorsDesc = NewMetric("collector_parse_errors_total",
	"Malformed or unexpected input (lines, fields, replies, frames) a collector skipped since start; each kind is logged once.",
	prometheus.CounterValue, "collector")

// Problems counts and logs bad input for one collector: every occurrence
// counted, each distinct kind logged once at warn level. It is safe for
// concurrent use.
type Problems struct {
	name   string
	logger *slog.Logger
	mu     sync.Mutex
	count  uint64
	logged map[string]bool
}

// NewProblems returns the bad-input counter of collector name.
func NewProblems(name string, logger *slog.Logger) *Problems {
	return &Problems{name: name, logger: logger, logged: map[string]bool{}}
}

// Add counts n occurrences of a problem of the given kind; the first one of
// each kind is logged with err.
func (p *Problems) Add(kind string, n int, err error) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.count += uint64(n)
	first := !p.logged[kind]
	p.logged[kind] = true
	p.mu.Unlock()
	if first {
		p.logger.Warn("skipping bad input (logged once per kind, counted in stall_collector_parse_errors_total)",
			"kind", kind, "err", err)
	}
}

// Recover, deferred around one unit of background work (a sampler tick, a
// kernel log record), turns a panic, a bug that is never expected, into one
// problem of kind instead of the end of the exporter; what names the work.
func (p *Problems) Recover(kind, what string) {
	if r := recover(); r != nil {
		p.Add(kind, 1, fmt.Errorf("%s panicked: %v", what, r))
	}
}

// Count is the number of problems seen since start.
func (p *Problems) Count() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// Metric is stall_collector_parse_errors_total for this collector.
func (p *Problems) Metric() prometheus.Metric {
	return parseErrorsDesc.New(float64(p.Count()), p.name)
}

// LogBuffer collects log output, safe for concurrent use: the lines of a
// /probe?debug=true run, which a run abandoned at its deadline may still
// write while the answer reads them, and the logs tests check.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
