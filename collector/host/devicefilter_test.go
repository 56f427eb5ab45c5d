package host

import (
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
)

func TestDeviceFilter(t *testing.T) {
	sys := collector.Paths{Sysfs: "fixtures/linux-6.8/sys"}
	f, err := newDeviceFilter(sys, "", `(ram|loop|zram|fd|sr|nbd)\d+`, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, ignored := range map[string]bool{
		"vda": false, "vdb": false, "dm-0": false, // whole disks (sysfs has no partition file)
		"vda1":  true,                // sysfs says partition
		"zram0": true, "loop0": true, // excluded by name
	} {
		if got := f.Ignored(name); got != ignored {
			t.Errorf("Ignored(%s) = %v, want %v", name, got, ignored)
		}
	}
	// Without sysfs, partitions are recognised by name.
	nosys, _ := newDeviceFilter(collector.Paths{Sysfs: t.TempDir()}, "", "", false)
	for name, ignored := range map[string]bool{"sda": false, "sda1": true, "nvme0n1": false, "nvme0n1p2": true, "mmcblk0p1": true, "md0": false} {
		if got := nosys.Ignored(name); got != ignored {
			t.Errorf("no sysfs: Ignored(%s) = %v, want %v", name, got, ignored)
		}
	}
	inc, _ := newDeviceFilter(sys, "vda1|loop0", `loop\d+`, false)
	if inc.Ignored("vda1") || inc.Ignored("loop0") || !inc.Ignored("vda") {
		t.Error("--diskstats.device-include must select exactly the matching devices")
	}
	if _, err := newDeviceFilter(sys, "(", "", false); err == nil {
		t.Error("a bad include regexp must be an error")
	}
}
