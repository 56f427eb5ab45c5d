package collectortest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	upDesc   = prometheus.NewDesc("test_up", "Up.", []string{"addr"}, nil)
	histDesc = prometheus.NewDesc("test_seconds", "Seconds.", nil, nil)
	errTest  = errors.New("half failed")
)

// fake sends two gauges and a histogram, then fails.
type fake struct{}

func (fake) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1, "a")
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0, "b")
	ch <- prometheus.MustNewConstHistogram(histDesc, 3, 1.5, map[float64]uint64{1: 2})
	return errTest
}

func TestScrape(t *testing.T) {
	r := Scrape(t, fake{}, time.Second)
	if !errors.Is(r.Err, errTest) {
		t.Errorf("Err = %v", r.Err)
	}
	if v, ok := r.Get("test_up", "addr", "b"); !ok || v != 0 {
		t.Errorf("Get(test_up, addr=b) = %v, %v", v, ok)
	}
	if v := r.Must(t, "test_up", "addr", "a"); v != 1 {
		t.Errorf("Must(test_up, addr=a) = %v", v)
	}
	if _, ok := r.Get("test_up", "addr", "c"); ok {
		t.Error("Get found a series that was not sent")
	}
	if got := r.Dump(); strings.Count(got, "\n") != 3 || !strings.Contains(got, "test_upmap[addr:b] 0\n") {
		t.Errorf("Dump:\n%s", got)
	}
}

func TestExposeFamilies(t *testing.T) {
	e := Expose(t, context.Background(), fake{})
	if !errors.Is(e.Err, errTest) || !e.InTime {
		t.Errorf("Err = %v, InTime = %v", e.Err, e.InTime)
	}
	if !strings.Contains(e.Text, "# HELP test_up Up.\n") {
		t.Errorf("no HELP in the exposition:\n%s", e.Text)
	}
	if got, want := e.Families("test_up"), "test_up{addr=\"a\"} 1\ntest_up{addr=\"b\"} 0\n"; got != want {
		t.Errorf("Families(test_up) = %q, want %q", got, want)
	}
	want := "test_seconds_bucket{le=\"1\"} 2\ntest_seconds_bucket{le=\"+Inf\"} 3\ntest_seconds_sum 1.5\ntest_seconds_count 3\n"
	if got := e.Families("test_seconds"); got != want {
		t.Errorf("Families(test_seconds) = %q, want %q", got, want)
	}
	if got := e.Families("test_none"); got != "\n" {
		t.Errorf("Families(test_none) = %q", got)
	}
}

func TestSilentListener(t *testing.T) {
	c, err := net.Dial("tcp", SilentListener(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("read %d bytes, err %v; want a timeout", n, err)
	}
}

// CheckMetrics must fail on what promtool finds: a counter without _total.
func TestCheckMetricsFindsLint(t *testing.T) {
	RequireTool(t, "promtool")
	ft := &fakeT{TB: t}
	CheckMetrics(ft, "# HELP stall_x_seconds A counter.\n# TYPE stall_x_seconds counter\nstall_x_seconds 1\n")
	if !ft.failed {
		t.Error("CheckMetrics passed a counter named without _total")
	}
	ft = &fakeT{TB: t}
	CheckMetrics(ft, "# HELP stall_x_total A counter.\n# TYPE stall_x_total counter\nstall_x_total 1\n")
	if ft.failed {
		t.Error("CheckMetrics failed a clean exposition")
	}
}

// fakeT records Errorf instead of failing the real test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(format string, args ...any) { f.failed = true }
