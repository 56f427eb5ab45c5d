package collectortest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stall-exporter/stall_exporter/collector"
)

// Compare runs c.Update once (through a pedantic registry, as Expose does)
// and compares the named families with want, with client_golang's
// testutil.GatherAndCompare, as node_exporter compares its fixtures: the
// failure is a diff of the two expositions. want holds sample lines in the
// text format, in any order, with leading and trailing blank lines
// trimmed; HELP and TYPE lines are taken from the families the collector
// sent (TestMetricsDoc checks those against docs/metrics.md), so want
// compares values and labels, and a family of the wrong type or one
// missing from either side fails. It returns what Update returned.
func Compare(t testing.TB, c collector.Collector, want string, families ...string) error {
	t.Helper()
	e, mfs := gather(t, context.Background(), c)
	if err := CompareFamilies(mfs, want, families...); err != nil {
		t.Errorf("%v\n(Update returned %v)", err, e.Err)
	}
	return e.Err
}

// CompareFamilies compares the named families of mfs (gathered, or
// parsed from an exposition) with want, sample lines as for Compare.
func CompareFamilies(mfs []*dto.MetricFamily, want string, families ...string) error {
	var head strings.Builder
	help := strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	for _, mf := range mfs {
		if slices.Contains(families, mf.GetName()) {
			fmt.Fprintf(&head, "# HELP %s %s\n# TYPE %s %s\n", mf.GetName(), help.Replace(mf.GetHelp()),
				mf.GetName(), strings.ToLower(mf.GetType().String()))
		}
	}
	expected := head.String() + strings.Trim(want, "\n") + "\n"
	// testutil sorts the expected families by name, and compares the
	// gathered ones in the order they come.
	sorted := slices.SortedFunc(slices.Values(mfs), func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	got := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return sorted, nil })
	return testutil.GatherAndCompare(got, strings.NewReader(expected), families...)
}

// gather runs c.Update once under ctx through a pedantic registry, failing
// the test on inconsistent or duplicate series (a scrape drops them).
func gather(t testing.TB, ctx context.Context, c collector.Collector) (*Exposition, []*dto.MetricFamily) {
	t.Helper()
	e := &Exposition{}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(adapter{c: c, ctx: ctx, e: e})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return e, mfs
}

// Logs records what a logger logs, one record a line, "LEVEL message
// key=value …" (no time, values unquoted), for tests that assert on logging:
// the tests' one recorder. Config records into one; NewLogs and Logger make a
// logger of one for code that takes a *slog.Logger. The zero Logs is
// ready to use; it is safe for concurrent use.
type Logs struct {
	mu    sync.Mutex
	lines []string
	taken int // lines returned by Take so far
}

// NewLogs returns a recorder and a logger recording into it at level and
// above.
func NewLogs(level slog.Level) (*Logs, *slog.Logger) {
	l := &Logs{}
	return l, l.Logger(level)
}

// Logger returns a logger recording into l at level and above.
func (l *Logs) Logger(level slog.Level) *slog.Logger {
	return slog.New(logsHandler{logs: l, level: level})
}

// String is every record so far, one a line.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Take returns the records logged since the last Take.
func (l *Logs) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.lines[l.taken:])
	l.taken = len(l.lines)
	return out
}

// Count returns how many records have the level (debug, info, warn,
// error) and contain every part.
func (l *Logs) Count(level string, parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		ok := strings.HasPrefix(line, strings.ToUpper(level)+" ")
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			n++
		}
	}
	return n
}

// logsHandler is the slog.Handler of a Logs; groups are flattened.
type logsHandler struct {
	logs  *Logs
	level slog.Level
	attrs []slog.Attr
}

func (h logsHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h logsHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	add := func(a slog.Attr) bool {
		// Resolved as the exporter's handlers resolve a LogValuer.
		b.WriteString(" " + a.Key + "=" + a.Value.Resolve().String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.logs.mu.Lock()
	h.logs.lines = append(h.logs.lines, b.String())
	h.logs.mu.Unlock()
	return nil
}

func (h logsHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), as...)
	return h
}

func (h logsHandler) WithGroup(string) slog.Handler { return h }

// ProcessCPU is this process's user and system CPU time so far
// (getrusage), which other processes on a shared machine do not inflate
// the way they inflate wall time; benchmarks report it per operation.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Parse decodes a text exposition (the body of a /metrics or /probe
// answer) into a Result, for the tests that read single values of an HTTP
// answer with Get and Must; a histogram or summary becomes its _bucket or
// quantile, _sum and _count series. An exposition that does not parse
// fails the test.
func Parse(t testing.TB, exposition string) Result {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	var r Result
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		for _, m := range byName[name].GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(suffix string, v float64, extra ...string) {
				l := maps.Clone(labels)
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				r.Metrics = append(r.Metrics, Sample{Name: name + suffix, Labels: l, Value: v})
			}
			switch {
			case m.Gauge != nil:
				add("", m.GetGauge().GetValue())
			case m.Counter != nil:
				add("", m.GetCounter().GetValue())
			case m.Untyped != nil:
				add("", m.GetUntyped().GetValue())
			case m.Histogram != nil:
				for _, b := range m.GetHistogram().GetBucket() {
					add("_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add("_sum", m.GetHistogram().GetSampleSum())
				add("_count", float64(m.GetHistogram().GetSampleCount()))
			case m.Summary != nil:
				for _, q := range m.GetSummary().GetQuantile() {
					add("", q.GetValue(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
				add("_sum", m.GetSummary().GetSampleSum())
				add("_count", float64(m.GetSummary().GetSampleCount()))
			}
		}
	}
	return r
}

// CompareExposition compares the named families of a text exposition (the
// body of a /metrics or /probe answer) with want, sample lines as for
// Compare, failing the test with a diff when they differ.
func CompareExposition(t testing.TB, exposition, want string, families ...string) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	if err := CompareFamilies(slices.Collect(maps.Values(byName)), want, families...); err != nil {
		t.Error(err)
	}
}
