package host

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// newTestSampler is the sampler of the procfs dir (which may lack its
// files), with the default flags and no sysfs, so partitions are told by
// name.
func newTestSampler(t testing.TB, dir string, args ...string) *sampler {
	t.Helper()
	return newSampler(testConfig(t, "sampler", dir, "", nil), testSettings(t, args...))
}

// writeExcursion writes snapshot i of fixtures/sampler/excursion into the
// procfs dir.
func writeExcursion(t testing.TB, dir string, i int) {
	t.Helper()
	for _, f := range []string{"vmstat", "diskstats"} {
		writeFiles(t, dir, map[string]string{f: string(readFixture(t, filepath.Join("sampler", "excursion", fmt.Sprint(i), f)))})
	}
}

// histogram is one histogram series of an exposition: its cumulative
// bucket counts as "le:count … count:N" and its sum.
type histogram struct {
	buckets string
	sum     float64
}

var sampleRe = regexp.MustCompile(`^([a-z_]+?)(_bucket|_sum|_count)(?:\{(.*)\})? (\S+)$`)

// histogramOf finds the histogram of family whose device label is device
// ("" for none) in what s exposes.
func histogramOf(t testing.TB, s *sampler, family, device string) (histogram, bool) {
	t.Helper()
	var h histogram
	var b strings.Builder
	found := false
	for _, l := range strings.Split(collectortest.Expose(t, context.Background(), s).Families(family), "\n") {
		m := sampleRe.FindStringSubmatch(l)
		if m == nil || m[1] != family {
			continue
		}
		labels := m[3]
		dev := ""
		if i := strings.Index(labels, `device="`); i >= 0 {
			dev = labels[i+len(`device="`):]
			dev = dev[:strings.IndexByte(dev, '"')]
		}
		if dev != device {
			continue
		}
		found = true
		switch m[2] {
		case "_bucket":
			le := labels[strings.Index(labels, `le="`)+len(`le="`):]
			if le = le[:strings.IndexByte(le, '"')]; le != "+Inf" {
				fmt.Fprintf(&b, "%s:%s ", le, m[4])
			}
		case "_sum":
			h.sum, _ = strconv.ParseFloat(m[4], 64)
		case "_count":
			fmt.Fprintf(&b, "count:%s", m[4])
		}
	}
	h.buckets = b.String()
	return h, found
}

// observations is the number of observations of a histogram, 0 when it is
// not exported.
func observations(t testing.TB, s *sampler, family, device string) int {
	t.Helper()
	h, _ := histogramOf(t, s, family, device)
	_, count, _ := strings.Cut(h.buckets, "count:")
	n, _ := strconv.Atoi(count)
	return n
}

// TestSamplerExcursion drives the sampler's Run loop over six fixture
// snapshots one second apart (fixtures/sampler/excursion/N): dirty pages
// cross the throttle point at ticks 2 and 3 (ratios 0.4 0.6 1.2 1.05 0.8
// 0.4), and sda's await jumps from 2 ms to 800 ms for tick 3 while its
// utilization hits 1. A scrape before the excursion shows nothing above 1;
// the scrape after it shows the excursion in exact bucket counts: the
// two-second excursion between two scrapes stays visible.
func TestSamplerExcursion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeExcursion(t, dir, 0)
		s := newTestSampler(t, dir)
		go s.Run(t.Context())
		synctest.Wait() // the first tick, at once
		step := func(i int) {
			writeExcursion(t, dir, i)
			collectortest.Advance(time.Second)
			synctest.Wait() // the tick of that second has read snapshot i
		}
		step(1)
		if h, _ := histogramOf(t, s, "stall_vm_dirty_throttle_ratio_sampled", ""); h.buckets != "0.25:0 0.5:1 0.75:2 0.9:2 0.95:2 1:2 1.1:2 1.25:2 1.5:2 2:2 count:2" {
			t.Errorf("throttle ratio before the excursion: %s", h.buckets)
		}
		if got := scrape(t, s).Must(t, "stall_vm_dirty_throttled_seconds_total"); got != 0 {
			t.Errorf("throttled seconds before the excursion = %v, want 0", got)
		}
		for i := 2; i <= 5; i++ {
			step(i)
		}
		for _, c := range []struct {
			family, device, want string
			sum                  float64
		}{
			{"stall_vm_dirty_throttle_ratio_sampled", "",
				"0.25:0 0.5:2 0.75:3 0.9:4 0.95:4 1:4 1.1:5 1.25:6 1.5:6 2:6 count:6", 4.45},
			// sda: 2 ms four times, 800 ms once (tick 0 is the baseline).
			{"stall_disk_await_seconds", "sda",
				"0.0005:0 0.001:0 0.0025:4 0.005:4 0.01:4 0.025:4 0.05:4 0.1:4 0.25:4 0.5:4 1:5 2.5:5 5:5 count:5", 0.808},
			{"stall_disk_utilization_ratio", "sda", "0.05:0 0.25:0 0.5:4 0.75:4 0.9:4 0.99:4 1:5 count:5", -1},
			// nvme0n1: 0.1 ms four times; idle at tick 3 (no await observation, util 0).
			{"stall_disk_await_seconds", "nvme0n1",
				"0.0005:4 0.001:4 0.0025:4 0.005:4 0.01:4 0.025:4 0.05:4 0.1:4 0.25:4 0.5:4 1:4 2.5:4 5:4 count:4", -1},
			{"stall_disk_utilization_ratio", "nvme0n1", "0.05:5 0.25:5 0.5:5 0.75:5 0.9:5 0.99:5 1:5 count:5", -1},
		} {
			h, _ := histogramOf(t, s, c.family, c.device)
			if h.buckets != c.want {
				t.Errorf("%s{device=%q}:\n got %s\nwant %s", c.family, c.device, h.buckets, c.want)
			}
			if c.sum >= 0 && math.Abs(h.sum-c.sum) > 1e-9 {
				t.Errorf("%s{device=%q}: sum %v, want %v", c.family, c.device, h.sum, c.sum)
			}
		}
		r := scrape(t, s)
		if got := r.Must(t, "stall_vm_dirty_throttled_seconds_total"); got != 2 {
			t.Errorf("throttled seconds = %v, want 2", got)
		}
		if got := r.Must(t, "stall_sampler_ticks_total"); got != 6 {
			t.Errorf("ticks = %v, want 6", got)
		}
		if got := r.Must(t, "stall_sampler_overruns_total"); got != 0 {
			t.Errorf("overruns = %v, want 0", got)
		}
		// Partitions and loop devices are filtered out by default.
		for _, dev := range []string{"sda1", "nvme0n1p1", "loop0"} {
			if _, ok := histogramOf(t, s, "stall_disk_await_seconds", dev); ok {
				t.Errorf("%s is exported, want it filtered", dev)
			}
		}
		if n := s.problems.Count(); n != 0 {
			t.Errorf("%d parse problems on well-formed fixtures", n)
		}
	})
}

// diskLine builds a 20-field /proc/diskstats line.
func diskLine(major, minor int, name string, reads, readMs, writes, writeMs, ioMs uint64) string {
	return fmt.Sprintf("%4d %7d %s %d 0 0 %d %d 0 0 %d 0 %d %d 0 0 0 0 0 0\n",
		major, minor, name, reads, readMs, writes, writeMs, ioMs, readMs+writeMs)
}

// diskSteps feeds the sampler's disk sampling /proc/diskstats reads made at
// chosen times, the way tick does with the clock.
type diskSteps struct {
	s   *sampler
	now time.Time
}

func newDiskSteps(t *testing.T) *diskSteps {
	return &diskSteps{s: newTestSampler(t, t.TempDir()), now: time.Unix(1700000000, 0)}
}

// step samples the lines as read dt after the previous read.
func (d *diskSteps) step(dt time.Duration, lines ...string) {
	d.now = d.now.Add(dt)
	d.s.sampleDisks([]byte(strings.Join(lines, "")), nil, d.now)
}

// assertFinite fails when any observation so far was negative, NaN or
// infinite (visible in the sums, as every observation is ≥ 0 otherwise),
// or a utilization above 1. It reads the histograms directly, to keep the
// fuzzer fast.
func assertFinite(t testing.TB, s *sampler) {
	t.Helper()
	ch := make(chan prometheus.Metric, 2*len(s.devs)+1)
	s.await.Collect(ch)
	s.util.Collect(ch)
	s.throttle.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		h := pb.GetHistogram()
		sum, n := h.GetSampleSum(), float64(h.GetSampleCount())
		if sum < 0 || math.IsNaN(sum) || math.IsInf(sum, 0) {
			t.Fatalf("%s %v: sum %v is not a finite non-negative number", m.Desc(), pb.GetLabel(), sum)
		}
		if strings.Contains(m.Desc().String(), "utilization") && sum > n {
			t.Fatalf("%v: utilization sum %v > count %v: some utilization above 1", pb.GetLabel(), sum, n)
		}
	}
}

// TestSamplerCounterResetsAndWraps: the 32-bit millisecond fields wrap at
// 2^32 and the interval across the wrap is observed; a device removed and
// re-added (counts that went down, another major:minor) and an implausible
// millisecond decrease only re-baseline.
func TestSamplerCounterResetsAndWraps(t *testing.T) {
	d := newDiskSteps(t)
	const near = math.MaxUint32 - 99 // 100 ms before the 32-bit millisecond fields wrap
	d.step(0,
		diskLine(8, 0, "sda", 1000, 1000, 1000, 1000, 1000),
		diskLine(8, 16, "sdb", 10, near, 10, 0, near))
	d.step(time.Second,
		diskLine(8, 0, "sda", 1100, 1100, 1100, 1100, 1500),
		diskLine(8, 16, "sdb", 20, 400, 10, 0, 400)) // +500 ms across the wrap
	for _, c := range []struct {
		family, device string
		sum            float64
	}{
		{"stall_disk_await_seconds", "sda", 0.001},
		{"stall_disk_await_seconds", "sdb", 0.05},
		{"stall_disk_utilization_ratio", "sdb", 0.5},
	} {
		if h, _ := histogramOf(t, d.s, c.family, c.device); !strings.HasSuffix(h.buckets, "count:1") || math.Abs(h.sum-c.sum) > 1e-12 {
			t.Errorf("%s{device=%s} after one interval: %s, sum %v; want one observation, sum %v", c.family, c.device, h.buckets, h.sum, c.sum)
		}
	}
	for _, c := range []struct {
		what string
		line string
		want int
	}{
		{"sda removed and re-added: its counts start over", diskLine(8, 0, "sda", 5, 7, 5, 7, 9), 1},
		{"the new baseline", diskLine(8, 0, "sda", 15, 17, 15, 17, 509), 2},
		{"another major:minor under the same name is a new device", diskLine(8, 32, "sda", 30, 500, 15, 17, 900), 2},
		{"a millisecond field that goes down far from 2^32 is not trusted", diskLine(8, 32, "sda", 40, 100, 15, 17, 1000), 2},
		{"the next good interval", diskLine(8, 32, "sda", 50, 200, 15, 17, 1100), 3},
	} {
		d.step(time.Second, c.line)
		if got := observations(t, d.s, "stall_disk_await_seconds", "sda"); got != c.want {
			t.Errorf("%s: %d observations, want %d", c.what, got, c.want)
		}
	}
	assertFinite(t, d.s)
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

// TestSamplerClockJumps: an interval whose elapsed time is not positive or
// longer than ten intervals (a clock that went back, a suspended host) is
// never observed.
func TestSamplerClockJumps(t *testing.T) {
	d := newDiskSteps(t)
	l := func(n uint64) string { return diskLine(8, 0, "sda", n, n, n, n, n) }
	d.step(0, l(100))
	d.step(-5*time.Second, l(200)) // clock went backwards
	d.step(0, l(300))              // no time passed
	d.step(time.Hour, l(400))      // suspended host or stopped process
	if got := observations(t, d.s, "stall_disk_utilization_ratio", "sda"); got != 0 {
		t.Fatalf("observations across clock jumps = %d, want 0", got)
	}
	d.step(time.Second, l(500))
	if got := observations(t, d.s, "stall_disk_utilization_ratio", "sda"); got != 1 {
		t.Fatalf("observations after the clock settled = %d, want 1", got)
	}
	assertFinite(t, d.s)
}

// TestSamplerDevicesComeAndGo: a device that appears is a baseline first;
// one that disappears loses its state and series; a failed read
// re-baselines every device.
func TestSamplerDevicesComeAndGo(t *testing.T) {
	d := newDiskSteps(t)
	a := func(n uint64) string { return diskLine(8, 0, "sda", n, n, n, n, n) }
	b := func(n uint64) string { return diskLine(8, 16, "sdb", n, n, n, n, n) }
	const util = "stall_disk_utilization_ratio"
	d.step(0, a(10))
	d.step(time.Second, a(20), b(10)) // sdb appears: baseline only
	d.step(time.Second, b(20), a(30)) // order changes
	if got := observations(t, d.s, util, "sda"); got != 2 {
		t.Errorf("sda observations = %d, want 2", got)
	}
	if got := observations(t, d.s, util, "sdb"); got != 1 {
		t.Errorf("sdb observations = %d, want 1", got)
	}
	d.step(time.Second, a(40)) // sdb disappears: its series go
	if _, ok := histogramOf(t, d.s, util, "sdb"); ok {
		t.Errorf("sdb still exported after it disappeared")
	}
	if len(d.s.devs) != 1 {
		t.Errorf("sampler keeps %d devices, want 1", len(d.s.devs))
	}
	d.step(time.Second, a(50), b(5)) // sdb is back, counters restarted
	d.step(time.Second, a(60), b(15))
	if got := observations(t, d.s, util, "sdb"); got != 1 {
		t.Errorf("sdb observations after it came back = %d, want 1", got)
	}
	d.s.sampleDisks(nil, os.ErrPermission, d.now)
	d.step(time.Second, a(70), b(25))
	if got := observations(t, d.s, util, "sda"); got != 5 {
		t.Errorf("sda observations after a failed read = %d, want 5", got)
	}
	assertFinite(t, d.s)
}

// TestSamplerBadInput: malformed lines are counted once each and skipped;
// a vmstat without a usable nr_writeback gives no throttle sample.
func TestSamplerBadInput(t *testing.T) {
	d := newDiskSteps(t)
	d.s.sampleVM([]byte("nr_dirty 10\nnr_writeback x\nnr_dirty_threshold 100\nnr_dirty_background_threshold 50\n"), nil)
	good := diskLine(8, 0, "sda", 10, 10, 10, 10, 10)
	// "garbage", the 3-field sdb and the duplicate sda are bad; sdc is the
	// old 4-field partition format, skipped silently.
	d.step(0, "garbage\n", good, "8 1 sdb 1 2 3\n", "   8  2 sdc 1 2 3 4\n", good)
	if got := d.s.problems.Count(); got != 4 {
		t.Errorf("problems = %d, want 4", got)
	}
	if _, ok := histogramOf(t, d.s, "stall_vm_dirty_throttle_ratio_sampled", ""); ok {
		t.Errorf("throttle ratio exported without nr_writeback")
	}
	if len(d.s.devs) != 1 {
		t.Errorf("devices tracked = %d, want 1 (sda; the 4-field sdc line has no timings)", len(d.s.devs))
	}
}

// TestSamplerRealProc runs ticks on this machine's /proc and asserts that
// the steady state allocates nothing.
func TestSamplerRealProc(t *testing.T) {
	s := newSampler(testConfig(t, "sampler", "/proc", "/sys", nil), testSettings(t))
	s.tick()
	s.tick()
	// An interface created on this machine meanwhile (another test's
	// veth) makes one tick read the names, which allocates: measured
	// again, up to three times, only then.
	ticks := 2
	for try := 1; ; try++ {
		namesAt := s.net.links.namesAt
		allocs := testing.AllocsPerRun(50, s.safeTick)
		ticks += 51 // AllocsPerRun runs it once more to warm up
		if allocs == 0 {
			break
		}
		if s.net.links.namesAt.Equal(namesAt) || try == 3 {
			t.Fatalf("one steady-state tick allocates %v times, want 0", allocs)
		}
	}
	if s.vmState.Failing() || s.diskState.Failing() || s.netState.Failing() {
		t.Fatalf("reading this machine's /proc or its interfaces' counters failed")
	}
	if got := scrape(t, s).Must(t, "stall_sampler_ticks_total"); got != float64(ticks) {
		t.Errorf("ticks = %v, want %d", got, ticks)
	}
	if got := observations(t, s, "stall_vm_dirty_throttle_ratio_sampled", ""); got != ticks {
		t.Errorf("throttle ratio observations = %d, want %d (does this kernel lack nr_dirty_threshold?)", got, ticks)
	}
	if n := s.problems.Count(); n != 0 {
		t.Errorf("%d problems reading this machine's /proc", n)
	}
	assertFinite(t, s)
}

// TestSamplerRunTicks: Run samples at once and then every interval, and
// returns when ctx is done.
func TestSamplerRunTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeExcursion(t, dir, 0)
		s := newTestSampler(t, dir, "--sampler.interval=250ms")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		collectortest.Advance(time.Second)
		synctest.Wait()
		if got := scrape(t, s).Must(t, "stall_sampler_ticks_total"); got != 5 {
			t.Errorf("ticks after 1 s at 250 ms = %v, want 5 (one at start)", got)
		}
		cancel()
		<-done
	})
}

// TestSamplerOverrun: a tick that took longer than the interval is counted.
func TestSamplerOverrun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestSampler(t, t.TempDir())
		for _, took := range []time.Duration{1500 * time.Millisecond, 10 * time.Millisecond, time.Second} {
			start := time.Now()
			collectortest.Advance(took)
			s.finishTick(start)
		}
		r := scrape(t, s)
		if got := r.Must(t, "stall_sampler_overruns_total"); got != 1 {
			t.Errorf("overruns = %v, want 1 (1.5 s; not 10 ms nor exactly the interval)", got)
		}
		if got := r.Must(t, "stall_sampler_ticks_total"); got != 3 {
			t.Errorf("ticks = %v, want 3", got)
		}
	})
}

// FuzzSamplerDiskstats feeds two arbitrary /proc/diskstats snapshots one
// second apart through the sampler: it must not panic and every observation
// must be finite, non-negative, and utilization at most 1.
func FuzzSamplerDiskstats(f *testing.F) {
	for i := 0; i < 6; i++ {
		f.Add(readFixture(f, fmt.Sprintf("sampler/excursion/%d/diskstats", i)), readFixture(f, fmt.Sprintf("sampler/excursion/%d/diskstats", (i+1)%6)))
	}
	f.Add([]byte("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n"), []byte("8 0 sda 0 2 3 4294967295 5 6 7 8 9 1 11\n"))
	f.Add([]byte("8 0 sda 18446744073709551615 0 0 0 0 0 0 0 0 0 0"), []byte("8 0 sda 0 0 0 0 0 0 0 0 0 0 0"))
	f.Add([]byte("8 0 sda 1 0 0 1 1 0 0 1 0 0 2\n"), []byte("8 0 sda 2 0 0 2 2 0 0 2 0 5000 4\n")) // 5 s of I/O time in 1 s
	// Include every device, so no sysfs lookups slow the fuzzer down. One
	// sampler for all runs, reset in between: building client_golang
	// vectors per run would dominate the fuzzer's time.
	s := newTestSampler(f, f.TempDir(), "--diskstats.device-include=.*")
	t0 := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		s.devs = s.devs[:0]
		s.await.Reset()
		s.util.Reset()
		s.sampleDisks(a, nil, t0)
		s.sampleDisks(b, nil, t0.Add(time.Second))
		assertFinite(t, s)
	})
}

// TestSamplerSurvivesPanic: a tick that panics (here a nil filter stands in
// for a bug) is counted as a problem, and the next tick runs.
func TestSamplerSurvivesPanic(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{"diskstats": diskLine(8, 0, "sda", 1, 1, 1, 1, 1)})
	s := newTestSampler(t, dir)
	s.filter = nil
	s.safeTick()
	if got := s.problems.Count(); got != 1 {
		t.Errorf("problems after a panicking tick = %d, want 1", got)
	}
}

// TestSamplerBlindFails: a sampler that cannot read its files reports
// failure (with an empty procfs it used to report success 1 while vmstat,
// meminfo and diskstats reported 0), names what it cannot read, warns once
// per file, and recovers when the files appear.
func TestSamplerBlindFails(t *testing.T) {
	dir := t.TempDir()
	logs := &collectortest.Logs{}
	s := newSampler(testConfig(t, "sampler", dir, "", logs), testSettings(t))
	if err := scrape(t, s).Err; err != nil {
		t.Errorf("before the first tick: %v", err)
	}
	for range 3 {
		s.tick()
	}
	err := scrape(t, s).Err
	if err == nil || !strings.Contains(err.Error(), "/proc/vmstat") || !strings.Contains(err.Error(), "/proc/diskstats") {
		t.Fatalf("blind sampler: %v, want an error naming both files", err)
	}
	if n := logs.Count("warn"); n != 2 {
		t.Errorf("%d warnings after three blind ticks, want one per file:\n%s", n, logs)
	}
	writeFiles(t, dir, map[string]string{"diskstats": "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n"})
	s.tick()
	if err := scrape(t, s).Err; err == nil || strings.Contains(err.Error(), "diskstats") {
		t.Errorf("diskstats readable, vmstat not: %v, want an error about vmstat only", err)
	}
	if logs.Count("info", "INFO sampler reads /proc/diskstats again ") != 1 {
		t.Errorf("no recovery logged:\n%s", logs)
	}
	writeExcursion(t, dir, 0)
	s.tick()
	if err := scrape(t, s).Err; err != nil {
		t.Errorf("both files readable: %v", err)
	}
}

func BenchmarkSamplerTick(b *testing.B) {
	s := newSampler(testConfig(b, "sampler", "/proc", "/sys", nil), testSettings(b))
	s.tick()
	b.ReportAllocs()
	cpu := collectortest.ProcessCPU()
	for b.Loop() {
		s.tick()
	}
	reportCPU(b, cpu, time.Second)
}

// BenchmarkSamplerReadVMStat and BenchmarkSamplerParseVMStat split the
// vmstat part of a tick into the kernel's read and our parse.
func BenchmarkSamplerReadVMStat(b *testing.B) { benchmarkRead(b, "/proc/vmstat") }

func BenchmarkSamplerParseVMStat(b *testing.B) {
	data, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		b.Fatal(err)
	}
	var v VMStat
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ParseVMStat(data, &v)
	}
}

func BenchmarkSamplerReadDiskstats(b *testing.B) { benchmarkRead(b, "/proc/diskstats") }

// benchmarkRead is one read of a kernel file through its procSource.
func benchmarkRead(b *testing.B, path string) {
	src := &procSource{path: path}
	buf := make([]byte, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = src.ReadNow(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSamplerRunLoop runs the real Run loop (ticker, goroutine
// wake-ups, reads of this machine's /proc) at a 10 ms interval for b.N
// intervals of real time and reports the process CPU time (getrusage,
// user+system) per tick. Run it with a fixed count: -bench SamplerRunLoop
// -benchtime 500x.
func BenchmarkSamplerRunLoop(b *testing.B) {
	const interval = 10 * time.Millisecond // below the flag's minimum, to measure many wake-ups
	st := testSettings(b)
	st.samplerInterval = interval
	s := newSampler(testConfig(b, "sampler", "/proc", "/sys", nil), st)
	ticks := func() float64 {
		var m dto.Metric
		if err := s.ticks.Write(&m); err != nil {
			b.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	before, cpu := ticks(), collectortest.ProcessCPU()
	time.Sleep(time.Duration(b.N) * interval) // real time: the ticker's wake-ups are what is measured
	used, n := collectortest.ProcessCPU()-cpu, ticks()-before
	cancel()
	<-done
	b.ReportMetric(float64(used.Nanoseconds())/n, "cpu-ns/tick")
	b.ReportMetric(100*used.Seconds()/n, "%core@1s")
}

// TestSamplerNoThresholds: a /proc/vmstat without the dirty thresholds is
// a failing state (collector.StateLog): one warning over several ticks, no
// throttle sample, and an info line once the thresholds appear.
func TestSamplerNoThresholds(t *testing.T) {
	logs := &collectortest.Logs{}
	s := newSampler(testConfig(t, "sampler", t.TempDir(), "", logs), testSettings(t))
	for range 3 {
		s.sampleVM([]byte("nr_dirty 10\nnr_writeback 5\n"), nil)
	}
	const lacks = "WARN /proc/vmstat lacks nr_dirty, nr_writeback or the dirty thresholds"
	if n := logs.Count("warn", lacks); n != 1 || logs.Count("warn", lacks, "reason=no_thresholds") != 1 {
		t.Errorf("%d warnings after three ticks without thresholds, want 1 with reason=no_thresholds:\n%s", n, logs)
	}
	if _, ok := histogramOf(t, s, "stall_vm_dirty_throttle_ratio_sampled", ""); ok {
		t.Error("throttle ratio sampled without thresholds")
	}
	s.sampleVM([]byte("nr_dirty 10\nnr_writeback 5\nnr_dirty_threshold 100\nnr_dirty_background_threshold 50\n"), nil)
	if logs.Count("info", "INFO /proc/vmstat reports the dirty thresholds again; the dirty throttle ratio is sampled ") != 1 {
		t.Errorf("no recovery logged:\n%s", logs)
	}
	if n := observations(t, s, "stall_vm_dirty_throttle_ratio_sampled", ""); n != 1 {
		t.Errorf("%d throttle ratio samples after the thresholds appeared, want 1", n)
	}
}
