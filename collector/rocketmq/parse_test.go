package rocketmq

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// Values no broker can send — a negative duration or count, a duration
// longer than any broker has run, NaN, infinity — are bad input: counted by
// key in stall_rocketmq_runtime_info_errors_total and
// stall_collector_parse_errors_total, and the metric is absent, never a
// wrong value ("-5" was once exported as a lock held for
// -0.005 s, and fed the sampled histogram a negative sum in le="0";
// "99999999999999999999" ms became 1e17 s).
func TestImpossibleValuesAreBadInput(t *testing.T) {
	rt := rocketmqtest.Runtime49()
	rt["pageCacheLockTimeMills"] = "-5"
	rt["sendThreadPoolQueueHeadWaitTimeMills"] = "99999999999999999999"
	rt["pullThreadPoolQueueHeadWaitTimeMills"] = "NaN"
	rt["putMessageEntireTimeMax"] = "Infinity"
	rt["putLatency99"] = "-1.00"
	rt["putMessageTimesTotal"] = "-3"
	rt["sendThreadPoolQueueSize"] = "-1"
	b := startBroker(t, rt, "brokerName=b\nbrokerClusterName=c\nbrokerId=0\nwaitTimeMillsInSendQueue=-200\n")
	cfg := collectortest.Config("rocketmq", nil)
	c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+b.Addr(), "--rocketmq.sample-interval=1s"))
	c.sampleOnce(t.Context()) // the sampler reads the same -5
	c.sampleOnce(t.Context())
	families := []string{"stall_rocketmq_up", "stall_rocketmq_commitlog_lock_held_seconds",
		"stall_rocketmq_commitlog_lock_held_sampled_seconds", "stall_rocketmq_send_queue_head_wait_seconds",
		"stall_rocketmq_pull_queue_head_wait_seconds", "stall_rocketmq_put_latency_max_seconds",
		"stall_rocketmq_put_latency_window_percentile_seconds", "stall_rocketmq_put_messages_total",
		"stall_rocketmq_send_queue_size", "stall_rocketmq_broker_config_send_queue_wait_timeout_seconds",
		"stall_rocketmq_runtime_info_errors_total"}
	err := collectortest.Compare(t, c, `
stall_rocketmq_put_latency_window_percentile_seconds{broker="b",broker_id="0",percentile="99.9",rocketmq_cluster="c"} 4.8
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="pageCacheLockTimeMills",rocketmq_cluster="c"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="pullThreadPoolQueueHeadWaitTimeMills",rocketmq_cluster="c"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="putLatency99",rocketmq_cluster="c"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="putMessageEntireTimeMax",rocketmq_cluster="c"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="putMessageTimesTotal",rocketmq_cluster="c"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="sendThreadPoolQueueHeadWaitTimeMills",rocketmq_cluster="c"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="sendThreadPoolQueueSize",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="b",broker_id="0",rocketmq_cluster="c"} 1
`, families...)
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Problems.Count(); n != 7 {
		t.Errorf("problems = %d, want 7 (one per impossible key)", n)
	}
	// The error says what is wrong with the value.
	for key, want := range map[string]string{
		"-5": "negative", "99999999999999999999": "longer than", "NaN": "not a number", "-3": "negative",
	} {
		_, err := parseMillis(key)
		if key == "-3" {
			_, err = parseCount(key)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to say %q", key, err, want)
		}
	}
}

func TestDurationAndCountBounds(t *testing.T) {
	for in, want := range map[string]float64{"0": 0, "1250": 1.25, " 35 ": 0.035, "604800000": 604800} {
		if got, err := parseMillis(in); err != nil || got != want {
			t.Errorf("parseMillis(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-0.5", "-1", "604800001", "1e300", "NaN", "Infinity", "-Infinity", "+Inf", "", "null"} {
		if v, err := parseMillis(in); err == nil {
			t.Errorf("parseMillis(%q) = %v, want an error", in, v)
		}
	}
	for in, want := range map[string]float64{"0": 0, "10000": 10000, "1234567": 1234567} {
		if got, err := parseCount(in); err != nil || got != want {
			t.Errorf("parseCount(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "NaN", "+Inf"} {
		if v, err := parseCount(in); err == nil {
			t.Errorf("parseCount(%q) = %v, want an error", in, v)
		}
	}
}

func TestPutHistogramWindows(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	w1 := [13]uint64{1, 2}
	w2 := [13]uint64{0, 5, 0, 0, 0, 0, 1}
	var h putHistogram
	h.observe(w1, false, t0)
	h.observe(w1, false, t0.Add(30*time.Second)) // same window seen again
	h.observe(w2, false, t0.Add(61*time.Second)) // next window
	h.observe(w2, false, t0.Add(120*time.Second))
	h.observe(w2, false, t0.Add(150*time.Second)) // 89 s unchanged: could be drift, not counted
	if want := [13]uint64{1, 7, 0, 0, 0, 0, 1}; h.cum != want {
		t.Fatalf("completed windows: cum %v, want %v", h.cum, want)
	}
	h.observe(w2, false, t0.Add(152*time.Second)) // 91 s unchanged: an identical window followed
	h.observe(w2, false, t0.Add(200*time.Second))
	if want := [13]uint64{1, 12, 0, 0, 0, 0, 2}; h.cum != want {
		t.Fatalf("identical consecutive windows: cum %v, want %v", h.cum, want)
	}
	// An empty window repeated is nothing to count.
	var e putHistogram
	e.observe([13]uint64{}, false, t0)
	e.observe([13]uint64{}, false, t0.Add(10*time.Minute))
	if _, n := e.buckets(); n != 0 {
		t.Errorf("empty windows counted %d", n)
	}

	// 4.9.0 reports the window in progress: growth is added, a shrink starts a new window.
	var p putHistogram
	p.observe([13]uint64{1}, true, t0)
	p.observe([13]uint64{3, 1}, true, t0.Add(time.Second))
	p.observe([13]uint64{3, 4}, true, t0.Add(2*time.Second))
	p.observe([13]uint64{0, 1}, true, t0.Add(61*time.Second))
	if want := [13]uint64{3, 5}; p.cum != want {
		t.Errorf("windows in progress: cum %v, want %v", p.cum, want)
	}
	buckets, count := p.buckets()
	if count != 8 || buckets[0] != 3 || buckets[0.01] != 8 || buckets[10] != 8 {
		t.Errorf("buckets %v count %d", buckets, count)
	}
	if !reportsWindowInProgress("V4_9_0") || reportsWindowInProgress("V4_9_1") ||
		!reportsWindowInProgress("V4_8_0") || reportsWindowInProgress("V5_0_0") || reportsWindowInProgress("") {
		t.Error("reportsWindowInProgress version cut wrong")
	}
}

func TestValueParsers(t *testing.T) {
	for in, want := range map[string]float64{
		"0 B": 0, "512 B": 512, "12.3 MiB": 12.3 * (1 << 20), "1,5 GiB": 1.5 * (1 << 30), "2.0 KiB": 2048, " 1.0 TiB ": 1 << 40,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "12", "1.5 XB", "-1 B", "NaN B", "1,2,3 MiB", "1.5 GB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): want error", in)
		}
	}
	d, err := parseDistribution(rocketmqtest.Distribution([13]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}))
	if err != nil || d != [13]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13} {
		t.Errorf("distribution %v %v", d, err)
	}
	if _, err := parseDistribution("null"); !errors.Is(err, errNull) {
		t.Errorf("null: %v", err)
	}
	if _, err := parseDistribution("[<=0ms]:1 [0~10ms]:2"); err == nil {
		t.Error("2 buckets: want error")
	}
	tps, err := parseTps("1.5  ")
	if err != nil || tps[0] != 1.5 || !math.IsNaN(tps[1]) || !math.IsNaN(tps[2]) {
		t.Errorf("tps %v %v", tps, err)
	}
}
