package exposition

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Scrape collects the samples of one exposition and writes them, merged with
// families gathered by client_golang. It is not safe for concurrent use;
// Reset makes it reusable (keep one per concurrent request, e.g. in a
// sync.Pool).
type Scrape struct {
	index map[*Desc]int
	fams  []family
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

// Len is the number of samples added since the last Reset.
func (s *Scrape) Len() int {
	n := 0
	for i := range s.fams {
		n += len(s.fams[i].samples)
	}
	return n
}

// Reset forgets every sample, keeping the memory.
func (s *Scrape) Reset() {
	s.fams = s.fams[:cap(s.fams)]
	for i := range s.fams {
		clear(s.fams[i].samples) // drop the references, keep the arrays
		s.fams[i].samples = s.fams[i].samples[:0]
		s.fams[i].d = nil
	}
	s.fams = s.fams[:0]
	clear(s.index)
	s.out.Reset()
	s.errs = s.errs[:0]
}

// Encode writes the exposition in format: the added samples and gathered,
// families from a prometheus.Gatherer (sorted by name, as Registry.Gather
// returns them), merged by name into one sorted exposition. With a non-empty
// names filter only those families are written (promhttp's name[]). The
// result is valid until the next Reset. Errors are what a
// prometheus.Registry would have reported (a sample repeated within a
// family, two descriptors of one name that disagree); the offending samples
// are left out and the rest is written, as promhttp.ContinueOnError does.
func (s *Scrape) Encode(format expfmt.Format, gathered []*dto.MetricFamily, names map[string]bool) ([]byte, []error) {
	s.normalize()
	if format != s.format {
		s.format, s.text = format, format.FormatType() == expfmt.TypeTextPlain
	}
	text := s.text
	var enc expfmt.Encoder
	if !text {
		enc = expfmt.NewEncoder(&s.out, format)
	}
	i, j := 0, 0
	for i < len(s.fams) || j < len(gathered) {
		var f *family
		var mf *dto.MetricFamily
		switch {
		case j == len(gathered) || i < len(s.fams) && s.fams[i].d.name < gathered[j].GetName():
			f = &s.fams[i]
			i++
		case i == len(s.fams) || gathered[j].GetName() < s.fams[i].d.name:
			mf = gathered[j]
			j++
		default: // one name from both sources: rare, so convert and merge
			mf = s.mergeInto(gathered[j], &s.fams[i])
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
		switch {
		case f != nil && text:
			s.appendFamily(f)
		case f != nil:
			mf = f.toDTO()
			fallthrough
		default:
			if enc == nil {
				enc = expfmt.NewEncoder(&s.out, format)
			}
			if err := enc.Encode(mf); err != nil {
				s.errs = append(s.errs, fmt.Errorf("encoding %s: %w", name, err))
			}
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			s.errs = append(s.errs, err)
		}
	}
	return s.out.Bytes(), s.errs
}

// normalize sorts the families by name and their samples by label values,
// merges families of one name from different descriptors, and drops what a
// registry would refuse.
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

// mergeInto returns gathered with f's samples added, when both describe the
// same family; otherwise it keeps gathered and reports f as dropped.
func (s *Scrape) mergeInto(gathered *dto.MetricFamily, f *family) *dto.MetricFamily {
	if gathered.GetHelp() != f.d.help || gathered.GetType() != f.d.typ {
		s.errs = append(s.errs, fmt.Errorf("%s: gathered family and samples disagree on HELP or TYPE; dropped %d samples", f.d.name, len(f.samples)))
		return gathered
	}
	merged := &dto.MetricFamily{Name: gathered.Name, Help: gathered.Help, Type: gathered.Type}
	merged.Metric = append(slices.Clone(gathered.Metric), f.toDTO().Metric...)
	slices.SortStableFunc(merged.Metric, compareDTO)
	kept := merged.Metric[:1]
	for _, m := range merged.Metric[1:] {
		if compareDTO(kept[len(kept)-1], m) == 0 {
			s.errs = append(s.errs, fmt.Errorf("collected metric %s %s was collected before with the same name and label values", f.d.name, m))
			continue
		}
		kept = append(kept, m)
	}
	merged.Metric = kept
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
