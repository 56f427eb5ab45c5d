package rocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

func TestNothingConfiguredIsNoData(t *testing.T) {
	c := newScraper(collectortest.Config("rocketmq", nil), testOptions(t))
	if err := collectortest.Expose(t, context.Background(), c).Err; !errors.Is(err, collector.ErrNoData) {
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
	c := newScraper(cfg, testOptions(t, "--rocketmq.namesrv="+ns.Addr(), "--rocketmq.namesrv=127.0.0.1:1", "--rocketmq.timeout=1s"))
	err = collectortest.Compare(t, c, `
stall_rocketmq_broker_config_info{broker="broker-a",broker_fast_failure_enable="true",broker_id="0",broker_role="ASYNC_MASTER",fast_fail_if_no_buffer_in_store_pool="false",flush_disk_type="ASYNC_FLUSH",rocketmq_cluster="DefaultCluster",transfer_msg_by_heap="false",transient_store_pool_enable="false",use_reentrant_lock_when_put_message="true",warm_maped_file_enable="true"} 1
stall_rocketmq_broker_config_info{broker="broker-a",broker_fast_failure_enable="true",broker_id="1",broker_role="SLAVE",fast_fail_if_no_buffer_in_store_pool="false",flush_disk_type="ASYNC_FLUSH",rocketmq_cluster="DefaultCluster",transfer_msg_by_heap="false",transient_store_pool_enable="false",use_reentrant_lock_when_put_message="true",warm_maped_file_enable="true"} 1
stall_rocketmq_broker_config_send_queue_wait_timeout_seconds{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 0.2
stall_rocketmq_broker_config_send_queue_wait_timeout_seconds{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 0.2
stall_rocketmq_commitlog_disk_ratio{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 0.4521
stall_rocketmq_commitlog_disk_ratio{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 0.4521
stall_rocketmq_commitlog_lock_held_seconds{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 0
stall_rocketmq_commitlog_lock_held_seconds{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 1.25
stall_rocketmq_flush_pending_bytes{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 1.28974848e+07
stall_rocketmq_flush_pending_bytes{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 1.28974848e+07
stall_rocketmq_namesrv_up{namesrv="127.0.0.1:1"} 0
stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 1
stall_rocketmq_put_failures_total{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 3
stall_rocketmq_put_failures_total{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 3
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="0"} 10
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="0.01"} 45
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="0.05"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="0.1"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="0.2"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="0.5"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="1"} 50
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="2"} 51
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="3"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="4"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="5"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="10"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster",le="+Inf"} 54
stall_rocketmq_put_latency_seconds_sum{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} NaN
stall_rocketmq_put_latency_seconds_count{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="0"} 10
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="0.01"} 45
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="0.05"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="0.1"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="0.2"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="0.5"} 49
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="1"} 50
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="2"} 51
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="3"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="4"} 52
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="5"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="10"} 54
stall_rocketmq_put_latency_seconds_bucket{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster",le="+Inf"} 54
stall_rocketmq_put_latency_seconds_sum{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} NaN
stall_rocketmq_put_latency_seconds_count{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 54
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="0",percentile="99",rocketmq_cluster="DefaultCluster"} 2.543
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="0",percentile="99.9",rocketmq_cluster="DefaultCluster"} 4.8
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="1",percentile="99",rocketmq_cluster="DefaultCluster"} 2.543
stall_rocketmq_put_latency_window_percentile_seconds{broker="broker-a",broker_id="1",percentile="99.9",rocketmq_cluster="DefaultCluster"} 4.8
stall_rocketmq_put_messages_total{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 1.234567e+06
stall_rocketmq_put_messages_total{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 1.234567e+06
stall_rocketmq_send_queue_head_wait_seconds{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 0.035
stall_rocketmq_send_queue_head_wait_seconds{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 0.035
stall_rocketmq_transient_store_pool_enabled{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 0
stall_rocketmq_transient_store_pool_enabled{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 0
stall_rocketmq_up{broker="broker-a",broker_id="0",rocketmq_cluster="DefaultCluster"} 1
stall_rocketmq_up{broker="broker-a",broker_id="1",rocketmq_cluster="DefaultCluster"} 1
`, "stall_rocketmq_up", "stall_rocketmq_namesrv_up", "stall_rocketmq_commitlog_lock_held_seconds",
		"stall_rocketmq_flush_pending_bytes", "stall_rocketmq_transient_store_pool_enabled",
		"stall_rocketmq_transient_store_buffers_available", "stall_rocketmq_commitlog_disk_ratio",
		"stall_rocketmq_put_latency_seconds", "stall_rocketmq_put_messages_total",
		"stall_rocketmq_put_failures_total", "stall_rocketmq_send_queue_head_wait_seconds",
		"stall_rocketmq_put_latency_window_percentile_seconds", "stall_rocketmq_broker_config_info",
		"stall_rocketmq_broker_config_send_queue_wait_timeout_seconds", "stall_rocketmq_runtime_info_errors_total")
	// The refused name server makes the collector fail (success 0, as for
	// a redis target that is down); every broker is still reported.
	if err == nil || !strings.Contains(err.Error(), "name server 127.0.0.1:1:") || strings.Contains(err.Error(), "broker ") {
		t.Errorf("err = %v, want only the refused name server", err)
	}
	if n := cfg.Problems.Count(); n != 0 {
		t.Errorf("%d problems on a clean 4.9.7 reply", n)
	}
	// A second scrape reuses the connections and the cached config.
	if err := collectortest.Expose(t, context.Background(), c).Err; err == nil || strings.Contains(err.Error(), "broker ") {
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
	c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+b.Addr()))
	err := collectortest.Compare(t, c, `
stall_rocketmq_broker_config_page_cache_busy_timeout_seconds{broker="broker-5",broker_id="0",rocketmq_cluster="c5"} 1
stall_rocketmq_commit_pending_bytes{broker="broker-5",broker_id="0",rocketmq_cluster="c5"} 262144
stall_rocketmq_flush_pending_bytes{broker="broker-5",broker_id="0",rocketmq_cluster="c5"} 1.610612736e+09
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_found",rocketmq_cluster="c5",window="10s"} 1500
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_found",rocketmq_cluster="c5",window="600s"} 1450.9
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_found",rocketmq_cluster="c5",window="60s"} 1400.2
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_miss",rocketmq_cluster="c5",window="10s"} 10
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_miss",rocketmq_cluster="c5",window="600s"} 11.1
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_miss",rocketmq_cluster="c5",window="60s"} 12.5
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_total",rocketmq_cluster="c5",window="10s"} 1510
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_total",rocketmq_cluster="c5",window="600s"} 1462
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_total",rocketmq_cluster="c5",window="60s"} 1412.7
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_transferred",rocketmq_cluster="c5",window="10s"} 1500
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_transferred",rocketmq_cluster="c5",window="600s"} 1450.9
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="get_transferred",rocketmq_cluster="c5",window="60s"} 1400.2
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="put",rocketmq_cluster="c5",window="10s"} 812.3
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="put",rocketmq_cluster="c5",window="600s"} 801
stall_rocketmq_messages_per_second{broker="broker-5",broker_id="0",op="put",rocketmq_cluster="c5",window="60s"} 790.1
stall_rocketmq_transient_store_buffers_available{broker="broker-5",broker_id="0",rocketmq_cluster="c5"} 3
stall_rocketmq_transient_store_pool_enabled{broker="broker-5",broker_id="0",rocketmq_cluster="c5"} 1
`, "stall_rocketmq_flush_pending_bytes", "stall_rocketmq_commit_pending_bytes",
		"stall_rocketmq_transient_store_pool_enabled", "stall_rocketmq_transient_store_buffers_available",
		"stall_rocketmq_messages_per_second", "stall_rocketmq_broker_config_page_cache_busy_timeout_seconds",
		"stall_rocketmq_runtime_info_errors_total")
	if err != nil {
		t.Fatal(err)
	}
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
	c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+b.Addr()))
	families := []string{"stall_rocketmq_up", "stall_rocketmq_commitlog_lock_held_seconds", "stall_rocketmq_send_queue_size",
		"stall_rocketmq_send_queue_capacity", "stall_rocketmq_put_latency_seconds", "stall_rocketmq_commitlog_disk_ratio",
		"stall_rocketmq_flush_pending_bytes", "stall_rocketmq_runtime_info_errors_total"}
	e := collectortest.Expose(t, context.Background(), c)
	if e.Err != nil {
		t.Fatal(e.Err)
	}
	if got := e.Families("stall_rocketmq_messages_per_second"); !strings.Contains(got, `stall_rocketmq_messages_per_second{broker="b",broker_id="0",op="put",rocketmq_cluster="c",window="10s"} 12.5`) ||
		strings.Contains(got, `op="put",window="60s"`) {
		t.Errorf("early empty putTps tokens: %s", got)
	}
	collectortest.Compare(t, c, `
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="pageCacheLockTimeMills",rocketmq_cluster="c"} 2
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="remainHowManyDataToFlush",rocketmq_cluster="c"} 2
stall_rocketmq_runtime_info_errors_total{broker="b",broker_id="0",key="sendThreadPoolQueueSize",rocketmq_cluster="c"} 2
stall_rocketmq_send_queue_capacity{broker="b",broker_id="0",rocketmq_cluster="c"} 10000
stall_rocketmq_up{broker="b",broker_id="0",rocketmq_cluster="c"} 1
`, families...)
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
	c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+b.Addr(), "--rocketmq.timeout=300ms"))
	up := func() string {
		t.Helper()
		e := collectortest.Expose(t, context.Background(), c)
		got := e.Families("stall_rocketmq_up")
		v := strings.TrimSpace(got[strings.LastIndex(got, " "):])
		if (e.Err == nil) != (v == "1") {
			t.Errorf("up %s but err = %v", v, e.Err)
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

func TestACLFile(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
	b.RequireACL(&remoting.Credentials{AccessKey: "exporter", SecretKey: "s3cret"})
	p := filepath.Join(t.TempDir(), "acl")
	os.WriteFile(p, []byte("accessKey=exporter\nsecretKey=s3cret\n"), 0o600)
	opts := testOptions(t, "--rocketmq.acl-file="+p, "--rocketmq.broker="+b.Addr())
	collectortest.Compare(t, newScraper(collectortest.Config("rocketmq", nil), opts), `
stall_rocketmq_up{broker="b",broker_id="",rocketmq_cluster=""} 1
`, "stall_rocketmq_up")
	opts.Credentials = nil
	got := collectortest.Expose(t, context.Background(), newScraper(collectortest.Config("rocketmq", nil), opts)).Families("stall_rocketmq_up")
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
	cpu0 := collectortest.ProcessCPU()
	b.ResetTimer()
	defer func() {
		b.ReportMetric(float64((collectortest.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
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

// BenchmarkStalledAnnouncers: one scrape of five brokers that each answer
// with a length word announcing a 16 MiB frame and then stall until the
// scrape's timeout: memory must not follow the announced sizes. heap-MiB is the Go heap in use while
// the five requests wait, over the heap before the scrape; rss-MiB the
// process's resident set (VmRSS) at the same moment, over the RSS before.
func BenchmarkStalledAnnouncers(b *testing.B) {
	const peers = 5
	args := []string{"--rocketmq.timeout=300ms", "--rocketmq.max-frame-bytes=16777216"} // the 16 MiB announced are accepted
	var brokers []*rocketmqtest.Broker
	for range peers {
		br, err := rocketmqtest.NewBroker("127.0.0.1:0", rocketmqtest.Runtime49(), "brokerName=b\n")
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		br.Delay(time.Minute)
		brokers, args = append(brokers, br), append(args, "--rocketmq.broker="+br.Addr())
	}
	c := newScraper(collectortest.Config("rocketmq", nil), testOptions(b, args...))
	var heap, rss float64
	for i := 0; i < b.N; i++ {
		for _, br := range brokers {
			br.Inject(rocketmqtest.Announce)
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		rss0 := vmRSS(b)
		done := make(chan struct{})
		go func() { collectortest.Expose(b, context.Background(), c); close(done) }()
		// The announcements are read and the clients wait, each with a
		// first 64 KiB chunk of the frame taken from the reply budget.
		collectortest.WaitFor(b, 10*time.Second, "five clients waiting for their frames", func() error {
			if n := replyBudget(c.opts.MaxFrame).InUse(); n < peers*64<<10 {
				return fmt.Errorf("%d bytes of frames held", n)
			}
			return nil
		})
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

// Addresses come repeated and in RocketMQ's own list form; duplicates go.
func TestParseAddrs(t *testing.T) {
	got, err := parseAddrs("--rocketmq.namesrv", []string{"10.0.0.9:9876;10.0.0.10:9876", "10.0.0.9:9876", " 10.0.0.11:9876 "})
	if err != nil || strings.Join(got, "|") != "10.0.0.9:9876|10.0.0.10:9876|10.0.0.11:9876" {
		t.Errorf("got %q, %v", got, err)
	}
}

// TestStartupLineSaysWhatIsWatched: logWatched names the name servers,
// brokers and log directory the collector will poll and follow, or says
// there is none, in one info line.
func TestStartupLineSaysWhatIsWatched(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "INFO rocketmq: no targets (--rocketmq.namesrv, --rocketmq.broker, --rocketmq.log-dir); the collector exports no broker series, /probe is unaffected"},
		{[]string{"--rocketmq.namesrv=NS-1:9876", "--rocketmq.broker=10.0.0.1:10911", "--rocketmq.broker=10.0.0.2:10911"},
			"INFO rocketmq: watching namesrv=ns-1:9876 brokers=10.0.0.1:10911,10.0.0.2:10911 log_dir="},
	} {
		logs, logger := collectortest.NewLogs(slog.LevelDebug)
		logWatched(logger, testOptions(t, tc.args...))
		if got := logs.Take(); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%q: logged %q, want the one line %q", tc.args, got, tc.want)
		}
	}
}
