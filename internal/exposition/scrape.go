package exposition

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape collects the metrics of one exposition and writes them sorted by
// family and label values, as promhttp does. It is not safe for concurrent
// use; Reset makes it reusable (keep one per concurrent request, e.g. in a
// sync.Pool).
type Scrape struct {
	index map[*Desc]int
	fams  []family // Samples, by descriptor
	other map[string]*dto.MetricFamily
	out   bytes.Buffer
	errs  []error

	// The last format and whether it is the text format: FormatType parses
	// the string (three allocations), and a server asks the same each time.
	format expfmt.Format
	text   bool
}

type family struct {
	d       *Desc
	samples []*Sample
}

// Add adds one sample.
func (s *Scrape) Add(x *Sample) {
	if s.index == nil {
		s.index = map[*Desc]int{}
	}
	i, ok := s.index[x.d]
	if !ok {
		i = len(s.fams)
		s.index[x.d] = i
		if i < cap(s.fams) {
			s.fams = s.fams[:i+1]
			s.fams[i].d = x.d
		} else {
			s.fams = append(s.fams, family{d: x.d})
		}
	}
	s.fams[i].samples = append(s.fams[i].samples, x)
}

// AddMetric adds any prometheus.Metric. A Sample is added as by Add; any
// other metric (a histogram, the Go collector's metrics) is written to its
// protobuf form and grouped by the family its descriptor names, with the
// checks a prometheus.Registry makes: a descriptor in error, a metric whose
// Write fails, or one whose TYPE or HELP disagrees with its family's is
// reported and left out.
func (s *Scrape) AddMetric(m prometheus.Metric) {
	if x, ok := m.(*Sample); ok {
		s.Add(x)
		return
	}
	name, help, err := describe(m.Desc())
	if err != nil {
		s.errs = append(s.errs, err)
		return
	}
	pb := &dto.Metric{}
	if err := m.Write(pb); err != nil {
		s.errs = append(s.errs, fmt.Errorf("collected metric %s: %w", name, err))
		return
	}
	typ, ok := metricType(pb)
	if !ok {
		s.errs = append(s.errs, fmt.Errorf("collected metric %s has no value of a known type", name))
		return
	}
	if s.other == nil {
		s.other = map[string]*dto.MetricFamily{}
	}
	mf := s.other[name]
	switch {
	case mf == nil:
		mf = &dto.MetricFamily{Name: new(name), Help: new(help), Type: typ.Enum()}
		s.other[name] = mf
	case mf.GetType() != typ || mf.GetHelp() != help:
		s.errs = append(s.errs, fmt.Errorf("collected metric %s has TYPE %s and HELP %q, but its family has %s and %q",
			name, typ, help, mf.GetType(), mf.GetHelp()))
		return
	}
	mf.Metric = append(mf.Metric, pb)
}

func metricType(m *dto.Metric) (dto.MetricType, bool) {
	switch {
	case m.Gauge != nil:
		return dto.MetricType_GAUGE, true
	case m.Counter != nil:
		return dto.MetricType_COUNTER, true
	case m.Summary != nil:
		return dto.MetricType_SUMMARY, true
	case m.Untyped != nil:
		return dto.MetricType_UNTYPED, true
	case m.Histogram != nil:
		return dto.MetricType_HISTOGRAM, true
	}
	return 0, false
}

// Len is the number of metrics added since the last Reset.
func (s *Scrape) Len() int {
	n := 0
	for i := range s.fams {
		n += len(s.fams[i].samples)
	}
	for _, mf := range s.other {
		n += len(mf.Metric)
	}
	return n
}

// Reset forgets every metric, keeping the memory.
func (s *Scrape) Reset() {
	s.fams = s.fams[:cap(s.fams)]
	for i := range s.fams {
		clear(s.fams[i].samples) // drop the references, keep the arrays
		s.fams[i].samples = s.fams[i].samples[:0]
		s.fams[i].d = nil
	}
	s.fams = s.fams[:0]
	clear(s.index)
	clear(s.other)
	s.out.Reset()
	s.errs = s.errs[:0]
}

// Encode writes the exposition in format, every family sorted by name and
// its metrics by label values; with a non-empty names filter only those
// families (promhttp's name[]). The result is valid until the next Reset.
// Errors are what a prometheus.Registry would have reported (see AddMetric;
// a series repeated within a family; two descriptors of one name that
// disagree); the offending metrics are left out and the rest is written, as
// with promhttp.ContinueOnError.
func (s *Scrape) Encode(format expfmt.Format, names map[string]bool) ([]byte, []error) {
	s.normalize()
	if format != s.format {
		s.format, s.text = format, format.FormatType() == expfmt.TypeTextPlain
	}
	others := s.sortedOthers()
	var enc expfmt.Encoder
	if !s.text {
		enc = expfmt.NewEncoder(&s.out, format)
	}
	i, j := 0, 0
	for i < len(s.fams) || j < len(others) {
		var f *family
		var mf *dto.MetricFamily
		switch {
		case j == len(others) || i < len(s.fams) && s.fams[i].d.name < others[j].GetName():
			f = &s.fams[i]
			i++
		case i == len(s.fams) || others[j].GetName() < s.fams[i].d.name:
			mf = others[j]
			j++
		default: // one name from both kinds: rare, so convert and merge
			mf = s.mergeInto(others[j], &s.fams[i])
			i++
			j++
		}
		name := ""
		if f != nil {
			name = f.d.name
		} else {
			name = mf.GetName()
		}
		if len(names) > 0 && !names[name] {
			continue
		}
		var err error
		switch {
		case f != nil && s.text:
			s.appendFamily(f)
		case f != nil:
			err = enc.Encode(f.toDTO())
		case s.text && model.LegacyValidation.IsValidMetricName(name):
			// What the text encoder does after escaping, which leaves a
			// legacy name alone but copies the whole family to do so.
			_, err = expfmt.MetricFamilyToText(&s.out, mf)
		default:
			if enc == nil {
				enc = expfmt.NewEncoder(&s.out, format)
			}
			err = enc.Encode(mf)
		}
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("encoding %s: %w", name, err))
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			s.errs = append(s.errs, err)
		}
	}
	return s.out.Bytes(), s.errs
}

// normalize sorts the Sample families by name and their samples by label
// values, merges families of one name from different descriptors, and drops
// what a registry would refuse.
func (s *Scrape) normalize() {
	slices.SortStableFunc(s.fams, func(a, b family) int { return strings.Compare(a.d.name, b.d.name) })
	// Compact by swapping, not overwriting, so every slot keeps its own
	// sample array for reuse after Reset.
	n := 0
	for k := range s.fams {
		f := &s.fams[k]
		if n > 0 && s.fams[n-1].d.name == f.d.name {
			prev := &s.fams[n-1]
			if !sameFamily(prev.d, f.d) {
				s.errs = append(s.errs, fmt.Errorf("%s: two descriptors with different HELP, TYPE or labels; dropped %d samples of the second", f.d.name, len(f.samples)))
			} else {
				prev.samples = append(prev.samples, f.samples...)
			}
			continue
		}
		s.fams[n], s.fams[k] = s.fams[k], s.fams[n]
		n++
	}
	s.fams = s.fams[:n]
	for i := range s.fams {
		f := &s.fams[i]
		if !slices.IsSortedFunc(f.samples, compareSamples) {
			slices.SortStableFunc(f.samples, compareSamples)
		}
		kept := f.samples[:1]
		for _, x := range f.samples[1:] {
			if compareSamples(kept[len(kept)-1], x) == 0 {
				s.errs = append(s.errs, fmt.Errorf("collected metric %s was collected before with the same name and label values", string(appendSample(nil, x))))
				continue
			}
			kept = append(kept, x)
		}
		f.samples = kept
	}
}

// sortedOthers returns the dto families by name, each sorted and without
// repeated series.
func (s *Scrape) sortedOthers() []*dto.MetricFamily {
	if len(s.other) == 0 {
		return nil
	}
	out := make([]*dto.MetricFamily, 0, len(s.other))
	for _, mf := range s.other {
		mf.Metric = s.sortDTO(mf.GetName(), mf.Metric)
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

func (s *Scrape) sortDTO(name string, ms []*dto.Metric) []*dto.Metric {
	slices.SortStableFunc(ms, compareDTO)
	kept := ms[:1]
	for _, m := range ms[1:] {
		if compareDTO(kept[len(kept)-1], m) == 0 {
			s.errs = append(s.errs, fmt.Errorf("collected metric %s %s was collected before with the same name and label values", name, m))
			continue
		}
		kept = append(kept, m)
	}
	return kept
}

func sameFamily(a, b *Desc) bool {
	return a.help == b.help && a.typ == b.typ && slices.Equal(a.labels, b.labels)
}

func (s *Scrape) appendFamily(f *family) {
	b := s.out.AvailableBuffer()
	b = append(b, f.d.header...)
	for _, x := range f.samples {
		b = appendSample(b, x)
		if len(b) > 32<<10 {
			s.out.Write(b)
			b = s.out.AvailableBuffer()
		}
	}
	s.out.Write(b)
}

// toDTO converts a family for the protobuf formats and for merging.
func (f *family) toDTO() *dto.MetricFamily {
	mf := &dto.MetricFamily{Name: &f.d.name, Help: &f.d.help, Type: f.d.typ.Enum()}
	mf.Metric = make([]*dto.Metric, len(f.samples))
	for i, x := range f.samples {
		mf.Metric[i] = &dto.Metric{}
		_ = x.Write(mf.Metric[i]) // never fails
	}
	return mf
}

// mergeInto returns mf with f's samples added, when both describe the same
// family; otherwise it keeps mf and reports f as dropped.
func (s *Scrape) mergeInto(mf *dto.MetricFamily, f *family) *dto.MetricFamily {
	if mf.GetHelp() != f.d.help || mf.GetType() != f.d.typ {
		s.errs = append(s.errs, fmt.Errorf("%s: metrics and samples of this family disagree on HELP or TYPE; dropped %d samples", f.d.name, len(f.samples)))
		return mf
	}
	merged := &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type}
	merged.Metric = s.sortDTO(f.d.name, append(slices.Clone(mf.Metric), f.toDTO().Metric...))
	return merged
}

// compareDTO orders metrics of one family as client_golang's MetricSorter
// does (label count, then label values in order).
func compareDTO(a, b *dto.Metric) int {
	if c := cmp.Compare(len(a.Label), len(b.Label)); c != 0 {
		return c
	}
	for i := range a.Label {
		if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
			return c
		}
	}
	return 0
}
