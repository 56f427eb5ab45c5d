package metricsdoc

import (
	"reflect"
	"strings"
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

func TestReadAndLookup(t *testing.T) {
	doc, err := Read("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := Lookup(doc, "stall_disk_await_seconds_bucket"); !ok || f.Name != "stall_disk_await_seconds" || f.Labels[0] != "device" {
		t.Errorf("histogram bucket: %+v %v", f, ok)
	}
	if _, ok := Lookup(doc, "stall_vm_dirty_bytes_count"); ok {
		t.Error("_count of a gauge resolved")
	}
	if f, ok := Lookup(doc, "stall_vm_dirty_bytes"); !ok || f.Type != "gauge" {
		t.Errorf("gauge: %+v %v", f, ok)
	}
}

func TestOthers(t *testing.T) {
	others, err := Others("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := others["up"]; !ok || f.Type != "gauge" {
		t.Errorf("up: %+v %v", f, ok)
	}
	for name := range others {
		if strings.HasPrefix(name, "stall_") {
			t.Errorf("Others returned the exporter's own %s", name)
		}
	}
	own, err := Read("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := own["up"]; ok {
		t.Error("Read returned up, which the exporter does not serve")
	}
}
