package collectortest

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	compareGauge = prometheus.NewDesc("stall_test_bytes", "Bytes, a \\ backslash.", []string{"device"}, nil)
	compareCount = prometheus.NewDesc("stall_test_total", "Events.", nil, nil)
)

// sends is a collector.Collector of fixed metrics.
type sends []prometheus.Metric

func (s sends) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	for _, m := range s {
		ch <- m
	}
	return nil
}

// TestCompare: the named families are compared by value, labels and type
// (HELP taken from what was sent), in any order; a wrong value, a missing
// or extra series and a wrong type each fail with a diff.
func TestCompare(t *testing.T) {
	c := sends{
		prometheus.MustNewConstMetric(compareGauge, prometheus.GaugeValue, 2, "sdb"),
		prometheus.MustNewConstMetric(compareGauge, prometheus.GaugeValue, 1.5, "sda"),
		prometheus.MustNewConstMetric(compareCount, prometheus.CounterValue, 7),
	}
	if err := Compare(t, c, `
stall_test_bytes{device="sdb"} 2
stall_test_bytes{device="sda"} 1.5
`, "stall_test_bytes"); err != nil {
		t.Fatal(err)
	}
	_, mfs := gather(t, context.Background(), c)
	for _, tc := range []struct{ name, want, diff string }{
		{"value", `stall_test_bytes{device="sda"} 1.5
stall_test_bytes{device="sdb"} 3`, `stall_test_bytes{device="sdb"} 3`},
		{"missing series", `stall_test_bytes{device="sda"} 1.5`, `stall_test_bytes{device="sdb"} 2`},
		{"extra series", `stall_test_bytes{device="sda"} 1.5
stall_test_bytes{device="sdb"} 2
stall_test_bytes{device="sdc"} 0`, `sdc`},
		{"absent family", `stall_test_other 1`, `stall_test_other`},
	} {
		err := CompareFamilies(mfs, tc.want, "stall_test_bytes", "stall_test_other")
		if err == nil || !strings.Contains(err.Error(), tc.diff) {
			t.Errorf("%s: got %v, want a diff naming %s", tc.name, err, tc.diff)
		}
	}
	if err := CompareFamilies(mfs, "stall_test_total 7", "stall_test_total"); err != nil {
		t.Errorf("counter: %v", err)
	}
}

// TestLogs: records at the level and above, one a line with the logger's
// and the record's attributes; Count matches the level exactly and every
// part; Take returns what is new.
func TestLogs(t *testing.T) {
	logs, logger := NewLogs(slog.LevelInfo)
	logger.Debug("not kept")
	logger.Info("collector failed", "collector", "a")
	if got := logs.Take(); len(got) != 1 || got[0] != "INFO collector failed collector=a" {
		t.Errorf("Take: %q", got)
	}
	logger.With("collector", "b").Warn("collector failed", "err", "boom")
	logger.Warn("collector failed", "collector", "a")
	if got := logs.Take(); len(got) != 2 || got[0] != "WARN collector failed collector=b err=boom" {
		t.Errorf("second Take: %q", got)
	}
	if n := logs.Count("warn", "collector failed", "collector=a"); n != 1 {
		t.Errorf("warn lines for a: %d, want 1\n%s", n, logs)
	}
	if n := logs.Count("info"); n != 1 {
		t.Errorf("info lines: %d, want 1\n%s", n, logs)
	}
	if n := logs.Count("debug"); n != 0 {
		t.Errorf("debug lines: %d, want 0\n%s", n, logs)
	}
}

// TestProcessCPU: work this process does shows in its CPU time.
func TestProcessCPU(t *testing.T) {
	start := ProcessCPU()
	sum := sha256.Sum256(nil)
	for range 200_000 { // tens of milliseconds of CPU; the clock's tick is 1 to 10 ms
		sum = sha256.Sum256(sum[:])
	}
	if d := ProcessCPU() - start; d <= 0 {
		t.Errorf("CPU time moved by %v over 200,000 hashes (%x)", d, sum[:4])
	}
}

// TestParse: an HTTP answer's exposition decodes into the samples Get and
// Must read, a histogram into its buckets, sum and count.
func TestParse(t *testing.T) {
	r := Parse(t, `# TYPE stall_test_bytes gauge
stall_test_bytes{device="sda"} 1.5
stall_test_bytes{device="sdb"} 2
# TYPE stall_test_seconds histogram
stall_test_seconds_bucket{le="1"} 2
stall_test_seconds_bucket{le="+Inf"} 3
stall_test_seconds_sum 4.5
stall_test_seconds_count 3
`)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"stall_test_bytes", []string{"device", "sdb"}, 2},
		{"stall_test_seconds_bucket", []string{"le", "1"}, 2},
		{"stall_test_seconds_bucket", []string{"le", "+Inf"}, 3},
		{"stall_test_seconds_sum", nil, 4.5},
		{"stall_test_seconds_count", nil, 3},
	} {
		if got := r.Must(t, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if v, ok := r.Get("stall_test_bytes", "device", "sdc"); ok {
		t.Errorf("sdc = %v, want absent", v)
	}
}
