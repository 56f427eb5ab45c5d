package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func pressureProc(t *testing.T, files map[string]string) collector.Paths {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, "pressure", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return collector.Paths{Procfs: dir}
}

func newTestPressure(t *testing.T, paths collector.Paths) *pressureCollector {
	t.Helper()
	return build(t, newPressureCollector, "pressure", paths.Procfs, "")
}

func pressureValues(t *testing.T, c *pressureCollector) (map[string]float64, error) {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	err := c.Update(context.Background(), ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		var res, scope string
		for _, lp := range pb.GetLabel() {
			switch lp.GetName() {
			case "resource":
				res = lp.GetValue()
			case "scope":
				scope = lp.GetValue()
			}
		}
		out[res+"/"+scope] = pb.GetCounter().GetValue()
	}
	return out, err
}

// TestPressureFixture: some and full of every resource in seconds; irq has
// only a full line.
func TestPressureFixture(t *testing.T) {
	got, err := pressureValues(t, newTestPressure(t, collector.Paths{Procfs: "fixtures/linux-6.8/proc"}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"cpu/some": 912.341234, "cpu/full": 0,
		"io/some": 41234.123412, "io/full": 39123.412341,
		"irq/full":    41.234123,
		"memory/some": 812.341234, "memory/full": 712.341234,
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// TestPressureMalformedAndAbsent: a malformed file drops its resource,
// counts one problem and fails the scrape; the other resources are sent. No
// /proc/pressure at all is "no data".
func TestPressureMalformedAndAbsent(t *testing.T) {
	c := newTestPressure(t, pressureProc(t, map[string]string{
		"io":     "some avg10=x avg60=0 avg300=0 total=1\n",
		"memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
		"cpu":    "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfuture avg10=1\n", // unknown line kinds are skipped
	}))
	got, err := pressureValues(t, c)
	if err == nil || !strings.Contains(err.Error(), "/proc/pressure/io") {
		t.Errorf("err = %v, want the malformed io file", err)
	}
	if c.problems.Count() != 1 {
		t.Errorf("problems = %d, want 1", c.problems.Count())
	}
	if got["memory/full"] != 1 || got["cpu/some"] != 5e-6 {
		t.Errorf("good resources: %v", got)
	}
	if _, ok := got["io/some"]; ok {
		t.Error("the malformed io file produced a value")
	}

	c = newTestPressure(t, collector.Paths{Procfs: t.TempDir()})
	if _, err := pressureValues(t, c); !errors.Is(err, collector.ErrNoData) {
		t.Errorf("no /proc/pressure: %v, want ErrNoData", err)
	}
}

// TestPressureRealProc: this machine's PSI files, when the kernel has them.
func TestPressureRealProc(t *testing.T) {
	if _, err := os.ReadFile("/proc/pressure/memory"); err != nil {
		t.Skipf("no PSI on this kernel: %v", err)
	}
	got, err := pressureValues(t, newTestPressure(t, collector.Paths{Procfs: "/proc"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["memory/some"]; !ok {
		t.Errorf("no memory/some from this machine: %v", got)
	}
}
