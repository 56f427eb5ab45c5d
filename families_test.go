package main

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/stall-exporter/stall_exporter/collector"
)

// refusedHelp is the HELP of stall_exporter_requests_refused_total.
func refusedHelp() string {
	f, _ := collector.FamilyOf(refusedDesc.Desc)
	return f.Help
}

// replay sends fixed metrics, as an unchecked prometheus.Collector and as
// a collector.Collector.
type replay []prometheus.Metric

func (replay) Describe(chan<- *prometheus.Desc) {}
func (r replay) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r {
		ch <- m
	}
}

func (r replay) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	r.Collect(ch)
	return nil
}

// registryGather is what client_golang's registry gathers for ms.
func registryGather(t *testing.T, ms ...prometheus.Metric) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(replay(ms))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestConstFamiliesAsRegistry: the constant metrics of a scrape are
// grouped into the families a registry gathers for them — the same order
// of families and of metrics whatever order they came in, label values
// escaped alike — and a series sent twice is reported and sent once, as
// the registry refuses it. The grouping exists because it costs a third of
// the registry's work per series (docs/benchmarks.md); this is its
// contract.
func TestConstFamiliesAsRegistry(t *testing.T) {
	ms := []prometheus.Metric{
		scrapeSuccessDesc.New(1, "zoneinfo"), refusedDesc.New(3, "probe"), scrapeSuccessDesc.New(0, `we"ird\col`+"\n"),
		scrapeDurationDesc.New(math.NaN(), "a"), scrapeSuccessDesc.New(1, "日本"), refusedDesc.New(math.Inf(1), "metrics"),
		connsEvictedDesc.New(7), scrapeSuccessDesc.New(1, "aa"), scrapeDurationDesc.New(-1e-9, "b"),
	}
	var g constFamilies
	g.reset()
	for _, m := range append(ms, scrapeSuccessDesc.New(5, "aa")) {
		if !g.add(m) {
			t.Fatalf("%v was not grouped", m.Desc())
		}
	}
	got, want := g.families(nil), registryGather(t, ms...)
	if len(got) != len(want) {
		t.Fatalf("%d families, the registry %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("family %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
	if len(g.errs) != 1 || !strings.Contains(g.errs[0].Error(), "collected before with the same name and label values") {
		t.Errorf("errors %v, want one for the repeated series", g.errs)
	}

	g.reset() // reused: nothing carried over
	g.add(connsEvictedDesc.New(2))
	if got := g.families(nil); len(got) != 1 || got[0].GetMetric()[0].GetCounter().GetValue() != 2 || len(g.errs) != 0 {
		t.Errorf("after reset: %v, %v", got, g.errs)
	}
}

// TestGatherMerge: what the grouping does not know (a histogram, a
// counter vector, a descriptor not made by collector.NewMetric) goes
// through the registry, and the result is one sorted list: a family of the
// same name, HELP and type as a constant one is merged with it; one that
// disagrees keeps the registry's metrics and reports the constant ones; a
// histogram sent on a gauge's descriptor is refused and the rest served.
func TestGatherMerge(t *testing.T) {
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stall_test_seconds", Help: "A histogram.", Buckets: []float64{1}})
	hist.Observe(0.5)
	sameName := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stall_exporter_requests_refused_total",
		Help: refusedHelp()}, []string{"handler"})
	sameName.WithLabelValues("other").Add(2)
	otherHelp := prometheus.MustNewConstMetric(prometheus.NewDesc("stall_exporter_idle_connections_evicted_total", "Another HELP.", nil, nil),
		prometheus.CounterValue, 9)
	c := replay{refusedDesc.New(1, "metrics"), hist, sameName.WithLabelValues("other"), connsEvictedDesc.New(4), otherHelp,
		prometheus.MustNewConstHistogram(scrapeSuccessDesc.Desc, 1, 1, map[float64]uint64{1: 1}, "sent as a histogram")}
	s := newScraper(nil, scrapeTimeout{limit: time.Second}, slog.New(slog.DiscardHandler))
	mfs, done, err := s.gather(context.Background(), newEntries(testBuilt(c), slog.New(slog.DiscardHandler)))
	defer done()

	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if got := strings.Join(names, " "); got != "stall_collector_parse_errors_total stall_exporter_idle_connections_evicted_total "+
		"stall_exporter_requests_refused_total stall_scrape_collector_duration_seconds stall_scrape_collector_success stall_test_seconds" {
		t.Errorf("families %s", got)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "stall_exporter_requests_refused_total":
			if len(mf.Metric) != 2 || mf.Metric[0].Label[0].GetValue() != "metrics" || mf.Metric[1].Label[0].GetValue() != "other" {
				t.Errorf("merged family %v, want metrics then other", mf)
			}
		case "stall_exporter_idle_connections_evicted_total":
			if mf.GetHelp() != "Another HELP." || len(mf.Metric) != 1 || mf.Metric[0].GetCounter().GetValue() != 9 {
				t.Errorf("the disagreeing family %v, want the registry's alone", mf)
			}
		case "stall_scrape_collector_success":
			if len(mf.Metric) != 1 || mf.Metric[0].GetGauge().GetValue() != 1 {
				t.Errorf("%v, want the run's success alone", mf)
			}
		}
	}
	var errs prometheus.MultiError
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Errorf("errors %v, want the disagreeing family and the histogram", err)
	}
}

// TestScratchBackThroughDone: a scrape's scratch (its metric arrays and
// grouping) goes back to the pool only through the gatherer's done, after
// promhttp has encoded the families; a scrape that has not called done yet
// does not share it with the next.
func TestScratchBackThroughDone(t *testing.T) {
	s := newScraper(nil, scrapeTimeout{limit: time.Second}, slog.New(slog.DiscardHandler))
	entries := newEntries(testBuilt(replay{connsEvictedDesc.New(3)}), slog.New(slog.DiscardHandler))
	first, done1, err := s.gather(context.Background(), entries)
	if err != nil {
		t.Fatal(err)
	}
	_, done2, _ := s.gather(context.Background(), entries)
	if len(s.free) != 0 {
		t.Fatalf("%d scratches in the pool before done", len(s.free))
	}
	done1()
	done2()
	if len(s.free) != 2 {
		t.Fatalf("%d scratches in the pool after both dones, want 2", len(s.free))
	}
	var evicted float64
	for _, mf := range first {
		if mf.GetName() == "stall_exporter_idle_connections_evicted_total" {
			evicted = mf.Metric[0].GetCounter().GetValue()
		}
	}
	if evicted != 3 {
		t.Errorf("the first scrape's families after done: evicted %v, want 3", evicted)
	}
}
