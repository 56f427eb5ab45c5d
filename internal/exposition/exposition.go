// Package exposition serves the exporter's constant samples in the Prometheus
// text format without client_golang's protobuf (dto) round trip, and merges
// them with the families client_golang gathers (Go runtime metrics,
// histograms) into one exposition that is byte for byte what promhttp would
// have written.
//
// Why: on the scrape path, a constant metric made with
// prometheus.MustNewConstMetric costs about 15 allocations on its way to the
// wire (label pairs as pointers to strings, a dto.Metric, the registry's
// duplicate check hashing every label, the expfmt escaping copy). A Sample is
// one allocation: its Desc knows the family's name, HELP, TYPE and label order
// up front, so writing it is appending bytes. Everything that is not a Sample
// (histograms, the Go collector's metrics) still goes through a
// prometheus.Registry and expfmt, unchanged.
package exposition

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
)

// inlineLabels is how many label values a Sample holds without a second
// allocation; every family of the exporter has at most four labels.
const inlineLabels = 4

// Desc describes one family of constant samples: name, HELP, TYPE and label
// names, with the parts of its text lines prepared once.
type Desc struct {
	prom   *prometheus.Desc
	name   string
	help   string
	typ    dto.MetricType
	labels []string
	// order lists label positions sorted by label name: client_golang
	// writes label pairs in that order, and sorts a family's samples by the
	// label values in that order.
	order []int
	// header is "# HELP <name> <help>\n# TYPE <name> <type>\n".
	header []byte
	// prefix[i] is `{<label>="` for the first label in name order and
	// `,<label>="` for the others.
	prefix []string
}

// NewDesc describes a family. typ is prometheus.CounterValue,
// prometheus.GaugeValue or prometheus.UntypedValue. It panics when the name
// or a label name is not a valid legacy Prometheus name, or a label name
// repeats: those are programming errors, found at start.
func NewDesc(name, help string, typ prometheus.ValueType, labels ...string) *Desc {
	if !model.LegacyValidation.IsValidMetricName(name) {
		panic(fmt.Sprintf("exposition: invalid metric name %q", name))
	}
	d := &Desc{
		prom:   prometheus.NewDesc(name, help, labels, nil),
		name:   name,
		help:   help,
		labels: slices.Clone(labels),
		order:  make([]int, len(labels)),
		prefix: make([]string, len(labels)),
	}
	switch typ {
	case prometheus.CounterValue:
		d.typ = dto.MetricType_COUNTER
	case prometheus.GaugeValue:
		d.typ = dto.MetricType_GAUGE
	case prometheus.UntypedValue:
		d.typ = dto.MetricType_UNTYPED
	default:
		panic(fmt.Sprintf("exposition: %s: unknown value type %d", name, typ))
	}
	for i, l := range labels {
		if !model.LegacyValidation.IsValidLabelName(l) || strings.HasPrefix(l, "__") || slices.Index(labels, l) != i {
			panic(fmt.Sprintf("exposition: %s: invalid or repeated label name %q", name, l))
		}
		d.order[i] = i
	}
	sort.SliceStable(d.order, func(a, b int) bool { return labels[d.order[a]] < labels[d.order[b]] })
	for i, pos := range d.order {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		d.prefix[i] = sep + labels[pos] + `="`
	}
	h := append([]byte("# HELP "), name...)
	h = append(h, ' ')
	h = appendEscaped(h, help, false)
	h = append(h, "\n# TYPE "...)
	h = append(h, name...)
	h = append(h, ' ')
	h = append(h, strings.ToLower(d.typ.String())...)
	d.header = append(h, '\n')
	return d
}

// PromDesc is the client_golang descriptor of the family (what a Sample's
// Desc method returns).
func (d *Desc) PromDesc() *prometheus.Desc { return d.prom }

// Name is the family name.
func (d *Desc) Name() string { return d.name }

// Sample is one constant sample of a Desc's family. It implements
// prometheus.Metric, so it travels on the collectors' channels like any
// metric and still works with a plain prometheus.Registry.
type Sample struct {
	d      *Desc
	v      float64
	inline [inlineLabels]string
	more   []string // all label values when there are more than inlineLabels
}

var (
	errLabelCount = errors.New("wrong number of label values")
	errLabelUTF8  = errors.New("label value is not valid UTF-8")
)

// NewSample makes a sample. labelValues are in the order of the Desc's
// label names; a wrong count or a value that is not valid UTF-8 is an error
// (as for prometheus.NewConstMetric).
func NewSample(d *Desc, v float64, labelValues ...string) (*Sample, error) {
	if len(labelValues) != len(d.labels) {
		return nil, fmt.Errorf("%s: %w: got %d, want %d", d.name, errLabelCount, len(labelValues), len(d.labels))
	}
	for _, lv := range labelValues {
		if !utf8.ValidString(lv) {
			return nil, fmt.Errorf("%s: %w: %q", d.name, errLabelUTF8, lv)
		}
	}
	s := &Sample{d: d, v: v}
	if len(labelValues) <= inlineLabels {
		copy(s.inline[:], labelValues)
	} else {
		s.more = slices.Clone(labelValues)
	}
	return s, nil
}

// MustNewSample is NewSample that panics on error.
func MustNewSample(d *Desc, v float64, labelValues ...string) *Sample {
	s, err := NewSample(d, v, labelValues...)
	if err != nil {
		panic(err)
	}
	return s
}

// label returns the i-th label value in the Desc's order.
func (s *Sample) label(i int) string {
	if s.more != nil {
		return s.more[i]
	}
	return s.inline[i]
}

// Desc implements prometheus.Metric.
func (s *Sample) Desc() *prometheus.Desc { return s.d.prom }

// Write implements prometheus.Metric: label pairs sorted by name, and the
// value as a counter, gauge or untyped value, as a const metric writes them.
func (s *Sample) Write(m *dto.Metric) error {
	m.Label = make([]*dto.LabelPair, len(s.d.order))
	for i, pos := range s.d.order {
		m.Label[i] = &dto.LabelPair{Name: &s.d.labels[pos], Value: new(s.label(pos))}
	}
	v := s.v
	switch s.d.typ {
	case dto.MetricType_COUNTER:
		m.Counter = &dto.Counter{Value: &v}
	case dto.MetricType_GAUGE:
		m.Gauge = &dto.Gauge{Value: &v}
	default:
		m.Untyped = &dto.Untyped{Value: &v}
	}
	return nil
}

// compareSamples orders two samples of one family as client_golang does:
// by label values, taken in label-name order.
func compareSamples(a, b *Sample) int {
	for _, pos := range a.d.order {
		if c := strings.Compare(a.label(pos), b.label(pos)); c != 0 {
			return c
		}
	}
	return 0
}

// appendSample appends one sample line.
func appendSample(b []byte, s *Sample) []byte {
	d := s.d
	b = append(b, d.name...)
	for i, pos := range d.order {
		b = append(b, d.prefix[i]...)
		b = appendEscaped(b, s.label(pos), true)
		b = append(b, '"')
	}
	if len(d.order) > 0 {
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = AppendFloat(b, s.v)
	return append(b, '\n')
}

// AppendFloat appends v as the text format writes values: 0, 1 and -1 as
// integers, NaN, +Inf and -Inf by name, anything else in the shortest 'g'
// form that reads back exactly.
func AppendFloat(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendEscaped appends s with backslash and newline escaped, and double
// quotes too inside a label value.
func appendEscaped(b []byte, s string, quote bool) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		var esc string
		switch s[i] {
		case '\\':
			esc = `\\`
		case '\n':
			esc = `\n`
		case '"':
			if !quote {
				continue
			}
			esc = `\"`
		default:
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, esc...)
		start = i + 1
	}
	return append(b, s[start:]...)
}
