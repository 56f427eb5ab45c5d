package exposition

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

var text = expfmt.NewFormat(expfmt.TypeTextPlain)

// replay is an unchecked collector that sends fixed metrics.
type replay []prometheus.Metric

func (replay) Describe(chan<- *prometheus.Desc) {}
func (r replay) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r {
		ch <- m
	}
}

// viaRegistry is what promhttp writes for ms: a registry gathers them and
// expfmt encodes each family.
func viaRegistry(t *testing.T, format expfmt.Format, ms ...prometheus.Metric) ([]byte, error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(replay(ms))
	mfs, gerr := reg.Gather()
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes(), gerr
}

// viaScrape writes the samples and the other metrics with a Scrape, as the
// /metrics handler does.
func viaScrape(t *testing.T, format expfmt.Format, samples []*Sample, others ...prometheus.Metric) ([]byte, []error) {
	t.Helper()
	var sc Scrape
	for i, s := range samples {
		if i%2 == 0 {
			sc.Add(s)
		} else {
			sc.AddMetric(s)
		}
	}
	for _, m := range others {
		sc.AddMetric(m)
	}
	b, errs := sc.Encode(format, nil)
	return bytes.Clone(b), errs
}

func asMetrics(ss []*Sample) []prometheus.Metric {
	out := make([]prometheus.Metric, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// testSamples covers label orders, escaping, float forms, several families
// and label values that sort in a different order than they arrive.
func testSamples() []*Sample {
	zone := NewDesc("test_zone_bytes", "Zone watermark (min, low or high in /proc/zoneinfo × page size), in bytes; a \\ and a\nnewline.", prometheus.GaugeValue, "node", "zone", "level")
	disk := NewDesc("test_disk_reads_total", `Reads "completed".`, prometheus.CounterValue, "device")
	plain := NewDesc("test_plain", "No labels.", prometheus.UntypedValue)
	wide := NewDesc("test_wide", "Five labels.", prometheus.GaugeValue, "e", "d", "c", "b", "a")
	return []*Sample{
		MustNewSample(zone, 4096, "0", "Normal", "min"),
		MustNewSample(disk, 3, "sdb"),
		MustNewSample(zone, 1.5e10, "0", "DMA32", "high"),
		MustNewSample(disk, 0, "nvme0n1"),
		MustNewSample(plain, math.NaN()),
		MustNewSample(disk, 1, `we"ird\dev`+"\n"),
		MustNewSample(zone, -1, "1", "Normal", "low"),
		MustNewSample(disk, math.Inf(1), "sda"),
		MustNewSample(disk, math.Inf(-1), "日本"),
		MustNewSample(zone, 0.1, "0", "Normal", "high"),
		MustNewSample(wide, 1e-9, "5", "4", "3", "2", "1"),
		MustNewSample(wide, 123456789012345, "1", "2", "3", "4", "5"),
		MustNewSample(disk, -0.0, "sdaa"),
	}
}

// TestTextMatchesPromhttp: the text a Scrape writes is byte for byte what a
// registry and expfmt write for the same samples.
func TestTextMatchesPromhttp(t *testing.T) {
	ss := testSamples()
	want, err := viaRegistry(t, text, asMetrics(ss)...)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := viaScrape(t, text, ss)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("text differs\n--- got\n%s--- want\n%s", got, want)
	}
}

// TestMergeWithOtherMetrics: samples and other metrics (a histogram, a
// const metric of another family, and a const metric of a Sample's own
// family) come out as one sorted exposition, as one registry would write it.
func TestMergeWithOtherMetrics(t *testing.T) {
	ss := testSamples()
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_m_seconds", Help: "A histogram.", Buckets: []float64{0.1, 1}})
	hist.Observe(0.5)
	aaa := prometheus.MustNewConstMetric(prometheus.NewDesc("test_aaa", "First.", []string{"x"}, nil), prometheus.GaugeValue, 2, "y")
	// Same family as ss' disk samples, sent as a plain const metric.
	same := prometheus.MustNewConstMetric(ss[1].Desc(), prometheus.CounterValue, 9, "sdc")
	want, err := viaRegistry(t, text, append(asMetrics(ss), hist, aaa, same)...)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := viaScrape(t, text, ss, hist, aaa, same)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("text differs\n--- got\n%s--- want\n%s", got, want)
	}
}

// TestProtobufMatchesPromhttp: a client asking for protobuf gets the same
// families as from a registry.
func TestProtobufMatchesPromhttp(t *testing.T) {
	ss := testSamples()
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_m_seconds", Help: "A histogram.", Buckets: []float64{0.1, 1}})
	delim := expfmt.NewFormat(expfmt.TypeProtoDelim)
	want, err := viaRegistry(t, delim, append(asMetrics(ss), hist)...)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := viaScrape(t, delim, ss, hist)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	w, g := decodeDelimited(t, want), decodeDelimited(t, got)
	if len(w) != len(g) || len(w) != 5 {
		t.Fatalf("%d families, want %d (5)", len(g), len(w))
	}
	for i := range w {
		if !proto.Equal(w[i], g[i]) {
			t.Errorf("family %d differs:\n got %v\nwant %v", i, g[i], w[i])
		}
	}
}

func decodeDelimited(t *testing.T, b []byte) []*dto.MetricFamily {
	t.Helper()
	var out []*dto.MetricFamily
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		mf := &dto.MetricFamily{}
		if err := protodelim.UnmarshalFrom(r, mf); err != nil {
			t.Fatal(err)
		}
		out = append(out, mf)
	}
	return out
}

// TestClientGolangCollectors: the Go runtime collector's and a summary's and
// vectors' metrics, written through AddMetric, come out as a registry
// writes them; every descriptor's name and HELP is read correctly.
func TestClientGolangCollectors(t *testing.T) {
	summary := prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "test_summary_seconds", Help: "A \"quoted\" summary.",
		Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001}, ConstLabels: prometheus.Labels{"const": "c"}}, []string{"k"})
	summary.WithLabelValues("b").Observe(1)
	summary.WithLabelValues("a").Observe(2)
	counters := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_counter_total", Help: "Counts."}, []string{"z", "a"})
	counters.WithLabelValues("1", "2").Inc()
	counters.WithLabelValues("0", "3").Add(5)
	var ms []prometheus.Metric
	for _, c := range []prometheus.Collector{prometheus.NewGoCollector(), summary, counters} {
		ch := make(chan prometheus.Metric, 1000)
		c.Collect(ch)
		close(ch)
		for m := range ch {
			ms = append(ms, m)
		}
	}
	want, err := viaRegistry(t, text, ms...)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := viaScrape(t, text, nil, ms...)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("text differs\n--- got\n%s--- want\n%s", got, want)
	}
	for _, m := range ms {
		name, _, err := describe(m.Desc())
		if err != nil || !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "test_") {
			t.Errorf("%s: name %q, %v", m.Desc(), name, err)
		}
	}
	if _, _, err := describe(prometheus.NewDesc("test_bad", "h", []string{"a", "a"}, nil)); err == nil {
		t.Error("an invalid descriptor was accepted")
	}
}

// TestDuplicatesAndConflicts: what a registry refuses is reported and left
// out, and the rest is written.
func TestDuplicatesAndConflicts(t *testing.T) {
	d := NewDesc("test_dup", "Dup.", prometheus.GaugeValue, "k")
	other := NewDesc("test_dup", "Another HELP.", prometheus.GaugeValue, "k")
	ok := NewDesc("test_ok", "Fine.", prometheus.GaugeValue)
	ss := []*Sample{MustNewSample(d, 1, "a"), MustNewSample(d, 2, "a"), MustNewSample(other, 3, "b"), MustNewSample(ok, 4)}
	got, errs := viaScrape(t, text, ss)
	want := "# HELP test_dup Dup.\n# TYPE test_dup gauge\ntest_dup{k=\"a\"} 1\n# HELP test_ok Fine.\n# TYPE test_ok gauge\ntest_ok 4\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if len(errs) != 2 || !strings.Contains(errs[0].Error()+errs[1].Error(), "collected before") {
		t.Errorf("errors %v, want a duplicate and a conflicting descriptor", errs)
	}
	if _, rerr := viaRegistry(t, text, asMetrics(ss)...); rerr == nil {
		t.Error("the registry accepted what the Scrape refused")
	}
}

func TestNewSampleErrors(t *testing.T) {
	d := NewDesc("test_x", "X.", prometheus.GaugeValue, "a", "b")
	if _, err := NewSample(d, 1, "only-one"); !errors.Is(err, errLabelCount) {
		t.Errorf("one value for two labels: %v", err)
	}
	if _, err := NewSample(d, 1, "ok", "\xff"); !errors.Is(err, errLabelUTF8) {
		t.Errorf("invalid UTF-8: %v", err)
	}
	for _, bad := range []func(){
		func() { NewDesc("bad-name", "", prometheus.GaugeValue) },
		func() { NewDesc("x", "", prometheus.GaugeValue, "a", "a") },
		func() { NewDesc("x", "", prometheus.GaugeValue, "__reserved") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("an invalid descriptor did not panic")
				}
			}()
			bad()
		}()
	}
}

// TestReuse: a Scrape reused after Reset carries nothing over, also when
// families were merged or dropped, and a steady state allocates only for
// the samples themselves.
func TestReuse(t *testing.T) {
	a := NewDesc("test_a", "A.", prometheus.GaugeValue, "k")
	a2 := NewDesc("test_a", "A.", prometheus.GaugeValue, "k")
	b := NewDesc("test_b", "B.", prometheus.GaugeValue, "k")
	var sc Scrape
	round := func(extra bool) string {
		sc.Reset()
		sc.Add(MustNewSample(b, 1, "x"))
		sc.Add(MustNewSample(a, 2, "y"))
		if extra {
			sc.Add(MustNewSample(a2, 3, "z"))
		}
		out, errs := sc.Encode(text, nil)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return string(out)
	}
	first := round(true)
	if !strings.Contains(first, `test_a{k="z"} 3`) {
		t.Fatalf("merged family lost a sample:\n%s", first)
	}
	second := round(false)
	if strings.Contains(second, `"z"`) || !strings.Contains(second, `test_b{k="x"} 1`) || !strings.Contains(second, `test_a{k="y"} 2`) {
		t.Errorf("after Reset:\n%s", second)
	}
	ss := []*Sample{MustNewSample(b, 1, "x"), MustNewSample(a, 2, "y")}
	allocs := testing.AllocsPerRun(100, func() {
		sc.Reset()
		for _, s := range ss {
			sc.Add(s)
		}
		sc.Encode(text, nil)
	})
	if allocs > 0 {
		t.Errorf("steady state allocates %v times per exposition, want 0", allocs)
	}
}

func TestNameFilter(t *testing.T) {
	ss := testSamples()
	var sc Scrape
	for _, s := range ss {
		sc.Add(s)
	}
	out, _ := sc.Encode(text, map[string]bool{"test_plain": true})
	if string(out) != "# HELP test_plain No labels.\n# TYPE test_plain untyped\ntest_plain NaN\n" {
		t.Errorf("filtered output:\n%s", out)
	}
}

// FuzzSampleText checks label value escaping and number formatting against
// expfmt for arbitrary input.
func FuzzSampleText(f *testing.F) {
	f.Add("sda", 1.5)
	f.Add("a\\b\"c\nd", math.Inf(-1))
	f.Add("", 1e300)
	f.Fuzz(func(t *testing.T, label string, v float64) {
		d := NewDesc("fuzz_metric", "Fuzz \\ help\n.", prometheus.GaugeValue, "l")
		s, err := NewSample(d, v, label)
		if err != nil {
			return // not UTF-8: refused, as by client_golang
		}
		want, _ := viaRegistry(t, text, s)
		got, _ := viaScrape(t, text, []*Sample{s})
		if !bytes.Equal(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}
