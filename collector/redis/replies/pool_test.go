package replies

import (
	"strings"
	"testing"
)

// TestPoolOf: the names pods, StatefulSets, worker fleets and hosts give
// their Redis connections, and the pool each belongs to.
func TestPoolOf(t *testing.T) {
	for name, want := range map[string]string{
		// Kubernetes
		"web-7d9f8b6c5d-x2x9z":                      "web", // Deployment pod: template hash + random suffix
		"catalog-reader-5f7b9c8d6d-bqdkr":           "catalog-reader",
		"web-v2-7595856488-x2x9z":                   "web-v2",  // an all-digit hash; the "v2" stays
		"fluentd-x7k2p":                             "fluentd", // DaemonSet pod
		"backup-28391234-x7k2p":                     "backup",  // CronJob: job timestamp + pod suffix
		"app-3-0":                                   "app-3",   // StatefulSet "app-3", ordinal 0
		"kafka-12":                                  "kafka",   // StatefulSet ordinal
		"web-7d9f8b6c5d-x2x9z.ns.pod.cluster.local": "web",
		// Numbered workers and processes
		"consumer-1":        "consumer",
		"worker_12":         "worker",
		"orders.consumer-3": "orders.consumer",
		"app-3:6000":        "app",
		"12345@host-7":      "host",
		"web01":             "web",
		"node12":            "node",
		"app-v2":            "app-v2",
		"s3":                "s3",
		// UUIDs and other ids
		"billing-3f2a8c1e-9b7d-4c2e-8a1f-0e5d6c7b8a9f":    "billing",
		"billing:3F2A8C1E-9B7D-4C2E-8A1F-0E5D6C7B8A9F":    "billing",
		"consumer-1-3f2a8c1e-9b7d-4c2e-8a1f-0e5d6c7b8a9f": "consumer",
		"sidekiq_3f2a8c1e9b7d4c2e8a1f0e5d6c7b8a9f":        "sidekiq",
		"runner-a1b2c3d4e5f6":                             "runner",
		"3f2a8c1e-9b7d-4c2e-8a1f-0e5d6c7b8a9f":            "",
		"deadbeefcafe":                                    "deadbeefcafe", // hex letters only: a word
		// Host names
		"batch-07.dc1.example.com":  "batch",
		"ip-10-0-3-17.ec2.internal": "ip",
		"web01.prod.example.com":    "web",
		"cache.prod.example.com":    "cache.prod.example.com",
		"com.acme.OrderService":     "com.acme.OrderService",
		"10.1.2.3":                  "",
		"10.1.2.3:5000":             "",
		"2001:db8::1":               "",
		"10-0-3-17":                 "",
		// Names that are already pools
		"reader":         "reader",
		"stall_exporter": "stall_exporter",
		"a=b=c":          "a=b=c",
		"":               "",
		"x7k2p":          "x7k2p",
	} {
		if got := PoolOf(name); got != want {
			t.Errorf("PoolOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestGroupByPoolFallback: a client without a name is grouped by its
// lib-name (7.2+), one without either by its host.
func TestGroupByPoolFallback(t *testing.T) {
	reply := "id=1 addr=10.0.0.1:1 name=web-7d9f8b6c5d-x2x9z omem=100 oll=1 cmd=get lib-name=jedis\n" +
		"id=2 addr=10.0.0.2:1 name=web-7d9f8b6c5d-bqdkr omem=100 oll=1 cmd=get lib-name=jedis\n" +
		"id=3 addr=10.0.0.3:1 name= omem=50 oll=1 cmd=get lib-name=redis-py\n" +
		"id=4 addr=10.0.0.4:1 name= omem=10 oll=1 cmd=get lib-name=\n" +
		"id=5 addr=10.0.0.4:2 name=3f2a8c1e-9b7d-4c2e-8a1f-0e5d6c7b8a9f omem=10 oll=1 cmd=get\n"
	agg := Aggregator{GroupBy: GroupByPool, TopK: 10}
	st := aggregate(&agg, reply)
	want := []Group{{"web", 2, 200}, {"redis-py", 1, 50}, {"10.0.0.4", 2, 20}, {OtherGroup, 0, 0}}
	if len(st.Groups) != len(want) {
		t.Fatalf("groups %+v", st.Groups)
	}
	for i, g := range st.Groups {
		if g != want[i] {
			t.Errorf("group %d = %+v, want %+v", i, g, want[i])
		}
	}
}

func FuzzPoolOf(f *testing.F) {
	for _, s := range []string{"web-7d9f8b6c5d-x2x9z", "app-3-0", "ip-10-0-3-17.ec2.internal", "12345@h:1",
		"billing-3f2a8c1e-9b7d-4c2e-8a1f-0e5d6c7b8a9f", "[::1]", "-", "a.", "..", "@:", "-x7k2p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p := PoolOf(name)
		if !strings.Contains(name, p) {
			t.Fatalf("PoolOf(%q) = %q is not part of the name", name, p)
		}
		if p != "" && strings.IndexByte(separators, p[len(p)-1]) >= 0 {
			t.Fatalf("PoolOf(%q) = %q ends in a separator", name, p)
		}
	})
}
