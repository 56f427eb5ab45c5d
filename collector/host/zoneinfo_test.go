package host

import (
	"testing"
)

func TestParseZoneinfoLayouts(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		want    []Zone
	}{
		{"linux-3.10/proc/zoneinfo", []Zone{
			{Node: "0", Name: "DMA", Free: 3976, Min: 33, Low: 41, High: 49, Managed: 3976},
			{Node: "0", Name: "DMA32", Free: 512301, Min: 7098, Low: 8872, High: 10647, Managed: 851936},
			{Node: "0", Name: "Normal", Free: 1269024, Min: 26761, Low: 33451, High: 40141, Managed: 3212556},
		}},
		{"linux-4.19/proc/zoneinfo", []Zone{
			{Node: "0", Name: "DMA", Free: 3968, Min: 8, Low: 10, High: 12, Managed: 3968},
			{Node: "0", Name: "DMA32", Free: 681234, Min: 1559, Low: 1948, High: 2337, Managed: 766504},
			{Node: "0", Name: "Normal", Free: 1412331, Min: 15468, Low: 19335, High: 23202, Managed: 7435922},
			{Node: "0", Name: "Movable", Free: 0, Min: 0, Low: 0, High: 0, Managed: 0},
			{Node: "1", Name: "Normal", Free: 1914798, Min: 16896, Low: 21120, High: 25344, Managed: 8257485},
		}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			zones, bad, err := ParseZoneinfo(readFixture(t, tc.fixture), nil)
			if bad != 0 {
				t.Fatalf("bad = %d: %v", bad, err)
			}
			if len(zones) != len(tc.want) {
				t.Fatalf("got %d zones, want %d: %+v", len(zones), len(tc.want), zones)
			}
			for i, w := range tc.want {
				g := zones[i]
				if g.Node != w.Node || g.Name != w.Name || g.Free != w.Free || g.Min != w.Min ||
					g.Low != w.Low || g.High != w.High || g.Managed != w.Managed ||
					!g.HasFree || !g.HasManaged || g.Marks != 7 {
					t.Errorf("zone %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestParseZoneinfoBadInput(t *testing.T) {
	in := "stray line before any node\n" +
		"Node 0, zone   Normal\n" +
		"  pages free     x12\n" +
		"        min      10\n" +
		"        low      \n" +
		"        high     30\n" +
		"  pagesets\n" +
		"              high:  378\n" + // per-CPU pageset, not the watermark
		"      nr_free_pages 77\n" +
		"Node zero, zone DMA\n" +
		"        min      1\n" +
		"Node 1, zone\n" +
		"Node 2, zone HighMem\n" +
		"  pages free 5"
	zones, bad, err := ParseZoneinfo([]byte(in), nil)
	if bad != 4 || err == nil {
		t.Errorf("bad = %d (%v), want 4: x12, empty low, two bad headers", bad, err)
	}
	if len(zones) != 2 {
		t.Fatalf("zones = %+v", zones)
	}
	n := zones[0]
	// "pages free x12" failed, so nr_free_pages is the fallback.
	if !n.HasFree || n.Free != 77 || n.Min != 10 || n.High != 30 || n.Marks != 1|4 {
		t.Errorf("Normal = %+v", n)
	}
	if h := zones[1]; h.Node != "2" || h.Name != "HighMem" || h.Free != 5 || h.Marks != 0 {
		t.Errorf("HighMem = %+v", h)
	}
}

func TestParseZoneinfoReusesMemory(t *testing.T) {
	data := readFixture(t, "linux-4.19/proc/zoneinfo")
	zones, _, _ := ParseZoneinfo(data, nil)
	if allocs := testing.AllocsPerRun(50, func() { zones, _, _ = ParseZoneinfo(data, zones) }); allocs != 0 {
		t.Errorf("ParseZoneinfo allocates %v times per call with a reused slice", allocs)
	}
}

func FuzzParseZoneinfo(f *testing.F) {
	for _, p := range []string{"linux-3.10/proc/zoneinfo", "linux-4.19/proc/zoneinfo", "linux-6.8/proc/zoneinfo"} {
		f.Add(readFixture(f, p))
	}
	f.Add([]byte("Node 0, zone Normal\n pages free 1\n min 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		zones, bad, err := ParseZoneinfo(data, nil)
		if (bad > 0) != (err != nil) {
			t.Fatalf("bad=%d err=%v", bad, err)
		}
		for _, z := range zones {
			if z.Name == "" || z.Node == "" {
				t.Fatalf("zone without a name: %+v", z)
			}
		}
	})
}

func BenchmarkParseZoneinfo(b *testing.B) {
	data := readFixture(b, "linux-6.8/proc/zoneinfo")
	var zones []Zone
	b.ReportAllocs()
	for b.Loop() {
		zones, _, _ = ParseZoneinfo(data, zones)
	}
}
