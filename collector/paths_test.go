package collector

import "testing"

func TestPathsRerooting(t *testing.T) {
	p := Paths{Procfs: "/host/proc", Sysfs: "/host/sys", Rootfs: "/host"}
	if got := p.Proc("pressure", "io"); got != "/host/proc/pressure/io" {
		t.Errorf("Proc = %s", got)
	}
	if got := p.Sys("class", "block"); got != "/host/sys/class/block" {
		t.Errorf("Sys = %s", got)
	}
	if got := p.Root("/dev/kmsg"); got != "/host/dev/kmsg" {
		t.Errorf("Root = %s", got)
	}
	if got := (Paths{Rootfs: "/"}).Root("/dev/kmsg"); got != "/dev/kmsg" {
		t.Errorf("Root with / = %s", got)
	}
}
