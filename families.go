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
// sorts them, and what it refuses reported and left out. It costs a third
// of what the registry spends on a series, which looks each metric's
// family up, checks it and hashes every series (docs/benchmarks.md: the
// per-series goal needs it). Not safe for concurrent use; reset before use.
type constFamilies struct {
	byDesc map[*prometheus.Desc]*dto.MetricFamily // nil: the descriptor conflicts with its family
	byName map[string]*dto.MetricFamily
	errs   []error
}

func (g *constFamilies) reset() {
	if g.byDesc == nil {
		g.byDesc, g.byName = map[*prometheus.Desc]*dto.MetricFamily{}, map[string]*dto.MetricFamily{}
	}
	clear(g.byDesc)
	clear(g.byName)
	g.errs = g.errs[:0]
}

// add groups m if it is a constant metric of a collector.Metric
// descriptor, and reports whether it was one.
func (g *constFamilies) add(m prometheus.Metric) bool {
	d := m.Desc()
	mf, seen := g.byDesc[d]
	if !seen {
		f, ok := collector.FamilyOf(d)
		if !ok {
			return false
		}
		mf = g.family(d, f)
	}
	if mf == nil {
		return true // reported when its descriptor was first seen
	}
	pb := &dto.Metric{}
	if err := m.Write(pb); err != nil {
		g.errs = append(g.errs, fmt.Errorf("error collecting metric %v: %w", d, err))
		return true
	}
	if !hasValueOf(pb, mf.GetType()) {
		g.errs = append(g.errs, fmt.Errorf("collected metric %s %s should be a %s", mf.GetName(), pb, mf.GetType()))
		return true
	}
	mf.Metric = append(mf.Metric, pb)
	return true
}

// family returns the family of descriptor d, or nil when another
// descriptor of the same name disagrees on HELP or type.
func (g *constFamilies) family(d *prometheus.Desc, f collector.Family) *dto.MetricFamily {
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

// families returns ours and theirs (what registries gathered) in one list
// sorted by name, each family's metrics sorted and without repeated
// series. A name in more than one list keeps the family of the last
// registry, with the metrics of the others added when HELP and type agree
// (else theirs are reported and dropped).
func (g *constFamilies) families(theirs ...[]*dto.MetricFamily) []*dto.MetricFamily {
	for _, list := range theirs {
		for _, b := range list {
			if a := g.byName[b.GetName()]; a != nil && len(a.Metric) > 0 {
				if a.GetHelp() != b.GetHelp() || a.GetType() != b.GetType() {
					g.errs = append(g.errs, fmt.Errorf("%s: %d metrics disagree with the HELP or type of the family gathered by the registry; dropped",
						a.GetName(), len(a.Metric)))
				} else {
					b.Metric = append(b.Metric, a.Metric...)
				}
			}
			g.byName[b.GetName()] = b
		}
	}
	out := make([]*dto.MetricFamily, 0, len(g.byName))
	for _, mf := range g.byName {
		if len(mf.Metric) > 0 { // else every metric of it was refused, and reported
			mf.Metric = g.normalize(mf.GetName(), mf.Metric)
			out = append(out, mf)
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
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
