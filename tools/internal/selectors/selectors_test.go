package selectors

import (
	"reflect"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (device) (rate(stall_disk_await_seconds_bucket{device=~"sd.*"}[5m]))`:        {"stall_disk_await_seconds_bucket"},
		`stall_vm_dirty_bytes / on() group_left stall_vm_dirty_threshold_bytes > 0.5`:        {"stall_vm_dirty_bytes", "stall_vm_dirty_threshold_bytes"},
		`{__name__="stall_redis_up"} == 0 or absent(up{job="x"})`:                            {"stall_redis_up", "up"},
		`level:stall_disk_await_seconds:p99_1m > 0.2 and stall_vm_dirty_bytes offset 5m > 0`: {"level:stall_disk_await_seconds:p99_1m", "stall_vm_dirty_bytes"},
		`vector(1)`: {},
	} {
		got, err := MetricNames(expr)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v, want %v", expr, got, err, want)
		}
	}
	for _, bad := range []string{`{job="x"}`, `{__name__=~"stall_.*"}`, `rate(stall_x[5m]`} {
		if _, err := MetricNames(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
