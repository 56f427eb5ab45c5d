package rocketmq

import (
	"strings"
	"testing"

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
	got, err := scrape(t, c, families...)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, got, `
stall_rocketmq_put_latency_window_percentile_seconds{broker="b",broker_id="0",cluster="c",percentile="99.9"} 4.8
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="pageCacheLockTimeMills"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="pullThreadPoolQueueHeadWaitTimeMills"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="putLatency99"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="putMessageEntireTimeMax"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="putMessageTimesTotal"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="sendThreadPoolQueueHeadWaitTimeMills"} 1
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="sendThreadPoolQueueSize"} 1
stall_rocketmq_up{broker="b",broker_id="0",cluster="c"} 1
`)
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
