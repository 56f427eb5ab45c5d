package host

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
)

// TestDeviceFilter: sysfs says what a partition is where it knows the
// device; the default exclude drops ram, loop, zram, fd, sr and nbd;
// --diskstats.device-include selects exactly the matching devices.
func TestDeviceFilter(t *testing.T) {
	sys := collector.Paths{Sysfs: "fixtures/linux-6.8/sys"}
	f := newDeviceFilter(sys, testSettings(t).devices)
	for name, ignored := range map[string]bool{
		"vda": false, "vdb": false, "dm-0": false, // whole disks (sysfs has no partition file)
		"vda1":  true,                // sysfs says partition
		"zram0": true, "loop0": true, // excluded by name
	} {
		if got := f.ignored([]byte(name)); got != ignored {
			t.Errorf("ignored(%s) = %v, want %v", name, got, ignored)
		}
	}
	inc := newDeviceFilter(sys, testSettings(t, "--diskstats.device-include=vda1|loop0", `--diskstats.device-exclude=loop\d+`).devices)
	if inc.ignored([]byte("vda1")) || inc.ignored([]byte("loop0")) || !inc.ignored([]byte("vda")) {
		t.Error("--diskstats.device-include must select exactly the matching devices")
	}
}

// TestPartitionNames: without sysfs, the name decides. A disk named with
// letters takes the number right after them; a disk whose name ends in a
// digit takes p and the number (Synology's sata1p1 was taken for a disk).
func TestPartitionNames(t *testing.T) {
	nosys := collector.Paths{Sysfs: t.TempDir()}
	f := newDeviceFilter(nosys, deviceSettings{})
	for _, c := range []struct{ name, disk string }{
		{"sda", "sda"}, {"sda1", "sda"}, {"sdaa12", "sdaa"}, {"vdb2", "vdb"}, {"xvda1", "xvda"}, {"hdc3", "hdc"},
		{"nvme0n1", "nvme0n1"}, {"nvme0n1p2", "nvme0n1"}, {"nvme10n12p13", "nvme10n12"},
		{"mmcblk0", "mmcblk0"}, {"mmcblk0p1", "mmcblk0"}, {"mmcblk0boot0", "mmcblk0boot0"},
		{"md0", "md0"}, {"md127", "md127"}, {"md0p1", "md0"},
		{"loop0", "loop0"}, {"loop0p1", "loop0"}, {"nbd0p1", "nbd0"}, {"zd16p1", "zd16"},
		{"sata1", "sata1"}, {"sata1p1", "sata1"}, {"sata12p3", "sata12"},
		{"cciss/c0d0", "cciss/c0d0"}, {"cciss/c0d0p1", "cciss/c0d0"},
		{"dm-0", "dm-0"}, {"zram0", "zram0"}, {"sr0", "sr0"},
		{"sdp1", "sdp"}, {"vdp", "vdp"}, // p after letters is part of the disk's name
	} {
		disk, partition := diskOf(nosys, c.name)
		if disk != c.disk || partition != (c.disk != c.name) {
			t.Errorf("diskOf(%s) = %s, partition %v; want %s", c.name, disk, partition, c.disk)
		}
		if got, want := f.ignored([]byte(c.name)), c.disk != c.name; got != want {
			t.Errorf("ignored(%s) = %v, want %v: partitions are left out by default", c.name, got, want)
		}
	}
}

// TestDeviceFilterConcurrent: the diskstats scrape, the sampler and the
// kernel log reader share one filter (run with -race), and a cached name
// costs no allocation.
func TestDeviceFilterConcurrent(t *testing.T) {
	f := deviceFilterFor(collector.Paths{Sysfs: "fixtures/kmsg/sys"}, testSettings(t).devices)
	names := [][]byte{[]byte("sda"), []byte("sda1"), []byte("loop0p1"), []byte("nvme0n1p2"), []byte("dm-3")}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				n := names[i%len(names)]
				if i%7 == 0 {
					n = fmt.Appendf(nil, "loop%d", g*10000+i) // churn: new names keep coming
				}
				f.ignored(n)
				f.excludesIOError(n, i%2 == 0)
			}
		})
	}
	wg.Wait()
	if !f.ignored([]byte("sda1")) || f.ignored([]byte("sda")) || !f.excludesIOError([]byte("loop0p1"), true) || f.excludesIOError([]byte("nvme0n1p2"), true) {
		t.Error("wrong decisions after concurrent use")
	}
	if n := testing.AllocsPerRun(100, func() { f.ignored(names[1]); f.excludesIOError(names[2], true) }); n != 0 {
		t.Errorf("a cached decision allocates %v times, want 0", n)
	}
	if g := deviceFilterFor(collector.Paths{Sysfs: "fixtures/kmsg/sys"}, testSettings(t).devices); g != f {
		t.Error("the same paths and flags got another filter")
	}
	if g := deviceFilterFor(collector.Paths{Sysfs: "fixtures/kmsg/sys"}, testSettings(t, "--diskstats.partitions").devices); g == f {
		t.Error("other flags got the same filter")
	}
}
