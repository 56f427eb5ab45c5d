package metricsdoc

import (
	"strings"
	"testing"
)

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
