package host

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFlags: the defaults and the bounds of every host flag are accepted;
// a value outside them refuses the start with an error naming the flag.
func TestFlags(t *testing.T) {
	s := testSettings(t)
	if s.samplerInterval != time.Second || s.supervisionInterval != 30*time.Second || s.sysctlRefresh != time.Minute ||
		s.pageSize != uint64(os.Getpagesize()) || s.kmsgFromBoot || s.devices.partitions || s.devices.include != nil ||
		s.devices.exclude.String() != `^(?:(ram|loop|zram|fd|sr|nbd)\d+)$` ||
		s.netDevices.include != nil || s.netDevices.exclude.String() != `^(?:lo)$` || s.netDevices.max != 64 {
		t.Errorf("defaults: %+v", s)
	}
	for _, args := range [][]string{
		{"--sampler.interval=100ms"}, {"--sampler.interval=10s"},
		{"--supervision.scan-interval=10s"},
		{"--sysctl.refresh-interval=0s"},
		{"--vmstat.page-size=4096"}, {"--vmstat.page-size=65536"}, {"--vmstat.page-size=1048576"},
		{"--diskstats.device-include=sd[a-z]+", "--diskstats.device-exclude=("}, // exclude is ignored with include
		{"--egress.device-include=eth.*", "--egress.device-exclude=("},
		{"--egress.max-devices=1"}, {"--egress.max-devices=4096"},
	} {
		if _, err := parseSettings(args...); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
	if s := testSettings(t, "--vmstat.page-size=65536"); s.pageSize != 65536 {
		t.Errorf("--vmstat.page-size=65536: page size %d", s.pageSize)
	}
	for _, arg := range []string{
		"--sampler.interval=50ms", "--sampler.interval=11s",
		"--supervision.scan-interval=1s",
		"--sysctl.refresh-interval=-1m",
		"--vmstat.page-size=1000", "--vmstat.page-size=2048", "--vmstat.page-size=2097152",
		"--diskstats.device-include=(", "--diskstats.device-exclude=(",
		"--egress.device-include=(", "--egress.device-exclude=(",
		"--egress.max-devices=0", "--egress.max-devices=4097",
	} {
		_, err := parseSettings(arg)
		flag, _, _ := strings.Cut(arg, "=")
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err %v, want a refusal naming %s", arg, err, flag)
		}
	}
}
