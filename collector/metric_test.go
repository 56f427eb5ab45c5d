package collector

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDeclareDocumentsAndBuilds(t *testing.T) {
	h := DeclareHistogram("test_declared_seconds", "A test histogram.", []float64{1, 2}, "device")
	found := false
	for _, m := range Documented() {
		if m.Name == "stall_test_declared_seconds" {
			found = m.Type == "histogram" && len(m.Labels) == 1 && m.Labels[0] == "device"
		}
	}
	if !found {
		t.Errorf("DeclareHistogram did not document stall_test_declared_seconds as a histogram by device: %v", Documented())
	}
	v := h.HistogramVec()
	v.WithLabelValues("sda").Observe(1.5)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(v)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "stall_test_declared_seconds" || mfs[0].GetHelp() != "A test histogram." ||
		mfs[0].GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("built vector gathers as %v, %v", mfs, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("building a declared histogram as a counter did not panic")
		}
	}()
	h.CounterVec()
}
