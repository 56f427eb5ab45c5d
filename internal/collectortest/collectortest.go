// Package collectortest holds the test helpers shared by the tests of the
// collector packages and of the exporter: a collector.Config for tests, a
// log recorder (Logs), a listener that never answers, one Update run as decoded
// samples (Scrape) or as the text exposition a Prometheus server reads
// (Expose), the policy for prerequisites (policy.go) and for
// waiting (WaitFor, Advance). It imports package collector, so that
// package's internal tests cannot use it; its external tests (package
// collector_test, statelog_test.go) do.
package collectortest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/stall-exporter/stall_exporter/collector"
)

// Config is the configuration a collector named name gets from the
// exporter, with the default mount points. Its logger and its Problems'
// record into logs at debug level; a nil logs discards what they log (after
// formatting it, as the exporter's handler would).
func Config(name string, logs *Logs) collector.Config {
	logger := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if logs != nil {
		logger = logs.Logger(slog.LevelDebug)
	}
	return collector.Config{
		Paths:    collector.Paths{Procfs: "/proc", Sysfs: "/sys", Rootfs: "/"},
		Logger:   logger,
		Problems: collector.NewProblems(name, logger),
	}
}

// SilentListener listens on a free loopback port and never accepts: the
// kernel completes each connection into the listen backlog, and nothing
// ever answers, as with a hung server. It returns host:port; the listener,
// and with it every connection, is closed when the test ends.
func SilentListener(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// Result is one Update's output, decoded for assertions.
type Result struct {
	Err     error // what Update returned
	Metrics []Sample
}

// Sample is one series of a Result. Value is the gauge, counter or
// untyped value (0 for a histogram).
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape runs c.Update under the given timeout and decodes what it sent.
func Scrape(t testing.TB, c collector.Collector, timeout time.Duration) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ch := make(chan prometheus.Metric, 1024)
	done := make(chan error, 1)
	go func() { done <- c.Update(ctx, ch); close(ch) }()
	var res Result
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		s := Sample{Name: fqName(m.Desc()), Labels: map[string]string{}}
		for _, lp := range pb.GetLabel() {
			s.Labels[lp.GetName()] = lp.GetValue()
		}
		switch {
		case pb.Gauge != nil:
			s.Value = pb.GetGauge().GetValue()
		case pb.Counter != nil:
			s.Value = pb.GetCounter().GetValue()
		case pb.Untyped != nil:
			s.Value = pb.GetUntyped().GetValue()
		}
		res.Metrics = append(res.Metrics, s)
	}
	res.Err = <-done
	return res
}

// fqName is the metric name of d, which client_golang shows only in String.
func fqName(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `fqName: "`)
	if i < 0 {
		return s
	}
	s = s[i+len(`fqName: "`):]
	return s[:strings.IndexByte(s, '"')]
}

// Get returns the value of the first series of name whose labels include
// want (name, value pairs); ok is false when there is none.
func (r Result) Get(name string, want ...string) (v float64, ok bool) {
	for _, m := range r.Metrics {
		match := m.Name == name
		for i := 0; match && i+1 < len(want); i += 2 {
			match = m.Labels[want[i]] == want[i+1]
		}
		if match {
			return m.Value, true
		}
	}
	return 0, false
}

// Must is Get for a series that must exist, failing the test with the
// whole result when it does not.
func (r Result) Must(t testing.TB, name string, want ...string) float64 {
	t.Helper()
	v, ok := r.Get(name, want...)
	if !ok {
		t.Fatalf("no series %s%v in scrape (err %v):\n%s", name, want, r.Err, r.Dump())
	}
	return v
}

// Dump lists every series of r, one per line, for failure messages.
func (r Result) Dump() string {
	var b strings.Builder
	for _, m := range r.Metrics {
		fmt.Fprintf(&b, "%s%v %g\n", m.Name, m.Labels, m.Value)
	}
	return b.String()
}

// Exposition is one Update's output as a Prometheus server reads it.
type Exposition struct {
	Text    string // text format, HELP and TYPE lines included
	Err     error  // what Update returned
	Elapsed time.Duration
	InTime  bool // Update returned before ctx ended

	families []*dto.MetricFamily // as gathered, for Compare
}

// Expose runs c.Update once under ctx through a pedantic registry, failing
// the test on inconsistent or duplicate series (a scrape drops them), and
// returns the text exposition.
func Expose(t testing.TB, ctx context.Context, c collector.Collector) Exposition {
	t.Helper()
	e, mfs := gather(t, ctx, c)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	e.Text = buf.String()
	e.families = mfs
	return *e
}

// Compare compares the named families of e with want, sample lines as for
// the package's Compare, failing the test with a diff when they differ.
func (e Exposition) Compare(t testing.TB, want string, families ...string) {
	t.Helper()
	if err := CompareFamilies(e.families, want, families...); err != nil {
		t.Errorf("%v\n(Update returned %v)", err, e.Err)
	}
}

// adapter lets a registry gather one Collector under a given context.
type adapter struct {
	c   collector.Collector
	ctx context.Context
	e   *Exposition
}

func (a adapter) Describe(chan<- *prometheus.Desc) {}
func (a adapter) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	a.e.Err = a.c.Update(a.ctx, ch)
	a.e.Elapsed = time.Since(start)
	a.e.InTime = a.ctx.Err() == nil
}

// Families returns the sample lines of the named metric families (a
// histogram's _bucket, _sum and _count lines included), in exposition
// order, each ending in a newline; "\n" when there are none.
func (e Exposition) Families(families ...string) string {
	want := map[string]bool{}
	for _, f := range families {
		want[f] = true
	}
	var lines []string
	in := false
	for _, l := range strings.Split(e.Text, "\n") {
		if f, ok := strings.CutPrefix(l, "# TYPE "); ok {
			name, _, _ := strings.Cut(f, " ")
			in = want[name]
			continue
		}
		if in && l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
