package rocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// scrape runs one Update and returns the sample lines (no HELP/TYPE) of
// the named families, in text exposition format.
func scrape(t testing.TB, c collector.Collector, families ...string) (string, error) {
	t.Helper()
	e := collectortest.Expose(t, context.Background(), c)
	return e.Families(families...), e.Err
}

func expect(t *testing.T, got, want string) {
	t.Helper()
	want = strings.TrimLeft(want, "\n")
	if got != want {
		t.Errorf("metrics differ\n--- got\n%s--- want\n%s", got, want)
	}
}

func startBroker(t *testing.T, runtime map[string]string, config string) *rocketmqtest.Broker {
	t.Helper()
	b, err := rocketmqtest.NewBroker("127.0.0.1:0", runtime, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// defaultFlags gives the flag variables their defaults (kingpin sets
// them only when it parses a command line) until the test ends.
func defaultFlags(t *testing.T) {
	t.Helper()
	saved := []any{*timeoutFlag, *sampleFlag, *configIntervalFlag, *discoveryIntervalFlag, *maxFrameFlag, *unlistedRetentionFlag}
	*timeoutFlag, *sampleFlag, *configIntervalFlag, *discoveryIntervalFlag = 3*time.Second, time.Second, 5*time.Minute, 30*time.Second
	*maxFrameFlag, *unlistedRetentionFlag = defaultMaxFrame, time.Hour
	t.Cleanup(func() {
		*timeoutFlag, *sampleFlag = saved[0].(time.Duration), saved[1].(time.Duration)
		*configIntervalFlag, *discoveryIntervalFlag = saved[2].(time.Duration), saved[3].(time.Duration)
		*maxFrameFlag, *unlistedRetentionFlag = saved[4].(int), saved[5].(time.Duration)
	})
}

func TestNothingConfiguredIsNoData(t *testing.T) {
	c := newScraper(collectortest.Config("rocketmq", nil), options{})
	if _, err := scrape(t, c); !errors.Is(err, collector.ErrNoData) {
		t.Errorf("err = %v, want ErrNoData", err)
	}
}

// A 4.9.7 master (JSON replies) and its slave (binary replies) found through
// the name server; the name server writes bare integer brokerAddrs keys.
func TestNamesrvDiscovery49(t *testing.T) {
	master := startBroker(t, rocketmqtest.Runtime49(), rocketmqtest.Config49)
	slaveRT := rocketmqtest.Runtime49()
	slaveRT["pageCacheLockTimeMills"] = "1250"
	slave := startBroker(t, slaveRT, strings.Replace(rocketmqtest.Config49, "brokerRole=ASYNC_MASTER", "brokerRole=SLAVE", 1))
	slave.SetBinary(true)
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", []remoting.BrokerAddr{
		{Cluster: "DefaultCluster", Name: "broker-a", ID: 0, Addr: master.Addr()},
		{Cluster: "DefaultCluster", Name: "broker-a", ID: 1, Addr: slave.Addr()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ns.SetBinary(true)

	cfg := collectortest.Config("rocketmq", nil)
	c := newScraper(cfg, options{Namesrv: []string{ns.Addr(), "127.0.0.1:1"}, Timeout: time.Second})
	got, err := scrape(t, c,
		"stall_rocketmq_up", "stall_rocketmq_namesrv_up", "stall_rocketmq_commitlog_lock_held_seconds",
		"stall_rocketmq_flush_pending_bytes", "stall_rocketmq_transient_store_pool_enabled",
		"stall_rocketmq_transient_store_buffers_available", "stall_rocketmq_commitlog_disk_ratio",
		"stall_rocketmq_put_latency_seconds", "stall_rocketmq_put_messages_total", "stall_rocketmq_put_failures_total",
		"stall_rocketmq_send_queue_head_wait_seconds", "stall_rocketmq_put_latency_window_percentile_seconds",
		"stall_rocketmq_broker_config_info", "stall_rocketmq_broker_config_send_queue_wait_timeout_seconds",
		"stall_rocketmq_runtime_info_errors_total")
	// The refused name server makes the collector fail (success 0, as for
	// a redis target that is down); every broker is still reported.
	if err == nil || !strings.Contains(err.Error(), "name server 127.0.0.1:1:") || strings.Contains(err.Error(), "broker ") {
		t.Errorf("err = %v, want only the refused name server", err)
	}
	expect(t, got, `
stall_rocketmq_broker_config_info{broker="broker-a",broker_fast_failure_enable="true",broker_id="0",broker_role="ASYNC_MASTER",cluster="DefaultCluster",fast_fail_if_no_buffer_in_store_pool="false",flush_disk_type="ASYNC_FLUSH",transfer_msg_by_heap="false",transient_store_pool_enable="false",use_reentrant_lock_when_put_message="true",warm_maped_file_enable="true"} 1
stall_rocketmq_broker_config_info{broker="broker-a",broker_fast_failure_enable="true",broker_id="1",broker_role="SLAVE",cluster="DefaultCluster",fast_fail_if_no_buffer_in_store_pool="false",flush_disk_type="ASYNC_FLUSH",transfer_msg_by_heap="false",transient_store_pool_enable="false",use_reentrant_lock_when_put_message="true",warm_maped_file_enable="true"} 1
stall_rocketmq_broker_config_send_queue_wait_timeout_seconds{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 0.2
stall_rocketmq_broker_config_send_queue_wait_timeout_seconds{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 0.2
stall_rocketmq_commitlog_disk_ratio{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 0.4521
stall_rocketmq_commitlog_disk_ratio{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 0.4521
stall_rocketmq_commitlog_lock_held_seconds{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 0
stall_rocketmq_commitlog_lock_held_seconds{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 1.25
stall_rocketmq_flush_pending_bytes{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 1.28974848e+07
stall_rocketmq_flush_pending_bytes{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 1.28974848e+07
stall_rocketmq_namesrv_up{namesrv="127.0.0.1:1"} 0
stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 1
stall_rocketmq_put_failures_total{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 3
stall_rocketmq_put_failures_total{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 3
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="0"} 10
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="0.01"} 45
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="0.05"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="0.1"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="0.2"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="0.5"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="1"} 50
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="2"} 51
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="3"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="4"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="5"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="10"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",cluster="DefaultCluster",le="+Inf"} 54
stall_rocketmq_put_latency_seconds_sum{broker="broker-a",broker_id="0",cluster="DefaultCluster"} NaN
stall_rocketmq_put_latency_seconds_count{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="0"} 10
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="0.01"} 45
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="0.05"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="0.1"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="0.2"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="0.5"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="1"} 50
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="2"} 51
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="3"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="4"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="5"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="10"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",cluster="DefaultCluster",le="+Inf"} 54
stall_rocketmq_put_latency_seconds_sum{broker="broker-a",broker_id="1",cluster="DefaultCluster"} NaN
stall_rocketmq_put_latency_seconds_count{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 54
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="0",cluster="DefaultCluster",percentile="99"} 2.543
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="0",cluster="DefaultCluster",percentile="99.9"} 4.8
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="1",cluster="DefaultCluster",percentile="99"} 2.543
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="1",cluster="DefaultCluster",percentile="99.9"} 4.8
stall_rocketmq_put_messages_total{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 1.234567e+06
stall_rocketmq_put_messages_total{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 1.234567e+06
stall_rocketmq_send_queue_head_wait_seconds{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 0.035
stall_rocketmq_send_queue_head_wait_seconds{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 0.035
stall_rocketmq_transient_store_pool_enabled{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 0
stall_rocketmq_transient_store_pool_enabled{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 0
stall_rocketmq_up{broker="broker-a",broker_id="0",cluster="DefaultCluster"} 1
stall_rocketmq_up{broker="broker-a",broker_id="1",cluster="DefaultCluster"} 1
`)
	if n := cfg.Problems.Count(); n != 0 {
		t.Errorf("%d problems on a clean 4.9.7 reply", n)
	}
	// A second scrape reuses the connections and the cached config.
	if _, err := scrape(t, c, "stall_rocketmq_up"); err == nil || strings.Contains(err.Error(), "broker ") {
		t.Errorf("second scrape: err = %v, want only the refused name server", err)
	}
	for name, b := range map[string]*rocketmqtest.Broker{"master": master, "slave": slave} {
		if got := b.RequestCount(remoting.GetBrokerConfig); got != 1 {
			t.Errorf("%s: %d GET_BROKER_CONFIG over two scrapes, want 1 (refreshed every --rocketmq.config-interval)", name, got)
		}
		if got := b.RequestCount(remoting.GetBrokerRuntimeInfo); got != 2 {
			t.Errorf("%s: %d GET_BROKER_RUNTIME_INFO over two scrapes, want 2", name, got)
		}
		if got := b.Accepted(); got != 1 {
			t.Errorf("%s: %d connections, want 1 reused", name, got)
		}
	}
	if got := ns.RequestCount(remoting.GetBrokerClusterInfo); got != 1 {
		t.Errorf("name server asked %d times within the discovery interval, want 1", got)
	}
}

const config5 = `brokerClusterName=c5
brokerName=broker-5
brokerId=0
flushDiskType=SYNC_FLUSH
brokerRole=SYNC_MASTER
transientStorePoolEnable=true
warmMapedFileEnable=false
transferMsgByHeap=true
useReentrantLockWhenPutMessage=true
brokerFastFailureEnable=true
fastFailIfNoBufferInStorePool=false
osPageCacheBusyTimeOutMills=1000
waitTimeMillsInSendQueue=200
`

// A 5.3.3 broker scraped directly: labels from its own config, the 5.x
// spelling getTransferredTps, no brokerVersion, a comma decimal point, the
// transient pool enabled.
func TestDirectBroker5(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime5(), config5)
	b.SetBinary(true)
	cfg := collectortest.Config("rocketmq", nil)
	c := newScraper(cfg, options{Brokers: []string{b.Addr()}})
	got, err := scrape(t, c, "stall_rocketmq_flush_pending_bytes", "stall_rocketmq_commit_pending_bytes",
		"stall_rocketmq_transient_store_pool_enabled", "stall_rocketmq_transient_store_buffers_available",
		"stall_rocketmq_messages_per_second", "stall_rocketmq_broker_config_page_cache_busy_timeout_seconds",
		"stall_rocketmq_runtime_info_errors_total")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, got, `
stall_rocketmq_broker_config_page_cache_busy_timeout_seconds{broker="broker-5",broker_id="0",cluster="c5"} 1
stall_rocketmq_commit_pending_bytes{broker="broker-5",broker_id="0",cluster="c5"} 262144
stall_rocketmq_flush_pending_bytes{broker="broker-5",broker_id="0",cluster="c5"} 1.610612736e+09
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_found",window="10s"} 1500
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_found",window="600s"} 1450.9
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_found",window="60s"} 1400.2
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_miss",window="10s"} 10
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_miss",window="600s"} 11.1
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_miss",window="60s"} 12.5
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_total",window="10s"} 1510
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_total",window="600s"} 1462
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_total",window="60s"} 1412.7
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_transferred",window="10s"} 1500
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_transferred",window="600s"} 1450.9
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="get_transferred",window="60s"} 1400.2
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="put",window="10s"} 812.3
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="put",window="600s"} 801
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",cluster="c5",op="put",window="60s"} 790.1
stall_rocketmq_transient_store_buffers_available{broker="broker-5",broker_id="0",cluster="c5"} 3
stall_rocketmq_transient_store_pool_enabled{broker="broker-5",broker_id="0",cluster="c5"} 1
`)
	if n := cfg.Problems.Count(); n != 0 {
		t.Errorf("%d problems on a clean 5.x reply (brokerVersion is gone in 5.3.3+ and must not count)", n)
	}
}

// One bad or missing key costs that metric and one error count, never the
// broker; "null" distributions and early empty rate tokens are no data.
func TestBadKeysCostOneMetricEach(t *testing.T) {
	rt := rocketmqtest.Runtime49()
	rt["pageCacheLockTimeMills"] = "abc"
	delete(rt, "sendThreadPoolQueueSize")
	rt["putMessageDistributeTime"] = "null"
	rt["putTps"] = "12.5  "
	rt["commitLogDiskRatio"] = "-1"
	rt["remainHowManyDataToFlush"] = "1.5 XB"
	b := startBroker(t, rt, "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
	cfg := collectortest.Config("rocketmq", nil)
	c := newScraper(cfg, options{Brokers: []string{b.Addr()}})
	families := []string{"stall_rocketmq_up", "stall_rocketmq_commitlog_lock_held_seconds", "stall_rocketmq_send_queue_size",
		"stall_rocketmq_send_queue_capacity", "stall_rocketmq_put_latency_seconds", "stall_rocketmq_commitlog_disk_ratio",
		"stall_rocketmq_flush_pending_bytes", "stall_rocketmq_runtime_info_errors_total"}
	got, err := scrape(t, c, append(families, "stall_rocketmq_messages_per_second")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `stall_rocketmq_messages_per_second{broker="b",broker_id="0",cluster="c",op="put",window="10s"} 12.5`) ||
		strings.Contains(got, `op="put",window="60s"`) {
		t.Errorf("early empty putTps tokens: %s", got)
	}
	got, _ = scrape(t, c, families...)
	expect(t, got, `
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="pageCacheLockTimeMills"} 2
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="remainHowManyDataToFlush"} 2
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",cluster="c",key="sendThreadPoolQueueSize"} 2
stall_rocketmq_send_queue_capacity{broker="b",broker_id="0",cluster="c"} 10000
stall_rocketmq_up{broker="b",broker_id="0",cluster="c"} 1
`)
	if n := cfg.Problems.Count(); n != 6 {
		t.Errorf("problems = %d, want 6 (3 keys × 2 scrapes)", n)
	}
}

// Faults of the test broker: each costs one scrape of that broker (up 0),
// the next one recovers; malformed replies are counted as bad input.
func TestBrokerFaults(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
	b.Delay(5 * time.Second)
	cfg := collectortest.Config("rocketmq", nil)
	c := newScraper(cfg, options{Brokers: []string{b.Addr()}, Timeout: 300 * time.Millisecond})
	up := func() string {
		t.Helper()
		got, err := scrape(t, c, "stall_rocketmq_up")
		v := strings.TrimSpace(got[strings.LastIndex(got, " "):])
		if (err == nil) != (v == "1") {
			t.Errorf("up %s but err = %v", v, err)
		}
		return v
	}
	if v := up(); v != "1" {
		t.Fatalf("healthy broker: up %s", v)
	}
	for _, tc := range []struct {
		fault    rocketmqtest.Fault
		problems uint64
	}{{rocketmqtest.Slow, 0}, {rocketmqtest.Reset, 0}, {rocketmqtest.Garbage, 1}, {rocketmqtest.Huge, 1}, {rocketmqtest.Busy, 0},
		{rocketmqtest.Truncated, 1}, {rocketmqtest.Noise, 1}} {
		before := cfg.Problems.Count()
		b.Inject(tc.fault)
		if tc.fault == rocketmqtest.Reset {
			// A reset of the reused connection is retried once on a fresh
			// one (a restarted broker costs nothing); reset that one too.
			b.Inject(tc.fault)
		}
		if v := up(); v != "0" {
			t.Errorf("fault %d: up %s, want 0", tc.fault, v)
		}
		if d := cfg.Problems.Count() - before; d != tc.problems {
			t.Errorf("fault %d: %d problems counted, want %d", tc.fault, d, tc.problems)
		}
		if v := up(); v != "1" {
			t.Errorf("after fault %d: up %s, want 1", tc.fault, v)
		}
	}
}

// The background sampler keeps a histogram of pageCacheLockTimeMills.
func TestLockSampler(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
	c := newScraper(collectortest.Config("rocketmq", nil), options{Brokers: []string{b.Addr()}, SampleInterval: time.Second})
	for _, ms := range []string{"0", "0", "3", "120", "700", "1200", "15000"} {
		b.Set("pageCacheLockTimeMills", ms)
		c.sampleOnce(context.Background())
	}
	got, err := scrape(t, c, "stall_rocketmq_commitlog_lock_held_sampled_seconds", "stall_rocketmq_lock_samples_failed_total")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, got, `
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0"} 2
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0.005"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0.01"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0.05"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0.1"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0.2"} 4
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="0.5"} 4
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="1"} 5
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="2"} 6
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="5"} 6
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="10"} 6
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",cluster="c",le="+Inf"} 7
stall_rocketmq_commitlog_lock_held_sampled_seconds_sum{broker="b",broker_id="0",cluster="c"} 17.023
stall_rocketmq_commitlog_lock_held_sampled_seconds_count{broker="b",broker_id="0",cluster="c"} 7
stall_rocketmq_lock_samples_failed_total{broker="b",broker_id="0",cluster="c"} 0
`)
	// A failing broker is counted and then backed off, not redialled every tick.
	clock := time.Unix(1_800_000_000, 0)
	c.now = func() time.Time { return clock }
	b.Inject(rocketmqtest.Reset, rocketmqtest.Reset) // the reused connection, then the one retry on a fresh one
	c.sampleOnce(context.Background())
	c.sampleOnce(context.Background()) // within the 2 s backoff: skipped
	if n := b.RequestCount(remoting.GetBrokerRuntimeInfo); n != 10 {
		t.Errorf("%d runtime-info requests, want 10 (1 scrape + 7 samples + 1 failed, sent twice: reused connection, then a fresh one; the backed-off tick sends none)", n)
	}
	clock = clock.Add(3 * time.Second)
	c.sampleOnce(context.Background())
	got, _ = scrape(t, c, "stall_rocketmq_lock_samples_failed_total", "stall_rocketmq_commitlog_lock_held_sampled_seconds")
	if !strings.Contains(got, `stall_rocketmq_lock_samples_failed_total{broker="b",broker_id="0",cluster="c"} 1`) ||
		!strings.Contains(got, `_count{broker="b",broker_id="0",cluster="c"} 8`) {
		t.Errorf("after a failed and a recovered sample:\n%s", got)
	}
}

// A scrape that reaches the broker again ends the sampler's backoff: the
// next tick samples (issue 11 item 15; sampling used to resume only when
// the backoff of up to 30 s ran out, 8 s after up 1 in the report).
func TestScrapeEndsSamplerBackoff(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
	clock := time.Unix(1_800_000_000, 0)
	c := newScraper(collectortest.Config("rocketmq", nil), options{Brokers: []string{b.Addr()}, SampleInterval: time.Second})
	c.now = func() time.Time { return clock }
	c.sampleOnce(context.Background()) // dial
	// Five failed samples, each tick after the last backoff: 2, 4, 8, 16, 30 s.
	for range 5 {
		b.Inject(rocketmqtest.Garbage) // a bad reply is not retried
		c.sampleOnce(context.Background())
		clock = clock.Add(31 * time.Second)
	}
	clock = clock.Add(-31 * time.Second).Add(time.Second) // 1 s after the last failure: 29 s of backoff left
	if got, _ := scrape(t, c, "stall_rocketmq_up"); !strings.HasSuffix(got, "} 1\n") {
		t.Fatalf("scrape: %s", got)
	}
	before := b.RequestCount(remoting.GetBrokerRuntimeInfo)
	c.sampleOnce(context.Background())
	if n := b.RequestCount(remoting.GetBrokerRuntimeInfo) - before; n != 1 {
		t.Errorf("the tick after a scrape reached the broker sent %d samples, want 1 (backoff ended)", n)
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

func TestACLFile(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
	b.RequireACL(&remoting.Credentials{AccessKey: "exporter", SecretKey: "s3cret"})
	p := filepath.Join(t.TempDir(), "acl")
	os.WriteFile(p, []byte("accessKey=exporter\nsecretKey=s3cret\n"), 0o600)
	defaultFlags(t)
	old := *aclFileFlag
	defer func() { *aclFileFlag = old }()
	*aclFileFlag = p
	opts, err := optionsFromFlags()
	if err != nil {
		t.Fatal(err)
	}
	opts.Brokers = []string{b.Addr()}
	got, _ := scrape(t, newScraper(collectortest.Config("rocketmq", nil), opts), "stall_rocketmq_up")
	expect(t, got, `
stall_rocketmq_up{broker="b",broker_id="",cluster=""} 1
`)
	opts.Credentials = nil
	got, _ = scrape(t, newScraper(collectortest.Config("rocketmq", nil), opts), "stall_rocketmq_up")
	if !strings.HasSuffix(got, "} 0\n") {
		t.Errorf("unsigned requests to an ACL broker: %s", got)
	}
}

// FuzzRuntimeInfo: any string for any key costs at most that metric.
func FuzzRuntimeInfo(f *testing.F) {
	keys := make([]string, 0)
	for k := range rocketmqtest.Runtime5() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	f.Add(uint8(0), "12,3 MiB")
	f.Add(uint8(3), "null")
	f.Add(uint8(7), "[<=0ms]:1 [0~10ms]:2")
	f.Add(uint8(9), " 1e309 ")
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		kv := rocketmqtest.Runtime5()
		kv[keys[int(which)%len(keys)]] = value
		kv["putMessageDistributeTime"] = value
		kv["remainHowManyDataToFlush"] = value
		cfg := collectortest.Config("rocketmq", nil)
		b := &broker{addr: value, keyErrors: map[string]uint64{}, lockCounts: make([]uint64, len(lockBounds)+1)}
		cfgText := "flushDiskType=" + value + "\nosPageCacheBusyTimeOutMills=" + value + "\nbrokerName=" + value
		b.config, _ = remoting.ParseConfig([]byte(cfgText))
		b.labels = labelsFromConfig(b.config, value)
		ch := make(chan prometheus.Metric, 1024)
		b.emitRuntime(ch, kv, time.Unix(0, 0), cfg.Problems)
		b.sendState(ch)
		close(ch)
		for m := range ch {
			_ = m.Desc()
		}
	})
}

// Run samples in the background until its context ends.
func TestRunStopsOnCancel(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
	dir := t.TempDir()
	cfg := collectortest.Config("rocketmq", nil)
	cfg.Paths.Rootfs = dir
	c := newScraper(cfg, options{Brokers: []string{b.Addr()}, SampleInterval: 5 * time.Millisecond, LogDir: "/logs"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for b.RequestCount(remoting.GetBrokerRuntimeInfo) < 6 {
		if time.Now().After(deadline) {
			t.Fatal("the sampler sent fewer than 6 requests in 10 s")
		}
		scrape(t, c, "stall_rocketmq_up") // scrapes run concurrently with the sampler (go test -race)
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	got, _ := scrape(t, c, "stall_rocketmq_commitlog_lock_held_sampled_seconds")
	if !strings.Contains(got, `stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="",cluster="",le="0"}`) {
		t.Errorf("no samples:\n%s", got)
	}
}

// BenchmarkRuntimeInfoDecode: one GET_BROKER_RUNTIME_INFO reply
// frame (4.9.7 key set, JSON header) decoded, its table parsed, and every
// metric of the broker produced.
func BenchmarkRuntimeInfoDecode(b *testing.B) {
	frame, err := remoting.Encode(&remoting.Command{Code: 0, Flag: remoting.FlagResponse, Opaque: 1, Language: "JAVA",
		Body: rocketmqtest.KVTableBody(rocketmqtest.Runtime49())})
	if err != nil {
		b.Fatal(err)
	}
	cfg := collectortest.Config("rocketmq", nil)
	br := &broker{addr: "127.0.0.1:10911", labels: [3]string{"DefaultCluster", "broker-a", "0"},
		keyErrors: map[string]uint64{}, lockCounts: make([]uint64, len(lockBounds)+1)}
	br.config, _ = remoting.ParseConfig([]byte(rocketmqtest.Config49))
	ch := make(chan prometheus.Metric, 256)
	now := time.Unix(1_800_000_000, 0)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	defer func() {
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}()
	for i := 0; i < b.N; i++ {
		cmd, err := remoting.ReadCommand(bytes.NewReader(frame), 0)
		if err != nil {
			b.Fatal(err)
		}
		kv, err := remoting.ParseKVTable(cmd.Body)
		if err != nil {
			b.Fatal(err)
		}
		br.emitRuntime(ch, kv, now, cfg.Problems)
		br.sendState(ch)
		for len(ch) > 0 {
			<-ch
		}
	}
}

// BenchmarkSample: one background lock sample of one broker over
// loopback TCP. The test broker runs in the same process, so cpu-ns/op (the
// process's user+system CPU per sample, from getrusage) counts both the
// exporter's and the fake broker's side: an upper bound of the exporter's
// cost. At --rocketmq.sample-interval=1s, the share of one core is
// cpu-ns/op / 1e9.
func BenchmarkSample(b *testing.B) {
	br, err := rocketmqtest.NewBroker("127.0.0.1:0", rocketmqtest.Runtime49(), "brokerName=b\n")
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	c := newScraper(collectortest.Config("rocketmq", nil), options{Brokers: []string{br.Addr()}, SampleInterval: time.Second})
	ctx := context.Background()
	c.sampleOnce(ctx) // dial outside the measurement
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.sampleOnce(ctx)
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e9*100, "%core@1s")
}

// BenchmarkStalledAnnouncers: one scrape of five brokers that each answer
// with a length word announcing a 16 MiB frame and then stall until the
// scrape's timeout (issue 11 item 3). heap-MiB is the Go heap in use while
// the five requests wait, over the heap before the scrape; rss-MiB the
// process's resident set (VmRSS) at the same moment, over the RSS before.
func BenchmarkStalledAnnouncers(b *testing.B) {
	const peers = 5
	var addrs []string
	var brokers []*rocketmqtest.Broker
	for range peers {
		br, err := rocketmqtest.NewBroker("127.0.0.1:0", rocketmqtest.Runtime49(), "brokerName=b\n")
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		br.Delay(time.Minute)
		brokers, addrs = append(brokers, br), append(addrs, br.Addr())
	}
	c := newScraper(collectortest.Config("rocketmq", nil), options{Brokers: addrs, Timeout: 300 * time.Millisecond})
	var heap, rss float64
	for i := 0; i < b.N; i++ {
		sent := 0
		for _, br := range brokers {
			br.Inject(rocketmqtest.Announce)
			sent += br.RequestCount(remoting.GetBrokerRuntimeInfo)
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		rss0 := vmRSS(b)
		done := make(chan struct{})
		go func() { scrape(b, c); close(done) }()
		for n := 0; n < sent+peers; {
			time.Sleep(5 * time.Millisecond)
			n = 0
			for _, br := range brokers {
				n += br.RequestCount(remoting.GetBrokerRuntimeInfo)
			}
		}
		time.Sleep(50 * time.Millisecond) // the announcements are read and the clients wait
		runtime.ReadMemStats(&m1)
		heap += float64(int64(m1.HeapInuse)-int64(m0.HeapInuse)) / (1 << 20)
		rss += float64(vmRSS(b)-rss0) / (1 << 20)
		<-done
	}
	b.ReportMetric(heap/float64(b.N), "heap-MiB")
	b.ReportMetric(rss/float64(b.N), "rss-MiB")
}

// vmRSS is this process's resident set in bytes, from /proc/self/status.
func vmRSS(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLogLine: one store.log [NOTIFYME] line and one
// watermark.log line parsed and counted.
func BenchmarkLogLine(b *testing.B) {
	l := newLogFollower("/nonexistent", collectortest.Config("rocketmq", nil).Problems, collectortest.Config("rocketmq", nil).Logger)
	lock := []byte(strings.TrimSuffix(lineLock, "\n"))
	water := []byte("2024-05-06 14:23:02 INFO WaterMark - [WATERMARK] Send Queue Size: 12 SlowTimeMills: 35")
	chatter := []byte(strings.TrimSuffix(lineChatter, "\n"))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.line("store.log", lock)
		l.line("watermark.log", water)
		l.line("store.log", chatter)
	}
}

// Discovery follows the topology; when every name server fails the last
// known brokers are still scraped.
func TestTopologyChangesAndNamesrvOutage(t *testing.T) {
	a := startBroker(t, rocketmqtest.Runtime49(), "")
	b2 := startBroker(t, rocketmqtest.Runtime5(), "")
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", []remoting.BrokerAddr{
		{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}, {Cluster: "c", Name: "b", ID: 0, Addr: b2.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	clock := time.Unix(1_800_000_000, 0)
	c := newScraper(collectortest.Config("rocketmq", nil), options{Namesrv: []string{ns.Addr()}, DiscoveryInterval: 30 * time.Second})
	c.now = func() time.Time { return clock }
	got, _ := scrape(t, c, "stall_rocketmq_up")
	expect(t, got, `
stall_rocketmq_up{broker="a",broker_id="0",cluster="c"} 1
stall_rocketmq_up{broker="b",broker_id="0",cluster="c"} 1
`)
	// Broker b leaves the topology.
	ns.SetBrokers([]remoting.BrokerAddr{{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}})
	clock = clock.Add(31 * time.Second)
	got, _ = scrape(t, c, "stall_rocketmq_up")
	expect(t, got, `
stall_rocketmq_up{broker="a",broker_id="0",cluster="c"} 1
`)
	// The name server goes away: broker a is still scraped.
	ns.Inject(rocketmqtest.Reset, rocketmqtest.Reset) // the reused connection, then the one retry
	clock = clock.Add(31 * time.Second)
	got, err = scrape(t, c, "stall_rocketmq_up", "stall_rocketmq_namesrv_up")
	if err == nil || !strings.Contains(err.Error(), "name server "+ns.Addr()) {
		t.Errorf("err = %v, want the name server's failure", err)
	}
	expect(t, got, `
stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 0
stall_rocketmq_up{broker="a",broker_id="0",cluster="c"} 1
`)
	if n := ns.RequestCount(remoting.GetBrokerClusterInfo); n != 4 {
		t.Errorf("%d cluster-info requests, want 4 (the failed discovery was sent twice: reused connection, then a fresh one)", n)
	}
}

// Bad replies from a name server — garbage, a length over the limit, noise
// starting with a 0x7fffffff length, half a frame and a close — are bad
// input: each is counted in stall_collector_parse_errors_total (issue 11
// item 13), and the last known brokers are still scraped.
func TestNamesrvBadRepliesCounted(t *testing.T) {
	a := startBroker(t, rocketmqtest.Runtime49(), "")
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", []remoting.BrokerAddr{{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	clock := time.Unix(1_800_000_000, 0)
	cfg := collectortest.Config("rocketmq", nil)
	c := newScraper(cfg, options{Namesrv: []string{ns.Addr()}, Timeout: time.Second, DiscoveryInterval: 30 * time.Second})
	c.now = func() time.Time { return clock }
	scrapeAndEndRound := func() string {
		t.Helper()
		got, _ := scrape(t, c, "stall_rocketmq_up", "stall_rocketmq_namesrv_up")
		c.mu.Lock()
		done := c.discovering
		c.mu.Unlock()
		if done != nil {
			<-done
		}
		return got
	}
	scrapeAndEndRound()
	for _, f := range []rocketmqtest.Fault{rocketmqtest.Garbage, rocketmqtest.Huge, rocketmqtest.Noise, rocketmqtest.Truncated} {
		before := cfg.Problems.Count()
		ns.Inject(f)
		clock = clock.Add(31 * time.Second)
		scrapeAndEndRound()
		got := scrapeAndEndRound()
		if d := cfg.Problems.Count() - before; d != 1 {
			t.Errorf("fault %d from the name server: %d problems counted, want 1", f, d)
		}
		if !strings.Contains(got, `stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 0`) ||
			!strings.Contains(got, `stall_rocketmq_up{broker="a",broker_id="0",cluster="c"} 1`) {
			t.Errorf("fault %d: %s", f, got)
		}
	}
}

// A master and a slave that the name server announces at one address are
// two brokers: each keeps its own series and labels, and the shared address
// is logged once (issue 11 item 12: they collapsed into one series labelled
// as the slave, silently).
func TestBrokersSharingAnAddress(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "")
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", []remoting.BrokerAddr{
		{Cluster: "c", Name: "broker-a", ID: 0, Addr: b.Addr()},
		{Cluster: "c", Name: "broker-a", ID: 1, Addr: b.Addr()},
		{Cluster: "c", Name: "broker-b", ID: 0, Addr: "127.0.0.1:2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h := logRecords{mu: &sync.Mutex{}, recs: new([]string)}
	cfg := collectortest.Config("rocketmq", nil)
	cfg.Logger = slog.New(h)
	clock := time.Unix(1_800_000_000, 0)
	c := newScraper(cfg, options{Namesrv: []string{ns.Addr()}, Timeout: time.Second, DiscoveryInterval: 30 * time.Second})
	c.now = func() time.Time { return clock }
	for range 2 {
		got, _ := scrape(t, c, "stall_rocketmq_up", "stall_rocketmq_broker_info")
		expect(t, got, `
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="broker-a",broker_id="0",cluster="c",version="V4_9_7"} 1
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="broker-a",broker_id="1",cluster="c",version="V4_9_7"} 1
stall_rocketmq_up{broker="broker-a",broker_id="0",cluster="c"} 1
stall_rocketmq_up{broker="broker-a",broker_id="1",cluster="c"} 1
stall_rocketmq_up{broker="broker-b",broker_id="0",cluster="c"} 0
`)
		clock = clock.Add(31 * time.Second) // the second scrape runs a new round: logged only once
	}
	var shared []string
	for _, r := range h.take() {
		if strings.Contains(r, "one address") {
			shared = append(shared, r)
		}
	}
	if len(shared) != 1 || !strings.Contains(shared[0], "address="+b.Addr()) ||
		!strings.Contains(shared[0], "c/broker-a/0") || !strings.Contains(shared[0], "c/broker-a/1") {
		t.Errorf("want one warning naming the shared address and both brokers, got %q", shared)
	}
	// The slave moves to an address of its own: same series, new address.
	b2 := startBroker(t, rocketmqtest.Runtime5(), "")
	ns.SetBrokers([]remoting.BrokerAddr{{Cluster: "c", Name: "broker-a", ID: 0, Addr: b.Addr()}, {Cluster: "c", Name: "broker-a", ID: 1, Addr: b2.Addr()}})
	got, _ := scrape(t, c, "stall_rocketmq_up", "stall_rocketmq_broker_info")
	for _, want := range []string{
		`stall_rocketmq_broker_info{address="` + b.Addr() + `",broker="broker-a",broker_id="0",cluster="c",version="V4_9_7"} 1`,
		`stall_rocketmq_broker_info{address="` + b2.Addr() + `",broker="broker-a",broker_id="1",cluster="c",version="V5_3_3"} 1`,
		`stall_rocketmq_up{broker="broker-a",broker_id="0",cluster="c"} 1`,
		`stall_rocketmq_up{broker="broker-a",broker_id="1",cluster="c"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("after the slave moved: missing %s in\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 4 {
		t.Errorf("after the slave moved: %d series, want 4:\n%s", n, got)
	}
}

func TestSplitAddrs(t *testing.T) {
	got := splitAddrs([]string{"10.0.0.9:9876;10.0.0.10:9876", "10.0.0.9:9876", " 10.0.0.11:9876 "})
	if strings.Join(got, "|") != "10.0.0.9:9876|10.0.0.10:9876|10.0.0.11:9876" {
		t.Errorf("got %q", got)
	}
}
