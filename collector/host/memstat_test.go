package host

import (
	"strings"
	"testing"
)

// TestParseMemStatFixtures reads each kernel's memory.stat layout
// (fixtures/memstat/README.md) and checks the fields the dirty limits use.
func TestParseMemStatFixtures(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		dirty, writeback, bytes uint64
		ok, fileOK              bool
	}{
		// captured on this machine: the root's total_ covers its subtree.
		{"v1-6.18-root.stat", 107741184, 0, 2164703232 + 3800657920, true, true},
		{"v1-6.18-child.stat", 5894144, 0, 68751360 + 83996672, true, true},
		// total_ fields, not the cgroup's own (equal here: no children).
		{"v1-4.19-broker.stat", 209715200, 20971520, 536870912 + 1073741824, true, true},
		// before 4.2: no dirty accounting per memcg.
		{"v1-3.10-nodirty.stat", 0, 0, 536870912 + 1073741824, false, true},
		{"v2-5.4-service.stat", 33554432, 4194304, 402653184 + 134217728, true, true},
		{"v2-6.8-pod.stat", 943718400, 104857600, 2147483648 + 5368709120, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m MemStat
			bad, err := ParseMemStat(readFixture(t, "memstat/"+tc.name), &m)
			if bad != 0 || err != nil {
				t.Fatalf("bad lines %d: %v", bad, err)
			}
			d, w, ok := m.Dirty()
			if ok != tc.ok || d != tc.dirty || w != tc.writeback {
				t.Errorf("Dirty() = %d, %d, %v; want %d, %d, %v", d, w, ok, tc.dirty, tc.writeback, tc.ok)
			}
			f, ok := m.FileBytes()
			if ok != tc.fileOK || f != tc.bytes {
				t.Errorf("FileBytes() = %d, %v; want %d, %v", f, ok, tc.bytes, tc.fileOK)
			}
		})
	}
}

func TestParseMemStatBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, in   string
		bad        int
		dirty      uint64
		ok         bool
		errContain string
	}{
		{"unknown fields ignored", "zswpwb 3\nnew_field_of_7_0 9\nfile_dirty 4096\nfile_writeback 0\n", 0, 4096, true, ""},
		{"missing writeback", "file_dirty 4096\n", 0, 4096, false, ""},
		{"empty", "", 0, 0, false, ""},
		{"no trailing newline", "file_dirty 8192\nfile_writeback 4096", 0, 8192, true, ""},
		{"negative known field", "file_dirty -1\nfile_writeback 0\n", 1, 0, false, `memory.stat line 1 "file_dirty -1"`},
		{"garbage line", "garbage\nfile_dirty 1\nfile_writeback 2\n", 1, 1, true, "line 1"},
		{"unknown field's bad value is not checked", "pgscan x\nfile_dirty 1\nfile_writeback 2\n", 0, 1, true, ""},
		{"overflow", "file_dirty 18446744073709551616\nfile_writeback 0\n", 1, 0, false, "not an unsigned integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m MemStat
			bad, err := ParseMemStat([]byte(tc.in), &m)
			if bad != tc.bad || (err != nil) != (tc.bad > 0) {
				t.Fatalf("bad = %d, err = %v; want %d bad lines", bad, err, tc.bad)
			}
			if err != nil && !strings.Contains(err.Error(), tc.errContain) {
				t.Errorf("err %q does not say %q", err, tc.errContain)
			}
			d, _, ok := m.Dirty()
			if d != tc.dirty || ok != tc.ok {
				t.Errorf("Dirty() = %d, %v; want %d, %v", d, ok, tc.dirty, tc.ok)
			}
		})
	}
}

// The sampler parses the watched cgroups' memory.stat every tick.
func TestParseMemStatDoesNotAllocate(t *testing.T) {
	data := readFixture(t, "memstat/v2-6.8-pod.stat")
	var m MemStat
	if allocs := testing.AllocsPerRun(100, func() { ParseMemStat(data, &m) }); allocs != 0 {
		t.Errorf("ParseMemStat allocates %v times per call, want 0", allocs)
	}
}

func FuzzParseMemStat(f *testing.F) {
	for _, p := range []string{"v1-6.18-root.stat", "v1-4.19-broker.stat", "v1-3.10-nodirty.stat", "v2-5.4-service.stat", "v2-6.8-pod.stat"} {
		f.Add(readFixture(f, "memstat/"+p))
	}
	f.Add([]byte("file_dirty 18446744073709551615\nfile_writeback 18446744073709551615\ntotal_dirty 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m MemStat
		bad, err := ParseMemStat(data, &m)
		if (bad > 0) != (err != nil) {
			t.Fatalf("bad=%d but err=%v", bad, err)
		}
		for f := MemStatField(0); f < memStatFieldCount; f++ {
			if x, ok := m.Get(f); !ok && x != 0 {
				t.Fatalf("absent field %d has value %d", f, x)
			}
		}
		// Whatever the input, the limits stay finite and ordered.
		d, w, ok1 := m.Dirty()
		file, ok2 := m.FileBytes()
		if !ok1 || !ok2 {
			return
		}
		md := memcgDirty{filePages: file / 4096, headroom: noHeadroom, dirty: d / 4096, writeback: w / 4096}
		_, th, bg := memcgDirtyLimits(dirtySysctls{ratio: 20, bgRatio: 10}, 4096, 1<<20, 1<<10, md)
		if bg > th || th > 1<<32-1 {
			t.Fatalf("thresholds %d, %d", th, bg)
		}
	})
}

func BenchmarkParseMemStat(b *testing.B) {
	data := readFixture(b, "memstat/v2-6.8-pod.stat")
	var m MemStat
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ParseMemStat(data, &m)
	}
}
