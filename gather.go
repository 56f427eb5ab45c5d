package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stall-exporter/stall_exporter/collector"
)

// constFamilies groups the constant metrics of one scrape (those made by
// collector.Metric) into the families a prometheus.Registry would gather
// for them: the same names, HELP and types, metrics sorted as the registry
// sorts them, and what it refuses (a series sent twice, two descriptors of
// one name that disagree on HELP or type) reported and left out. It does
// the registry's work at about a third of its cost per series, because
// collector.FamilyOf knows each descriptor's family, where the registry
// must look it up and check it for every metric and hash every series
// (docs/benchmarks.md). Every other metric (histograms, client_golang's
// collectors) goes through the registry. Not safe for concurrent use;
// reset makes it reusable.
type constFamilies struct {
	familyOf func(*prometheus.Desc) (collector.Family, bool) // collector.FamilyOf when nil (tests set their own)

	byDesc map[*prometheus.Desc]*dto.MetricFamily // nil: the descriptor conflicts with its family
	byName map[string]*dto.MetricFamily
	errs   []error
}

func (g *constFamilies) reset() {
	clear(g.byDesc)
	clear(g.byName)
	g.errs = g.errs[:0]
}

// add adds one metric made by collector.Metric (collector.FamilyOf knows
// its descriptor; any other is reported and left out).
func (g *constFamilies) add(m prometheus.Metric) {
	d := m.Desc()
	mf, seen := g.byDesc[d]
	if !seen {
		familyOf := g.familyOf
		if familyOf == nil {
			familyOf = collector.FamilyOf
		}
		f, ok := familyOf(d)
		if !ok {
			g.errs = append(g.errs, fmt.Errorf("metric of descriptor %v has no known family", d))
			return
		}
		mf = g.family(d, f)
	}
	if mf == nil {
		return // reported when its descriptor was first seen
	}
	pb := &dto.Metric{}
	if err := m.Write(pb); err != nil {
		g.errs = append(g.errs, fmt.Errorf("error collecting metric %v: %w", d, err))
		return
	}
	if !hasValueOf(pb, mf.GetType()) {
		g.errs = append(g.errs, fmt.Errorf("collected metric %s %s should be a %s", mf.GetName(), pb, mf.GetType()))
		return
	}
	mf.Metric = append(mf.Metric, pb)
}

// family returns the family of descriptor d, or nil when another
// descriptor of the same name disagrees on HELP or type.
func (g *constFamilies) family(d *prometheus.Desc, f collector.Family) *dto.MetricFamily {
	if g.byDesc == nil {
		g.byDesc, g.byName = map[*prometheus.Desc]*dto.MetricFamily{}, map[string]*dto.MetricFamily{}
	}
	typ := f.Type.ToDTO()
	mf := g.byName[f.Name]
	switch {
	case mf == nil:
		mf = &dto.MetricFamily{Name: &f.Name, Help: &f.Help, Type: typ}
		g.byName[f.Name] = mf
	case mf.GetHelp() != f.Help || mf.GetType() != *typ:
		g.errs = append(g.errs, fmt.Errorf("descriptor %v disagrees with the HELP %q or type %s of its family; its metrics are dropped",
			d, mf.GetHelp(), mf.GetType()))
		mf = nil
	}
	g.byDesc[d] = mf
	return mf
}

func hasValueOf(m *dto.Metric, t dto.MetricType) bool {
	switch t {
	case dto.MetricType_COUNTER:
		return m.Counter != nil
	case dto.MetricType_GAUGE:
		return m.Gauge != nil
	default:
		return m.Untyped != nil
	}
}

// families returns the families sorted by name, each with its metrics
// sorted and without repeated series.
func (g *constFamilies) families() []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(g.byName))
	for _, mf := range g.byName {
		if len(mf.Metric) == 0 {
			continue // every metric of it was refused (and reported)
		}
		mf.Metric = g.normalize(mf.GetName(), mf.Metric)
		out = append(out, mf)
	}
	slices.SortFunc(out, compareFamilies)
	return out
}

// normalize sorts a family's metrics as the registry does and drops (and
// reports) repeated series.
func (g *constFamilies) normalize(name string, ms []*dto.Metric) []*dto.Metric {
	if !slices.IsSortedFunc(ms, compareMetrics) {
		slices.SortStableFunc(ms, compareMetrics)
	}
	kept := ms[:1]
	for _, m := range ms[1:] {
		if compareMetrics(kept[len(kept)-1], m) == 0 {
			g.errs = append(g.errs, fmt.Errorf("collected metric %s %s was collected before with the same name and label values", name, m))
			continue
		}
		kept = append(kept, m)
	}
	return kept
}

// merge merges families gathered by a registry into ours: the result is
// sorted by name, and a name in both keeps the registry's family, with our
// metrics added when HELP and type agree (else they are reported and
// dropped).
func (g *constFamilies) merge(ours, theirs []*dto.MetricFamily) []*dto.MetricFamily {
	if len(theirs) == 0 {
		return ours
	}
	out := make([]*dto.MetricFamily, 0, len(ours)+len(theirs))
	i, j := 0, 0
	for i < len(ours) || j < len(theirs) {
		switch {
		case j == len(theirs) || i < len(ours) && ours[i].GetName() < theirs[j].GetName():
			out = append(out, ours[i])
			i++
		case i == len(ours) || theirs[j].GetName() < ours[i].GetName():
			out = append(out, theirs[j])
			j++
		default:
			a, b := ours[i], theirs[j]
			if a.GetHelp() != b.GetHelp() || a.GetType() != b.GetType() {
				g.errs = append(g.errs, fmt.Errorf("%s: %d metrics disagree with the HELP or type of the family gathered by the registry; dropped",
					a.GetName(), len(a.Metric)))
				out = append(out, b)
			} else {
				merged := &dto.MetricFamily{Name: b.Name, Help: b.Help, Type: b.Type, Unit: b.Unit}
				merged.Metric = g.normalize(b.GetName(), append(slices.Clone(b.Metric), a.Metric...))
				out = append(out, merged)
			}
			i++
			j++
		}
	}
	return out
}

func compareFamilies(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) }

// compareMetrics orders the metrics of one family as client_golang's
// registry does: by label count, then by label values in label-name order
// (the order of every metric's label pairs).
func compareMetrics(a, b *dto.Metric) int {
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
