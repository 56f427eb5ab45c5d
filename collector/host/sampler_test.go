package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// samplerFakeReader serves whatever content the test set last.
type samplerFakeReader struct {
	data []byte
	err  error
}

func (r *samplerFakeReader) Read(buf []byte) ([]byte, error) {
	if r.err != nil {
		return buf[:0], r.err
	}
	return append(buf[:0], r.data...), nil
}
func (r *samplerFakeReader) Close() error { return nil }

// samplerFakeClock advances only when told.
type samplerFakeClock struct{ t time.Time }

func (c *samplerFakeClock) Now() time.Time { return c.t }

type samplerRig struct {
	s     *sampler
	vm    *samplerFakeReader
	disk  *samplerFakeReader
	clock *samplerFakeClock
}

func newSamplerRig(t *testing.T, interval time.Duration) *samplerRig {
	t.Helper()
	filter := newDeviceFilter(collector.Paths{Sysfs: "fixtures/sampler/no-sysfs"}, testSettings(t).devices)
	r := &samplerRig{vm: &samplerFakeReader{}, disk: &samplerFakeReader{}, clock: &samplerFakeClock{t: time.Unix(1700000000, 0)}}
	r.s = newSampler(samplerOptions{
		Interval: interval, VMStat: r.vm, Disk: r.disk, Filter: filter, Now: r.clock.Now,
		Logger: slog.New(slog.DiscardHandler),
	})
	return r
}

func samplerReadFixture(t *testing.T, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"fixtures", "sampler"}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// samplerGather runs Update through a pedantic registry and returns the
// families by name.
func samplerGather(t *testing.T, c collector.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(samplerUpdateCollector{c})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

type samplerUpdateCollector struct{ c collector.Collector }

func (samplerUpdateCollector) Describe(chan<- *prometheus.Desc) {}
func (u samplerUpdateCollector) Collect(ch chan<- prometheus.Metric) {
	// Update fails when a tick could not read a file; many rigs have no
	// /proc/vmstat on purpose. TestSamplerBlindFails tests the error.
	_ = u.c.Update(context.Background(), ch)
}

// samplerHist returns the histogram of family name with the given device
// label ("" for none), or nil.
func samplerHist(mfs map[string]*dto.MetricFamily, name, device string) *dto.Histogram {
	for _, m := range mfs[name].GetMetric() {
		dev := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "device" {
				dev = lp.GetValue()
			}
		}
		if dev == device {
			return m.GetHistogram()
		}
	}
	return nil
}

// samplerBuckets formats cumulative bucket counts as "le:count ..." for
// exact comparison.
func samplerBuckets(h *dto.Histogram) string {
	if h == nil {
		return "<absent>"
	}
	var b strings.Builder
	for _, bk := range h.GetBucket() {
		fmt.Fprintf(&b, "%g:%d ", bk.GetUpperBound(), bk.GetCumulativeCount())
	}
	fmt.Fprintf(&b, "count:%d", h.GetSampleCount())
	return b.String()
}

func samplerCounter(mfs map[string]*dto.MetricFamily, name string) float64 {
	ms := mfs[name].GetMetric()
	if len(ms) != 1 {
		return math.NaN()
	}
	return ms[0].GetCounter().GetValue()
}

// TestSamplerExcursion drives the sampler over six fixture snapshots one
// second apart (fixtures/sampler/excursion/N): dirty pages cross the
// throttle point at ticks 2 and 3 (ratios 0.4 0.6 1.2 1.05 0.8 0.4), and
// sda's await jumps from 2 ms to 800 ms for tick 3 while its utilization
// hits 1. A scrape before the excursion shows nothing above 1; the scrape
// after it shows the excursion in exact bucket counts.
func TestSamplerExcursion(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	step := func(i int) {
		r.vm.data = samplerReadFixture(t, "excursion", fmt.Sprint(i), "vmstat")
		r.disk.data = samplerReadFixture(t, "excursion", fmt.Sprint(i), "diskstats")
		r.s.tick()
		r.clock.t = r.clock.t.Add(time.Second)
	}
	step(0)
	step(1)
	before := samplerGather(t, r.s)
	if got, want := samplerBuckets(samplerHist(before, "stall_vm_dirty_throttle_ratio_sampled", "")),
		"0.25:0 0.5:1 0.75:2 0.9:2 0.95:2 1:2 1.1:2 1.25:2 1.5:2 2:2 count:2"; got != want {
		t.Errorf("throttle ratio before the excursion:\n got %s\nwant %s", got, want)
	}
	if got := samplerCounter(before, "stall_vm_dirty_throttled_seconds_total"); got != 0 {
		t.Errorf("throttled seconds before the excursion = %v, want 0", got)
	}
	for i := 2; i <= 5; i++ {
		step(i)
	}
	after := samplerGather(t, r.s)

	for _, c := range []struct{ name, device, want string }{
		{"stall_vm_dirty_throttle_ratio_sampled", "",
			"0.25:0 0.5:2 0.75:3 0.9:4 0.95:4 1:4 1.1:5 1.25:6 1.5:6 2:6 count:6"},
		// sda: 2 ms four times, 800 ms once (tick 0 is the baseline).
		{"stall_disk_await_seconds", "sda",
			"0.0005:0 0.001:0 0.0025:4 0.005:4 0.01:4 0.025:4 0.05:4 0.1:4 0.25:4 0.5:4 1:5 2.5:5 5:5 count:5"},
		{"stall_disk_utilization_ratio", "sda",
			"0.05:0 0.25:0 0.5:4 0.75:4 0.9:4 0.99:4 1:5 count:5"},
		// nvme0n1: 0.1 ms four times; idle at tick 3 (no await observation, util 0).
		{"stall_disk_await_seconds", "nvme0n1",
			"0.0005:4 0.001:4 0.0025:4 0.005:4 0.01:4 0.025:4 0.05:4 0.1:4 0.25:4 0.5:4 1:4 2.5:4 5:4 count:4"},
		{"stall_disk_utilization_ratio", "nvme0n1",
			"0.05:5 0.25:5 0.5:5 0.75:5 0.9:5 0.99:5 1:5 count:5"},
	} {
		if got := samplerBuckets(samplerHist(after, c.name, c.device)); got != c.want {
			t.Errorf("%s{device=%q}:\n got %s\nwant %s", c.name, c.device, got, c.want)
		}
	}
	if h := samplerHist(after, "stall_vm_dirty_throttle_ratio_sampled", ""); math.Abs(h.GetSampleSum()-4.45) > 1e-9 {
		t.Errorf("throttle ratio sum = %v, want 4.45", h.GetSampleSum())
	}
	if h := samplerHist(after, "stall_disk_await_seconds", "sda"); math.Abs(h.GetSampleSum()-0.808) > 1e-9 {
		t.Errorf("sda await sum = %v, want 0.808", h.GetSampleSum())
	}
	if got := samplerCounter(after, "stall_vm_dirty_throttled_seconds_total"); got != 2 {
		t.Errorf("throttled seconds = %v, want 2", got)
	}
	if got := samplerCounter(after, "stall_sampler_ticks_total"); got != 6 {
		t.Errorf("ticks = %v, want 6", got)
	}
	if got := samplerCounter(after, "stall_sampler_overruns_total"); got != 0 {
		t.Errorf("overruns = %v, want 0", got)
	}
	// Partitions and loop devices are filtered out by default.
	for _, dev := range []string{"sda1", "nvme0n1p1", "loop0"} {
		if h := samplerHist(after, "stall_disk_await_seconds", dev); h != nil {
			t.Errorf("%s is exported, want it filtered", dev)
		}
	}
	if n := r.s.problems.Count(); n != 0 {
		t.Errorf("%d parse problems on well-formed fixtures", n)
	}
}

// samplerDiskLine builds a 20-field /proc/diskstats line.
func samplerDiskLine(maj, min int, name string, reads, readMs, writes, writeMs, ioMs uint64) string {
	return fmt.Sprintf("%4d %7d %s %d 0 0 %d %d 0 0 %d 0 %d %d 0 0 0 0 0 0\n",
		maj, min, name, reads, readMs, writes, writeMs, ioMs, readMs+writeMs)
}

// samplerDiskStep advances the fake clock by dt and ticks on the given
// /proc/diskstats lines.
func samplerDiskStep(r *samplerRig, dt time.Duration, lines ...string) {
	r.clock.t = r.clock.t.Add(dt)
	r.disk.data = []byte(strings.Join(lines, ""))
	r.s.tick()
}

func samplerCount(t *testing.T, s *sampler, name, device string) uint64 {
	t.Helper()
	return samplerHist(samplerGather(t, s), name, device).GetSampleCount()
}

// samplerAssertFinite fails when any observation so far was negative, NaN
// or infinite (visible in the sums, as every observation is ≥ 0 otherwise).
func samplerAssertFinite(t testing.TB, mfs map[string]*dto.MetricFamily) {
	t.Helper()
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			if s := h.GetSampleSum(); s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
				t.Fatalf("%s %v: sum %v is not a finite non-negative number", name, m.GetLabel(), s)
			}
			if name == "stall_disk_utilization_ratio" && h.GetSampleSum() > float64(h.GetSampleCount()) {
				t.Fatalf("%s %v: sum %v > count %d: some utilization above 1", name, m.GetLabel(), h.GetSampleSum(), h.GetSampleCount())
			}
		}
	}
}

func TestSamplerCounterResetsAndWraps(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.vm.err = os.ErrNotExist
	const near = math.MaxUint32 - 99 // 100 ms before the 32-bit millisecond fields wrap
	samplerDiskStep(r, 0,
		samplerDiskLine(8, 0, "sda", 1000, 1000, 1000, 1000, 1000),
		samplerDiskLine(8, 16, "sdb", 10, near, 10, 0, near))
	samplerDiskStep(r, time.Second,
		samplerDiskLine(8, 0, "sda", 1100, 1100, 1100, 1100, 1500),
		samplerDiskLine(8, 16, "sdb", 20, 400, 10, 0, 400)) // +500 ms across the wrap
	mfs := samplerGather(t, r.s)
	if h := samplerHist(mfs, "stall_disk_await_seconds", "sda"); h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-0.001) > 1e-12 {
		t.Fatalf("sda await after one interval: %d observations, sum %v; want 1, 0.001", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := samplerHist(mfs, "stall_disk_await_seconds", "sdb"); h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-0.05) > 1e-12 {
		t.Errorf("sdb await across the wrap: %d observations, sum %v; want 1, 0.05", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := samplerHist(mfs, "stall_disk_utilization_ratio", "sdb"); h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-0.5) > 1e-12 {
		t.Errorf("sdb utilization across the wrap: %d observations, sum %v; want 1, 0.5", h.GetSampleCount(), h.GetSampleSum())
	}
	// sda removed and re-added between two ticks: its counts start over.
	samplerDiskStep(r, time.Second, samplerDiskLine(8, 0, "sda", 5, 7, 5, 7, 9))
	if got := samplerCount(t, r.s, "stall_disk_await_seconds", "sda"); got != 1 {
		t.Fatalf("a counter reset was observed: %d observations, want still 1", got)
	}
	samplerDiskStep(r, time.Second, samplerDiskLine(8, 0, "sda", 15, 17, 15, 17, 509))
	if got := samplerCount(t, r.s, "stall_disk_await_seconds", "sda"); got != 2 {
		t.Fatalf("after the new baseline: %d observations, want 2", got)
	}
	// Another major:minor under the same name is a new device.
	samplerDiskStep(r, time.Second, samplerDiskLine(8, 32, "sda", 30, 500, 15, 17, 900))
	if got := samplerCount(t, r.s, "stall_disk_await_seconds", "sda"); got != 2 {
		t.Errorf("a replaced device was observed: %d, want 2", got)
	}
	// A millisecond field that goes down far from 2^32 is not trusted.
	samplerDiskStep(r, time.Second, samplerDiskLine(8, 32, "sda", 40, 100, 15, 17, 1000))
	if got := samplerCount(t, r.s, "stall_disk_await_seconds", "sda"); got != 2 {
		t.Errorf("an implausible millisecond decrease was observed: %d, want 2", got)
	}
	// And the next good interval is observed again.
	samplerDiskStep(r, time.Second, samplerDiskLine(8, 32, "sda", 50, 200, 15, 17, 1100))
	if got := samplerCount(t, r.s, "stall_disk_await_seconds", "sda"); got != 3 {
		t.Errorf("after the skipped interval: %d, want 3", got)
	}
	samplerAssertFinite(t, samplerGather(t, r.s))
}

func TestSamplerCountDelta(t *testing.T) {
	for _, c := range []struct {
		prev, cur, want uint64
		ok              bool
	}{
		{5, 7, 2, true},
		{7, 5, 0, false},                          // reset
		{math.MaxUint32 - 1, 3, 5, true},          // 32-bit kernel wrap
		{1 << 40, 3, 0, false},                    // 64-bit counter going down: reset
		{math.MaxUint32 - 1, 1 << 31, 0, false},   // "wrap" to a large value: reset
		{math.MaxUint64, math.MaxUint64, 0, true}, // no change at the top
	} {
		got, ok := countDelta(c.prev, c.cur)
		if got != c.want || ok != c.ok {
			t.Errorf("countDelta(%d, %d) = %d, %v; want %d, %v", c.prev, c.cur, got, ok, c.want, c.ok)
		}
	}
}

func TestSamplerClockJumps(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.vm.err = os.ErrNotExist
	l := func(n uint64) string { return samplerDiskLine(8, 0, "sda", n, n, n, n, n) }
	samplerDiskStep(r, 0, l(100))
	samplerDiskStep(r, -5*time.Second, l(200)) // clock went backwards
	samplerDiskStep(r, 0, l(300))              // no time passed
	samplerDiskStep(r, time.Hour, l(400))      // suspended host or stopped process
	if got := samplerCount(t, r.s, "stall_disk_utilization_ratio", "sda"); got != 0 {
		t.Fatalf("observations across clock jumps = %d, want 0", got)
	}
	samplerDiskStep(r, time.Second, l(500))
	if got := samplerCount(t, r.s, "stall_disk_utilization_ratio", "sda"); got != 1 {
		t.Fatalf("observations after the clock settled = %d, want 1", got)
	}
	samplerAssertFinite(t, samplerGather(t, r.s))
}

func TestSamplerDevicesComeAndGo(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.vm.err = os.ErrNotExist
	a := func(n uint64) string { return samplerDiskLine(8, 0, "sda", n, n, n, n, n) }
	b := func(n uint64) string { return samplerDiskLine(8, 16, "sdb", n, n, n, n, n) }
	samplerDiskStep(r, 0, a(10))
	samplerDiskStep(r, time.Second, a(20), b(10)) // sdb appears: baseline only
	samplerDiskStep(r, time.Second, b(20), a(30)) // order changes
	mfs := samplerGather(t, r.s)
	if got := samplerHist(mfs, "stall_disk_utilization_ratio", "sda").GetSampleCount(); got != 2 {
		t.Errorf("sda observations = %d, want 2", got)
	}
	if got := samplerHist(mfs, "stall_disk_utilization_ratio", "sdb").GetSampleCount(); got != 1 {
		t.Errorf("sdb observations = %d, want 1", got)
	}
	samplerDiskStep(r, time.Second, a(40)) // sdb disappears: its series go
	mfs = samplerGather(t, r.s)
	if h := samplerHist(mfs, "stall_disk_utilization_ratio", "sdb"); h != nil {
		t.Errorf("sdb still exported after it disappeared")
	}
	if len(r.s.devs) != 1 {
		t.Errorf("sampler keeps %d devices, want 1", len(r.s.devs))
	}
	samplerDiskStep(r, time.Second, a(50), b(5)) // sdb is back, counters restarted
	samplerDiskStep(r, time.Second, a(60), b(15))
	mfs = samplerGather(t, r.s)
	if got := samplerHist(mfs, "stall_disk_utilization_ratio", "sdb").GetSampleCount(); got != 1 {
		t.Errorf("sdb observations after it came back = %d, want 1", got)
	}
	// A failed read re-baselines every device.
	r.disk.err = os.ErrPermission
	r.s.tick()
	r.disk.err = nil
	samplerDiskStep(r, time.Second, a(70), b(25))
	mfs = samplerGather(t, r.s)
	if got := samplerHist(mfs, "stall_disk_utilization_ratio", "sda").GetSampleCount(); got != 5 {
		t.Errorf("sda observations after a failed read = %d, want 5", got)
	}
	samplerAssertFinite(t, mfs)
}

func TestSamplerBadInput(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.vm.data = []byte("nr_dirty 10\nnr_writeback x\nnr_dirty_threshold 100\nnr_dirty_background_threshold 50\n")
	good := samplerDiskLine(8, 0, "sda", 10, 10, 10, 10, 10)
	r.disk.data = []byte("garbage\n" + good + "8 1 sdb 1 2 3\n   8  2 sdc 1 2 3 4\n" + good)
	r.s.tick()
	// vmstat: one bad value; nr_writeback is then absent, so no throttle sample.
	// diskstats: "garbage", the 3-field sdb and the duplicate sda; sdc is the
	// old 4-field partition format, skipped silently.
	if got := r.s.problems.Count(); got != 4 {
		t.Errorf("problems = %d, want 4", got)
	}
	mfs := samplerGather(t, r.s)
	if _, ok := mfs["stall_vm_dirty_throttle_ratio_sampled"]; ok {
		t.Errorf("throttle ratio exported without nr_writeback")
	}
	if len(r.s.devs) != 1 {
		t.Errorf("devices tracked = %d, want 1 (sda; the 4-field sdc line has no timings)", len(r.s.devs))
	}
}

func TestSamplerDiskstatsFormats(t *testing.T) {
	for _, c := range []struct {
		name, line string
		want       string
	}{
		{"14 fields (before 4.18)", "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11", "8:0 sda r=1 rms=4 w=5 wms=8 io=10"},
		{"18 fields (4.18+)", "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15", "8:0 sda r=1 rms=4 w=5 wms=8 io=10"},
		{"20 fields (5.5+)", " 259       0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17", "259:0 nvme0n1 r=1 rms=4 w=5 wms=8 io=10"},
		{"tabs, a future 22 fields", "8\t0\tsda\t1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19", "8:0 sda r=1 rms=4 w=5 wms=8 io=10"},
		{"ms fields at 2^32-1", "8 0 sda 1 0 0 4294967295 2 0 0 4294967295 0 4294967295 0", "8:0 sda r=1 rms=4294967295 w=2 wms=4294967295 io=4294967295"},
	} {
		sc := newDiskstatsScanner([]byte(c.line + "\n"))
		if !sc.Next() {
			t.Errorf("%s: no line parsed (bad %d: %v)", c.name, sc.Bad, sc.FirstErr)
			continue
		}
		if got := sc.Line.String(); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	for _, bad := range []string{"x 0 sda 1 2 3 4 5 6 7 8 9 10 11", "8 0 sda 1 2 3 4 5 6 7 8 9 10", "8 0 sda 1 2 3 -4 5 6 7 8 9 10 11", "8", "8 0"} {
		sc := newDiskstatsScanner([]byte(bad))
		if sc.Next() || sc.Bad != 1 || sc.FirstErr == nil {
			t.Errorf("%q: want one malformed line, got bad=%d err=%v", bad, sc.Bad, sc.FirstErr)
		}
	}
}

// TestSamplerRealProc runs ticks on this machine's /proc and asserts that
// the steady state allocates nothing.
func TestSamplerRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/diskstats"); err != nil {
		t.Skip("no /proc/diskstats:", err)
	}
	filter := newDeviceFilter(collector.Paths{Sysfs: "/sys"}, testSettings(t).devices)
	s := newSampler(samplerOptions{
		Interval: time.Second,
		VMStat:   NewProcFile("/proc/vmstat"),
		Disk:     NewProcFile("/proc/diskstats"),
		Filter:   filter,
	})
	defer s.opts.VMStat.Close()
	defer s.opts.Disk.Close()
	s.tick()
	s.tick()
	if allocs := testing.AllocsPerRun(50, s.safeTick); allocs != 0 {
		t.Errorf("one steady-state tick allocates %v times, want 0", allocs)
	}
	mfs := samplerGather(t, s)
	if got := samplerCounter(mfs, "stall_sampler_ticks_total"); got != 53 {
		t.Errorf("ticks = %v, want 53", got)
	}
	if s.vmFailing || s.diskFailing {
		t.Fatalf("reading this machine's /proc failed")
	}
	if h := samplerHist(mfs, "stall_vm_dirty_throttle_ratio_sampled", ""); h.GetSampleCount() != 53 {
		t.Errorf("throttle ratio observations = %d, want 53 (does this kernel lack nr_dirty_threshold?)", h.GetSampleCount())
	}
	if n := s.problems.Count(); n != 0 {
		t.Errorf("%d problems reading this machine's /proc", n)
	}
	samplerAssertFinite(t, mfs)
}

func TestSamplerRunStopsAndTicks(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.vm.data = samplerReadFixture(t, "excursion", "0", "vmstat")
	r.disk.data = samplerReadFixture(t, "excursion", "0", "diskstats")
	ticks := make(chan time.Time)
	stopped := false
	r.s.opts.Ticker = func(d time.Duration) (<-chan time.Time, func()) {
		if d != time.Second {
			t.Errorf("ticker interval %v, want 1s", d)
		}
		return ticks, func() { stopped = true }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.s.Run(ctx); close(done) }()
	for i := 0; i < 3; i++ {
		ticks <- time.Time{} // unbuffered: returns once Run has taken the tick
	}
	cancel()
	<-done
	if !stopped {
		t.Error("Run did not stop its ticker")
	}
	// One tick at start, then one per received tick; the third received
	// tick finished before Run looked at ctx again.
	if got := samplerCounter(samplerGather(t, r.s), "stall_sampler_ticks_total"); got != 4 {
		t.Errorf("ticks = %v, want 4", got)
	}
}

func TestSamplerOverrun(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.vm.err = os.ErrNotExist
	slow := &samplerSlowReader{clock: r.clock, cost: 1500 * time.Millisecond}
	r.s.opts.Disk = slow
	r.s.tick()
	slow.cost = 10 * time.Millisecond
	r.s.tick()
	mfs := samplerGather(t, r.s)
	if got := samplerCounter(mfs, "stall_sampler_overruns_total"); got != 1 {
		t.Errorf("overruns = %v, want 1", got)
	}
}

// samplerSlowReader advances the fake clock by cost on every read.
type samplerSlowReader struct {
	clock *samplerFakeClock
	cost  time.Duration
}

func (r *samplerSlowReader) Read(buf []byte) ([]byte, error) {
	r.clock.t = r.clock.t.Add(r.cost)
	return buf[:0], nil
}
func (r *samplerSlowReader) Close() error { return nil }

// FuzzSamplerDiskstats feeds two arbitrary /proc/diskstats snapshots one
// second apart through the sampler: it must not panic and every observation
// must be finite, non-negative, and utilization at most 1.
func FuzzSamplerDiskstats(f *testing.F) {
	for i := 0; i < 6; i++ {
		b, err := os.ReadFile(filepath.Join("fixtures", "sampler", "excursion", fmt.Sprint(i), "diskstats"))
		if err != nil {
			f.Fatal(err)
		}
		next, _ := os.ReadFile(filepath.Join("fixtures", "sampler", "excursion", fmt.Sprint((i+1)%6), "diskstats"))
		f.Add(b, next)
	}
	f.Add([]byte("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n"), []byte("8 0 sda 0 2 3 4294967295 5 6 7 8 9 1 11\n"))
	f.Add([]byte("8 0 sda 18446744073709551615 0 0 0 0 0 0 0 0 0 0"), []byte("8 0 sda 0 0 0 0 0 0 0 0 0 0 0"))
	// Include every device, so no sysfs lookups slow the fuzzer down.
	filter := newDeviceFilter(collector.Paths{Sysfs: "fixtures/sampler/no-sysfs"}, testSettings(f, "--diskstats.device-include=.*").devices)
	// One sampler for all runs, reset in between: building client_golang
	// vectors per run would dominate the fuzzer's time.
	disk := &samplerFakeReader{}
	clock := &samplerFakeClock{}
	s := newSampler(samplerOptions{Interval: time.Second, VMStat: &samplerFakeReader{err: os.ErrNotExist},
		Disk: disk, Filter: filter, Now: clock.Now})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		s.devs = s.devs[:0]
		s.await.Reset()
		s.util.Reset()
		filter.cache = [3]map[string]bool{}
		disk.data = a
		s.tick()
		clock.t = clock.t.Add(time.Second)
		disk.data = b
		s.tick()
		ch := make(chan prometheus.Metric, 4*len(s.devs)+8)
		s.await.Collect(ch)
		s.util.Collect(ch)
		close(ch)
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			h := pb.GetHistogram()
			sum, n := h.GetSampleSum(), float64(h.GetSampleCount())
			if sum < 0 || math.IsNaN(sum) || math.IsInf(sum, 0) {
				t.Fatalf("%s: sum %v is not a finite non-negative number", m.Desc(), sum)
			}
			if strings.Contains(m.Desc().String(), "utilization") && sum > n {
				t.Fatalf("utilization sum %v > count %v", sum, n)
			}
		}
	})
}

func BenchmarkSamplerTick(b *testing.B) {
	filter := newDeviceFilter(collector.Paths{Sysfs: "/sys"}, testSettings(b).devices)
	s := newSampler(samplerOptions{
		Interval: time.Second,
		VMStat:   NewProcFile("/proc/vmstat"),
		Disk:     NewProcFile("/proc/diskstats"),
		Filter:   filter,
	})
	defer s.opts.VMStat.Close()
	defer s.opts.Disk.Close()
	s.tick()
	b.ReportAllocs()
	cpu := samplerCPUStart()
	for b.Loop() {
		s.tick()
	}
	cpu.report(b, time.Second)
}

// samplerCPU measures the process's user+system CPU time (getrusage), which
// other processes on a shared machine do not inflate the way they inflate
// wall time.
type samplerCPU struct{ start time.Duration }

func samplerRusage() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func samplerCPUStart() samplerCPU { return samplerCPU{start: samplerRusage()} }

// report adds cpu-ns/op and, for an operation done once per period, the
// share of one core it costs.
func (c samplerCPU) report(b *testing.B, period time.Duration) {
	per := float64(samplerRusage()-c.start) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/op")
	if period > 0 {
		b.ReportMetric(100*per/float64(period), "%core@"+period.String())
	}
}

// BenchmarkSamplerReadVMStat and BenchmarkSamplerParseVMStat split the
// vmstat part of a tick into the kernel's read and our parse.
func BenchmarkSamplerReadVMStat(b *testing.B) {
	r := NewProcFile("/proc/vmstat")
	defer r.Close()
	buf := make([]byte, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = r.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSamplerParseVMStat(b *testing.B) {
	data, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		b.Skip(err)
	}
	var v VMStat
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ParseVMStat(data, &v)
	}
}

func BenchmarkSamplerReadDiskstats(b *testing.B) {
	r := NewProcFile("/proc/diskstats")
	defer r.Close()
	buf := make([]byte, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = r.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSamplerRunLoop runs the real Run loop (ticker, goroutine
// wake-ups, reads of this machine's /proc) at a 10 ms interval and reports
// the process CPU time (getrusage, user+system) per tick. Run it with a
// fixed count: -bench SamplerRunLoop -benchtime 500x.
func BenchmarkSamplerRunLoop(b *testing.B) {
	filter := newDeviceFilter(collector.Paths{Sysfs: "/sys"}, testSettings(b).devices)
	const interval = 10 * time.Millisecond
	ticks := make(chan time.Time)
	s := newSampler(samplerOptions{
		Interval: interval,
		VMStat:   NewProcFile("/proc/vmstat"),
		Disk:     NewProcFile("/proc/diskstats"),
		Filter:   filter,
		Ticker: func(time.Duration) (<-chan time.Time, func()) {
			return ticks, func() {}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	real := time.NewTicker(interval)
	defer real.Stop()
	<-real.C
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ticks <- <-real.C // forward the real tick: the benchmark's own wake-up is counted too
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cancel()
	<-done
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(float64(cpu.Nanoseconds()), "cpu-ns/tick")
	b.ReportMetric(100*cpu.Seconds()/1, "%core@1s")
}

func TestSamplerSurvivesPanic(t *testing.T) {
	r := newSamplerRig(t, time.Second)
	r.s.opts.VMStat = samplerPanicReader{}
	r.s.safeTick()
	if got := r.s.problems.Count(); got != 1 {
		t.Errorf("problems after a panicking tick = %d, want 1", got)
	}
}

type samplerPanicReader struct{}

func (samplerPanicReader) Read([]byte) ([]byte, error) { panic("injected") }
func (samplerPanicReader) Close() error                { return nil }

// TestSamplerBlindFails: a sampler that cannot read its files reports
// failure (issue 11: with an empty procfs it reported success 1 while
// vmstat, meminfo and diskstats reported 0), names what it cannot read, and
// recovers when the files appear.
func TestSamplerBlindFails(t *testing.T) {
	dir := t.TempDir()
	s := newSampler(samplerOptions{
		Interval: time.Second,
		VMStat:   NewProcFile(filepath.Join(dir, "vmstat")),
		Disk:     NewProcFile(filepath.Join(dir, "diskstats")),
	})
	defer s.opts.VMStat.Close()
	defer s.opts.Disk.Close()
	update := func() error {
		ch := make(chan prometheus.Metric, 100)
		defer close(ch)
		return s.Update(context.Background(), ch)
	}
	if err := update(); err != nil {
		t.Errorf("before the first tick: %v", err)
	}
	s.tick()
	err := update()
	if err == nil || !strings.Contains(err.Error(), "/proc/vmstat") || !strings.Contains(err.Error(), "/proc/diskstats") {
		t.Fatalf("blind sampler: %v, want an error naming both files", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte("   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.tick()
	if err := update(); err == nil || strings.Contains(err.Error(), "diskstats") {
		t.Errorf("diskstats readable, vmstat not: %v, want an error about vmstat only", err)
	}
	vm := samplerReadFixture(t, "excursion", "0", "vmstat")
	if err := os.WriteFile(filepath.Join(dir, "vmstat"), vm, 0o644); err != nil {
		t.Fatal(err)
	}
	s.tick()
	if err := update(); err != nil {
		t.Errorf("both files readable: %v", err)
	}
}
