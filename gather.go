package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stall-exporter/stall_exporter/collector"
)

// scrapeRun is the collectors of one request, run concurrently under the
// request's context, as the unchecked prometheus.Collector of a registry of
// its own (Describe sends nothing: what each collector exports depends on
// the host and the target), beside the handler's static collectors
// (registering client_golang's Go collector costs more than gathering it,
// so a run is kept for later requests with its registry, its handler and
// the arrays of its metrics). The registry gathers only what consts cannot
// group: client_golang's own metrics (histograms, counter vectors). Not
// safe for concurrent use.
type scrapeRun struct {
	ctx     context.Context
	entries []*entry
	reg     *prometheus.Registry
	handler http.Handler          // promhttp's, with the run as its gatherer
	slots   [][]prometheus.Metric // each entry's metrics, arrays kept between requests
	consts  constFamilies
}

// newScrapeRun returns a run registered in a new registry with static.
func newScrapeRun(static ...prometheus.Collector) *scrapeRun {
	r := &scrapeRun{reg: prometheus.NewRegistry()}
	r.reg.MustRegister(r)
	r.reg.MustRegister(static...)
	return r
}

func (*scrapeRun) Describe(chan<- *prometheus.Desc) {}

func (r *scrapeRun) Collect(ch chan<- prometheus.Metric) {
	if n := len(r.entries); len(r.slots) < n {
		r.slots = append(r.slots, make([][]prometheus.Metric, n-len(r.slots))...)
	}
	var wg sync.WaitGroup
	for i, en := range r.entries {
		wg.Go(func() { en.run(r.ctx, &r.slots[i]) })
	}
	wg.Wait()
	for i := range r.entries {
		for _, m := range r.slots[i] {
			if !r.consts.add(m) {
				ch <- m
			}
		}
		clear(r.slots[i]) // drop the metrics, keep the array
		r.slots[i] = r.slots[i][:0]
	}
}

// gather gathers the run's registry and returns every family: the
// registry's and the constant ones, merged. The error lists what a
// registry would have refused (a series sent twice, descriptors of one
// name that disagree); that is left out.
func (r *scrapeRun) gather() ([]*dto.MetricFamily, error) {
	r.consts.reset()
	theirs, err := r.reg.Gather()
	var errs prometheus.MultiError
	if err != nil && !errors.As(err, &errs) {
		errs = prometheus.MultiError{err}
	}
	mfs := r.consts.families(theirs)
	return mfs, append(errs, r.consts.errs...).MaybeUnwrap()
}

// Gather implements prometheus.TransactionalGatherer for promhttp. The
// families are allocated for this request, so there is nothing to release.
func (r *scrapeRun) Gather() ([]*dto.MetricFamily, func(), error) {
	mfs, err := r.gather()
	return mfs, func() {}, err
}

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

// families returns ours and theirs (a registry's) in one list sorted by
// name, each family's metrics sorted and without repeated series. A name
// in both keeps the registry's family, with our metrics added when HELP and
// type agree (else ours are reported and dropped).
func (g *constFamilies) families(theirs []*dto.MetricFamily) []*dto.MetricFamily {
	for _, b := range theirs {
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
