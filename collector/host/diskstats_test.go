package host

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// exportedDevices lists the devices a diskstats scrape exports, sorted.
func exportedDevices(t *testing.T, c *diskstatsCollector) string {
	t.Helper()
	r := scrape(t, c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var devs []string
	for _, m := range r.Metrics {
		if m.Name == "stall_disk_reads_completed_total" {
			devs = append(devs, m.Labels["device"])
		}
	}
	sort.Strings(devs)
	return strings.Join(devs, " ")
}

// TestDiskstatsWithoutSysfs: on a Synology NAS without a mounted sysfs
// (fixtures/synology-dsm7), DSM's partitions sata1p1…p3 are told apart from
// the disks by name, as nvme0n1p1 is; --diskstats.partitions and
// --diskstats.device-include bring them back.
func TestDiskstatsWithoutSysfs(t *testing.T) {
	proc := "fixtures/synology-dsm7/proc"
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "dm-0 md0 md1 md2 nvme0n1 sata1 sata2 synoboot synoboot1 synoboot2"},
		{[]string{"--diskstats.partitions"}, "dm-0 md0 md1 md2 nvme0n1 nvme0n1p1 sata1 sata1p1 sata1p2 sata1p3 sata2 sata2p1 sata2p2 sata2p3 synoboot synoboot1 synoboot2"},
		{[]string{`--diskstats.device-include=sata\d+p\d+`}, "sata1p1 sata1p2 sata1p3 sata2p1 sata2p2 sata2p3"},
	} {
		d := newDiskstatsCollector(testConfig(t, "diskstats", proc, "", nil), testSettings(t, c.args...))
		if got := exportedDevices(t, d); got != c.want {
			t.Errorf("%v:\n got %s\nwant %s", c.args, got, c.want)
		}
	}
	// The values are the file's, in base units.
	r := scrape(t, build(t, newDiskstatsCollector, "diskstats", proc, ""))
	for _, c := range []struct {
		name string
		want float64
	}{
		{"stall_disk_reads_completed_total", 4123412},
		{"stall_disk_read_bytes_total", 912341234 * 512},
		{"stall_disk_read_time_seconds_total", 3123.412},
		{"stall_disk_io_time_weighted_seconds_total", 44357.535},
	} {
		if got := r.Must(t, c.name, "device", "sata1"); got != c.want {
			t.Errorf("%s{device=sata1} = %v, want %v", c.name, got, c.want)
		}
	}
	if _, ok := r.Get("stall_disk_discards_completed_total", "device", "sata1"); ok {
		t.Error("a 14-field line (before 4.18) exported discards")
	}
}

// TestDiskstatsSysfsDecides: where sysfs knows a device, it decides whether
// it is a partition, whatever its name says.
func TestDiskstatsSysfsDecides(t *testing.T) {
	sys := t.TempDir()
	for _, dir := range []string{"class/block/sata1p1", "class/block/weird0/partition"} {
		if err := os.MkdirAll(filepath.Join(sys, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	proc := writeFiles(t, t.TempDir(), map[string]string{"diskstats": diskLine(8, 0, "sata1p1", 1, 1, 1, 1, 1) +
		diskLine(8, 16, "weird0", 1, 1, 1, 1, 1) + diskLine(8, 32, "sdb1", 1, 1, 1, 1, 1)})
	c := build(t, newDiskstatsCollector, "diskstats", proc, sys)
	if got, want := exportedDevices(t, c), "sata1p1"; got != want {
		t.Errorf("got %s, want %s (sysfs: sata1p1 a disk, weird0 a partition; sdb1 unknown to it, a partition by name)", got, want)
	}
	c = build(t, newDiskstatsCollector, "diskstats", "fixtures/linux-6.8/proc", "fixtures/linux-6.8/sys")
	if got, want := exportedDevices(t, c), "dm-0 vda vdb"; got != want {
		t.Errorf("linux-6.8: got %s, want %s", got, want)
	}
}

// String is for test failure messages.
func (l diskstatsLine) String() string {
	return fmt.Sprintf("%d:%d %s r=%d rms=%d w=%d wms=%d io=%d", l.Major, l.Minor, l.Name,
		l.Stat[dsReads], l.Stat[dsReadMs], l.Stat[dsWrites], l.Stat[dsWriteMs], l.Stat[dsIOMs])
}

func TestDiskstatsScannerFormats(t *testing.T) {
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
			t.Errorf("%s: no line parsed (bad %d: %v)", c.name, sc.bad.n, sc.bad.first)
			continue
		}
		if got := sc.Line.String(); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	for _, bad := range []string{"x 0 sda 1 2 3 4 5 6 7 8 9 10 11", "8 0 sda 1 2 3 4 5 6 7 8 9 10", "8 0 sda 1 2 3 -4 5 6 7 8 9 10 11", "8", "8 0",
		"8 0 \xff\xfe 1 2 3 4 5 6 7 8 9 10 11"} {
		sc := newDiskstatsScanner([]byte(bad))
		if sc.Next() || sc.bad.n != 1 || sc.bad.first == nil {
			t.Errorf("%q: want one malformed line, got bad=%d err=%v", bad, sc.bad.n, sc.bad.first)
		}
	}
}
