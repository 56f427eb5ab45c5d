package host

import (
	"slices"
	"testing"
)

// TestNetDeviceFilter: the name filter, then the bound by lowest index,
// whatever order the kernel dumps the interfaces in (hash order before
// 6.6).
func TestNetDeviceFilter(t *testing.T) {
	links := func() []egressLink {
		return []egressLink{{index: 9, name: "veth9"}, {index: 1, name: "lo"}, {index: 2, name: "eth0"},
			{index: 7, name: "veth7"}, {index: 3, name: "eth1"}, {index: 8, name: "veth8"}}
	}
	exported := func(ls []egressLink) []string {
		var out []string
		for _, l := range ls {
			if l.exported {
				out = append(out, l.name)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		args []string
		want []string
		left int
	}{
		{nil, []string{"eth0", "eth1", "veth7", "veth8", "veth9"}, 0},
		{[]string{"--egress.max-devices=3"}, []string{"eth0", "eth1", "veth7"}, 2},
		{[]string{"--egress.max-devices=1"}, []string{"eth0"}, 4},
		{[]string{"--egress.device-exclude=lo|veth.*"}, []string{"eth0", "eth1"}, 0},
		{[]string{"--egress.device-include=lo|eth1"}, []string{"eth1", "lo"}, 0},
		{[]string{"--egress.device-include=veth.*", "--egress.max-devices=2"}, []string{"veth7", "veth8"}, 1},
	} {
		ls := links()
		f := netDeviceFilterFor(testSettings(t, tc.args...).netDevices)
		left := f.choose(ls)
		if got := exported(ls); !slices.Equal(got, tc.want) || left != tc.left {
			t.Errorf("%v: exported %v, %d left out; want %v, %d", tc.args, got, left, tc.want, tc.left)
		}
	}
}
