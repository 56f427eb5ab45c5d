package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/stall-exporter/stall_exporter/collector"
)

// testFamilies declares descriptors the way collector.NewMetric does,
// without documenting them (TestMetricsDoc would refuse test families).
type testFamilies map[*prometheus.Desc]collector.Family

func (tf testFamilies) metric(name, help string, typ prometheus.ValueType, labels ...string) collector.Metric {
	d := prometheus.NewDesc(name, help, labels, nil)
	tf[d] = collector.Family{Name: name, Help: help, Type: typ}
	return collector.Metric{Desc: d, Type: typ}
}

func (tf testFamilies) of(d *prometheus.Desc) (collector.Family, bool) {
	f, ok := tf[d]
	return f, ok
}

// replayCollector sends fixed metrics, unchecked.
type replayCollector []prometheus.Metric

func (replayCollector) Describe(chan<- *prometheus.Desc) {}
func (r replayCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r {
		ch <- m
	}
}

func registryGather(t *testing.T, ms ...prometheus.Metric) ([]*dto.MetricFamily, error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(replayCollector(ms))
	return reg.Gather()
}

func sameFamilies(t *testing.T, got, want []*dto.MetricFamily) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d families, registry %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("family %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// TestConstFamiliesMatchRegistry: the families are those a registry
// gathers for the same metrics, in the same order, with label pairs in
// name order and metrics sorted by label values whatever order they came
// in.
func TestConstFamiliesMatchRegistry(t *testing.T) {
	tf := testFamilies{}
	zone := tf.metric("test_zone_bytes", "Zone watermark; a \\ and a\nnewline.", prometheus.GaugeValue, "node", "zone", "level")
	disk := tf.metric("test_disk_reads_total", `Reads "completed".`, prometheus.CounterValue, "device")
	plain := tf.metric("test_plain", "No labels.", prometheus.UntypedValue)
	wide := tf.metric("test_wide", "Five labels.", prometheus.GaugeValue, "e", "d", "c", "b", "a")
	// A second descriptor of one family (same name, HELP, type): merged.
	disk2 := tf.metric("test_disk_reads_total", `Reads "completed".`, prometheus.CounterValue, "device")
	ms := []prometheus.Metric{
		zone.New(4096, "0", "Normal", "min"), disk.New(3, "sdb"), zone.New(1.5e10, "0", "DMA32", "high"),
		disk.New(0, "nvme0n1"), plain.New(math.NaN()), disk.New(1, `we"ird\dev`+"\n"), zone.New(-1, "1", "Normal", "low"),
		disk2.New(math.Inf(1), "sda"), disk.New(math.Inf(-1), "日本"), zone.New(0.1, "0", "Normal", "high"),
		wide.New(1e-9, "5", "4", "3", "2", "1"), wide.New(123456789012345, "1", "2", "3", "4", "5"), disk2.New(7, "sdaa"),
	}
	want, err := registryGather(t, ms...)
	if err != nil {
		t.Fatal(err)
	}
	g := constFamilies{familyOf: tf.of}
	for _, m := range ms {
		g.add(m)
	}
	sameFamilies(t, g.families(), want)
	if len(g.errs) > 0 {
		t.Error(g.errs)
	}

	// Reused after reset: nothing carried over.
	g.reset()
	g.add(plain.New(2))
	if got := g.families(); len(got) != 1 || got[0].GetMetric()[0].GetUntyped().GetValue() != 2 {
		t.Errorf("after reset: %v", got)
	}
}

// TestConstFamiliesRefuse: what the registry refuses (a series sent twice,
// a descriptor whose HELP or type disagrees with its family's, a metric of
// an unknown descriptor) is reported and left out, the first series kept,
// and the rest gathered.
func TestConstFamiliesRefuse(t *testing.T) {
	tf := testFamilies{}
	dup := tf.metric("test_dup", "Dup.", prometheus.GaugeValue, "k")
	otherHelp := tf.metric("test_dup", "Another HELP.", prometheus.GaugeValue, "k")
	otherType := tf.metric("test_dup", "Dup.", prometheus.CounterValue, "k")
	ok := tf.metric("test_ok", "Fine.", prometheus.GaugeValue)
	unknown := collector.Metric{Desc: prometheus.NewDesc("test_unknown", "?", nil, nil), Type: prometheus.GaugeValue}
	ms := []prometheus.Metric{dup.New(1, "a"), dup.New(2, "a"), otherHelp.New(3, "b"), otherType.New(4, "c"), ok.New(5)}

	g := constFamilies{familyOf: tf.of}
	for _, m := range append(ms, unknown.New(6)) {
		g.add(m)
	}
	got := g.families()
	if len(got) != 2 || got[0].GetName() != "test_dup" || len(got[0].Metric) != 1 || got[0].Metric[0].GetGauge().GetValue() != 1 ||
		got[1].GetName() != "test_ok" {
		t.Errorf("families %v", got)
	}
	var msgs []string
	for _, err := range g.errs {
		msgs = append(msgs, err.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"collected before with the same name and label values", "Another HELP", "no known family"} {
		if !strings.Contains(all, want) {
			t.Errorf("no error saying %q in:\n%s", want, all)
		}
	}
	if len(g.errs) != 4 {
		t.Errorf("%d errors, want 4 (duplicate, HELP, type, unknown):\n%s", len(g.errs), all)
	}
	if _, err := registryGather(t, ms...); err == nil {
		t.Error("the registry accepted what constFamilies refused")
	}
}

// TestConstFamiliesAllRefused: a family whose every metric is refused (a
// histogram sent on a gauge's descriptor) is left out, reported, and does
// not take the other families with it.
func TestConstFamiliesAllRefused(t *testing.T) {
	tf := testFamilies{}
	gauge := tf.metric("test_gauge", "A gauge.", prometheus.GaugeValue)
	ok := tf.metric("test_ok", "Fine.", prometheus.GaugeValue)
	g := constFamilies{familyOf: tf.of}
	g.add(prometheus.MustNewConstHistogram(gauge.Desc, 1, 1, map[float64]uint64{1: 1}))
	g.add(ok.New(5))
	got := g.families()
	if len(got) != 1 || got[0].GetName() != "test_ok" || got[0].Metric[0].GetGauge().GetValue() != 5 {
		t.Errorf("families %v, want test_ok alone", got)
	}
	if len(g.errs) != 1 {
		t.Errorf("errors %v, want one for the histogram", g.errs)
	}
}

// TestConstFamiliesMerge: a family the registry gathered (here a
// histogram, and a counter of the same name as one of ours) is merged into
// the sorted result; a same-named family that disagrees keeps the
// registry's metrics and reports ours.
func TestConstFamiliesMerge(t *testing.T) {
	tf := testFamilies{}
	a := tf.metric("test_a", "A.", prometheus.GaugeValue, "k")
	shared := tf.metric("test_shared_total", "Shared.", prometheus.CounterValue, "k")
	clash := tf.metric("test_m_seconds", "Not the histogram.", prometheus.GaugeValue)
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_m_seconds", Help: "A histogram.", Buckets: []float64{0.1, 1}})
	hist.Observe(0.5)
	counters := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_shared_total", Help: "Shared."}, []string{"k"})
	counters.WithLabelValues("z").Add(2)

	ours := []prometheus.Metric{a.New(1, "x"), shared.New(3, "b"), clash.New(9)}
	g := constFamilies{familyOf: tf.of}
	for _, m := range ours {
		g.add(m)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(hist, counters)
	theirs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := g.merge(g.families(), theirs)

	// The registry's answer for everything but the clashing gauge.
	ch := make(chan prometheus.Metric, 8)
	hist.Collect(ch)
	counters.Collect(ch)
	close(ch)
	all := []prometheus.Metric{a.New(1, "x"), shared.New(3, "b")}
	for m := range ch {
		all = append(all, m)
	}
	want, err := registryGather(t, all...)
	if err != nil {
		t.Fatal(err)
	}
	sameFamilies(t, got, want)
	if len(g.errs) != 1 || !strings.Contains(g.errs[0].Error(), "test_m_seconds") {
		t.Errorf("errors %v, want the clashing test_m_seconds", g.errs)
	}
	if !slices.IsSortedFunc(got, compareFamilies) {
		t.Error("merged families are not sorted")
	}
}
