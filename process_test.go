package main

import (
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/stall-exporter/stall_exporter/internal/exposition"
)

// TestProcessMetricsMatchClientGolang: the nine process_* series have the
// names, types and values of client_golang's process collector, which they
// replace on the scrape path.
func TestProcessMetricsMatchClientGolang(t *testing.T) {
	p := newProcessMetrics(slog.New(slog.DiscardHandler))
	var sc exposition.Scrape
	p.add(&sc)
	out, errs := sc.Encode(expfmt.NewFormat(expfmt.TypeTextPlain), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	ours := samples(t, string(out))

	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 9 || len(ours) != 9 {
		t.Fatalf("client_golang has %d process families, we have %d series; want 9 each", len(mfs), len(ours))
	}
	for _, mf := range mfs {
		name := mf.GetName()
		got, ok := ours[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		var want float64
		switch m := mf.GetMetric()[0]; {
		case m.Gauge != nil:
			want = m.GetGauge().GetValue()
		case m.Counter != nil:
			want = m.GetCounter().GetValue()
		}
		// Values that move between the two reads get a tolerance.
		tol := map[string]float64{
			"process_cpu_seconds_total":            0.2,
			"process_open_fds":                     5, // the three descriptors we keep open
			"process_resident_memory_bytes":        16 << 20,
			"process_virtual_memory_bytes":         256 << 20,
			"process_network_receive_bytes_total":  1 << 30, // the whole namespace's traffic
			"process_network_transmit_bytes_total": 1 << 30,
		}[name]
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %v, client_golang says %v", name, got, want)
		}
		if got <= 0 && name != "process_network_receive_bytes_total" && name != "process_network_transmit_bytes_total" {
			t.Errorf("%s = %v, want positive", name, got)
		}
	}
	typed := string(out)
	for _, l := range []string{"# TYPE process_cpu_seconds_total counter", "# TYPE process_open_fds gauge", "# TYPE process_network_receive_bytes_total counter"} {
		if !strings.Contains(typed, l) {
			t.Errorf("missing %q", l)
		}
	}

	// In the steady state the only allocations are the nine samples.
	allocs := testing.AllocsPerRun(50, func() {
		sc.Reset()
		p.add(&sc)
	})
	if allocs > 9 {
		t.Errorf("process metrics allocate %v times per scrape, want 9 (the samples)", allocs)
	}
}
