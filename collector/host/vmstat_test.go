package host

import (
	"errors"
	"testing"
)

// TestParseVMStatLayouts checks the normalised counters on each kernel
// generation's layout, with the sums worked out by hand from the fixtures.
func TestParseVMStatLayouts(t *testing.T) {
	type want struct {
		allocStalls, directScanned, directReclaimed, kswapdScanned, refaults uint64
		hasRefaults, hasOOM                                                  bool
		ratio                                                                float64
		bad                                                                  int
	}
	for _, tc := range []struct {
		fixture string
		want    want
	}{
		// 3.10: one allocstall; per-zone pgscan_direct_{dma,dma32,normal,movable}
		// = 0+31219+523001+0 (pgscan_direct_throttle 12 excluded); no workingset.
		{"linux-3.10/proc/vmstat", want{
			allocStalls: 1731, directScanned: 554220, directReclaimed: 23112 + 412998,
			kswapdScanned: 1923441 + 9771234, hasRefaults: false, hasOOM: false,
			ratio: float64(181248+20480) / float64((655360+327680)/2),
		}},
		// 4.19: allocstall_{normal,movable} = 2231+12; node-wide pgscan; one bad line.
		{"linux-4.19/proc/vmstat", want{
			allocStalls: 2243, directScanned: 2412334, directReclaimed: 1912334,
			kswapdScanned: 91234112, refaults: 1812334, hasRefaults: true, hasOOM: true,
			ratio: float64(398101+14230) / (float64(423001+211241) / 2), bad: 1,
		}},
		// 6.8: allocstall_* incl. device; refault anon+file = 412+8123411.
		{"linux-6.8/proc/vmstat", want{
			allocStalls: 41233 + 912, directScanned: 11234123, directReclaimed: 9123412,
			kswapdScanned: 512341234, refaults: 412 + 8123411, hasRefaults: true, hasOOM: true,
			ratio: float64(621001+80233) / (float64(634112+316668) / 2),
		}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			var v VMStat
			bad, err := ParseVMStat(readFixture(t, tc.fixture), &v)
			if bad != tc.want.bad || (bad > 0) != (err != nil) {
				t.Fatalf("bad lines = %d (%v), want %d", bad, err, tc.want.bad)
			}
			check := func(name string, got uint64, ok bool, want uint64) {
				t.Helper()
				if !ok || got != want {
					t.Errorf("%s = %d (present %v), want %d", name, got, ok, want)
				}
			}
			x, ok := v.First(VMAllocstall, VMAllocstallZones)
			check("allocstalls", x, ok, tc.want.allocStalls)
			x, ok = v.First(VMPgscanDirect, VMPgscanDirectZones)
			check("direct scanned", x, ok, tc.want.directScanned)
			x, ok = v.First(VMPgstealDirect, VMPgstealDirectZones)
			check("direct reclaimed", x, ok, tc.want.directReclaimed)
			x, ok = v.First(VMPgscanKswapd, VMPgscanKswapdZones)
			check("kswapd scanned", x, ok, tc.want.kswapdScanned)
			x, ok = v.First(VMWorkingsetRefault, VMWorkingsetRefaultSplit)
			if ok != tc.want.hasRefaults || x != tc.want.refaults {
				t.Errorf("refaults = %d (present %v), want %d (present %v)", x, ok, tc.want.refaults, tc.want.hasRefaults)
			}
			if _, has := v.Get(VMOOMKill); has != tc.want.hasOOM {
				t.Errorf("oom_kill present = %v, want %v", has, tc.want.hasOOM)
			}
			r, ok := v.ThrottleRatio()
			if !ok || r != tc.want.ratio {
				t.Errorf("throttle ratio = %v (ok %v), want %v", r, ok, tc.want.ratio)
			}
		})
	}
}

func TestParseVMStatBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		bad      int
		dirty    uint64
		hasDirty bool
	}{
		{"empty", "", 0, 0, false},
		{"no value", "nr_dirty\n", 1, 0, false},
		{"negative", "nr_dirty -1\n", 1, 0, false},
		{"overflow", "nr_dirty 18446744073709551616\n", 1, 0, false},
		{"max uint64", "nr_dirty 18446744073709551615\n", 0, 1<<64 - 1, true},
		{"trailing garbage", "nr_dirty 12x\nnr_writeback 3\n", 1, 0, false},
		{"unknown field ignored even if odd", "future_counter abc\nnr_dirty 5\n", 0, 5, true},
		{"truncated last line", "nr_dirty 7\nnr_writeb", 1, 7, true},
		{"no trailing newline", "nr_dirty 9", 0, 9, true},
		{"blank lines", "\n\nnr_dirty 1\n\n", 0, 1, true},
		{"leading space", " nr_dirty 1\n", 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v VMStat
			bad, err := ParseVMStat([]byte(tc.in), &v)
			if bad != tc.bad {
				t.Errorf("bad = %d, want %d (err %v)", bad, tc.bad, err)
			}
			var pe *ParseError
			if bad > 0 && !errors.As(err, &pe) {
				t.Errorf("err = %v, want a *ParseError", err)
			}
			d, ok := v.Get(VMNrDirty)
			if d != tc.dirty || ok != tc.hasDirty {
				t.Errorf("nr_dirty = %d (present %v), want %d (present %v)", d, ok, tc.dirty, tc.hasDirty)
			}
		})
	}
}

func TestThrottleRatioNeedsAllFields(t *testing.T) {
	var v VMStat
	ParseVMStat([]byte("nr_dirty 10\nnr_writeback 0\nnr_dirty_threshold 0\nnr_dirty_background_threshold 0\n"), &v)
	if r, ok := v.ThrottleRatio(); ok {
		t.Errorf("zero thresholds gave ratio %v", r)
	}
	ParseVMStat([]byte("nr_dirty 10\nnr_dirty_threshold 20\nnr_dirty_background_threshold 10\n"), &v)
	if r, ok := v.ThrottleRatio(); ok {
		t.Errorf("missing nr_writeback gave ratio %v", r)
	}
	// nr_unstable counts as dirty, as in balance_dirty_pages() before 5.8.
	ParseVMStat([]byte("nr_dirty 10\nnr_unstable 5\nnr_writeback 0\nnr_dirty_threshold 20\nnr_dirty_background_threshold 10\n"), &v)
	if r, ok := v.ThrottleRatio(); !ok || r != 1 {
		t.Errorf("ratio = %v, want 1 (15 pages at freerun 15)", r)
	}
}

func TestParseVMStatDoesNotAllocate(t *testing.T) {
	data := readFixture(t, "linux-6.8/proc/vmstat")
	var v VMStat
	allocs := testing.AllocsPerRun(100, func() { ParseVMStat(data, &v) })
	if allocs != 0 {
		t.Errorf("ParseVMStat allocates %v times per call, want 0", allocs)
	}
}

func FuzzParseVMStat(f *testing.F) {
	for _, p := range []string{"linux-3.10/proc/vmstat", "linux-4.19/proc/vmstat", "linux-6.8/proc/vmstat", "linux-5.14-arm64-64k/proc/vmstat"} {
		f.Add(readFixture(f, p))
	}
	f.Add([]byte("nr_dirty 1\nallocstall_normal 18446744073709551615\nallocstall_dma 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v VMStat
		bad, err := ParseVMStat(data, &v)
		if (bad > 0) != (err != nil) {
			t.Fatalf("bad=%d but err=%v", bad, err)
		}
		if r, ok := v.ThrottleRatio(); ok && (r < 0 || r != r) {
			t.Fatalf("throttle ratio %v", r)
		}
		for f := VMField(0); f < vmFieldCount; f++ {
			if x, ok := v.Get(f); !ok && x != 0 {
				t.Fatalf("absent field %d has value %d", f, x)
			}
		}
	})
}

func BenchmarkParseVMStat(b *testing.B) {
	data := readFixture(b, "linux-6.8/proc/vmstat")
	var v VMStat
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ParseVMStat(data, &v)
	}
}
