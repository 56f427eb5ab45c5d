package collector

import (
	"os"
	"strings"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	data := "MemTotal:       16314284 kB\nMemFree:  x kB\nCached: 12 kB\nHugePages_Total:       0\nDirty:  -5 kB\nWriteback: 7\nMemAvailable: 3 MB\nno colon here\n"
	var m Meminfo
	bad, err := ParseMeminfo([]byte(data), &m)
	// MemFree is not exported, so its value is not looked at; Dirty and
	// MemAvailable are malformed.
	if bad != 2 || err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("bad = %d, first error %v; want 2, the first on line 5", bad, err)
	}
	want := map[string]uint64{"MemTotal": 16314284 * 1024, "Cached": 12 * 1024, "Writeback": 7}
	for i, f := range meminfoFields {
		v, ok := want[f.name]
		if m.Has[i] != ok || m.Bytes[i] != v {
			t.Errorf("%s = %d (present %v), want %d (present %v)", f.name, m.Bytes[i], m.Has[i], v, ok)
		}
	}
}

// TestParseMeminfoFixtures: every kernel generation's fixture parses without
// a bad line, and the real /proc/meminfo does, without allocating.
func TestParseMeminfoFixtures(t *testing.T) {
	files := []string{"/proc/meminfo"}
	for _, gen := range []string{"linux-3.10", "linux-4.19", "linux-5.14-arm64-64k", "linux-6.8"} {
		files = append(files, "fixtures/"+gen+"/proc/meminfo")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m Meminfo
		if bad, err := ParseMeminfo(data, &m); bad != 0 {
			t.Errorf("%s: %d bad lines: %v", f, bad, err)
		}
		if !m.Has[0] || m.Bytes[0] == 0 {
			t.Errorf("%s: no MemTotal", f)
		}
		if allocs := testing.AllocsPerRun(20, func() { ParseMeminfo(data, &m) }); allocs != 0 {
			t.Errorf("%s: %v allocations per parse, want 0", f, allocs)
		}
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal: 1 kB\nDirty: 2\n"))
	f.Add([]byte("MemAvailable:\x00 18446744073709551615 kB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Meminfo
		bad, err := ParseMeminfo(data, &m)
		if (bad == 0) != (err == nil) {
			t.Fatalf("bad = %d but error %v", bad, err)
		}
	})
}
