package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/procfs"
)

func sysctlValues(t *testing.T, c collector.Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	if err := c.Update(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		out[pb.GetLabel()[0].GetValue()] = pb.GetGauge().GetValue()
	}
	return out
}

// TestSysctlRefresh: values are reused within the refresh interval and
// re-read after it, so a changed tunable shows up within one interval.
func TestSysctlRefresh(t *testing.T) {
	proc := t.TempDir()
	vmdir := filepath.Join(proc, "sys", "vm")
	if err := os.MkdirAll(vmdir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(vmdir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dirty_ratio", "20")
	write("swappiness", "60")
	pfs, err := procfs.NewFS(proc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	c := &sysctlCollector{fs: pfs, refresh: time.Minute, now: func() time.Time { return now }}
	got := sysctlValues(t, c)
	if len(got) != 2 || got["vm.dirty_ratio"] != 20 || got["vm.swappiness"] != 60 {
		t.Fatalf("first read: %v", got)
	}
	write("dirty_ratio", "5")
	now = now.Add(59 * time.Second)
	if got := sysctlValues(t, c); got["vm.dirty_ratio"] != 20 {
		t.Errorf("within the interval: dirty_ratio %v, want the cached 20", got["vm.dirty_ratio"])
	}
	now = now.Add(time.Second)
	if got := sysctlValues(t, c); got["vm.dirty_ratio"] != 5 {
		t.Errorf("after the interval: dirty_ratio %v, want 5", got["vm.dirty_ratio"])
	}
}
