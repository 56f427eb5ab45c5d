package rocketmq

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The background sampler (Run) samples pageCacheLockTimeMills at every
// --rocketmq.sample-interval tick into a histogram; a failing broker is
// counted and then backed off (two intervals after one failure), not
// redialled every tick.
func TestLockSampler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.broker="+b.Addr(), "--rocketmq.sample-interval=1s")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		tick := func() { // the next tick, and its sample done
			t.Helper()
			collectortest.Advance(time.Second)
			synctest.Wait()
		}
		for _, ms := range []string{"0", "0", "3", "120", "700", "1200", "15000"} {
			b.Set("pageCacheLockTimeMills", ms)
			tick()
		}
		err := collectortest.Compare(t, c, `
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0"} 2
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0.005"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0.01"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0.05"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0.1"} 3
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0.2"} 4
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="0.5"} 4
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="1"} 5
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="2"} 6
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="5"} 6
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="10"} 6
stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket{broker="b",broker_id="0",rocketmq_cluster="c",le="+Inf"} 7
stall_rocketmq_commitlog_lock_held_sampled_seconds_sum{broker="b",broker_id="0",rocketmq_cluster="c"} 17.023
stall_rocketmq_commitlog_lock_held_sampled_seconds_count{broker="b",broker_id="0",rocketmq_cluster="c"} 7
stall_rocketmq_lock_samples_failed_total{broker="b",broker_id="0",rocketmq_cluster="c"} 0
`, "stall_rocketmq_commitlog_lock_held_sampled_seconds", "stall_rocketmq_lock_samples_failed_total")
		if err != nil {
			t.Fatal(err)
		}

		b.Inject(rocketmqtest.Reset, rocketmqtest.Reset) // the reused connection, then the one retry on a fresh one
		tick()
		tick() // within the 2 s backoff: skipped
		if n := b.RequestCount(remoting.GetBrokerRuntimeInfo); n != 10 {
			t.Errorf("%d runtime-info requests, want 10 (7 samples + 1 scrape + 1 failed sample, sent twice: reused connection, then a fresh one; the backed-off tick sends none)", n)
		}
		tick()
		got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_lock_samples_failed_total", "stall_rocketmq_commitlog_lock_held_sampled_seconds")
		if !strings.Contains(got, `stall_rocketmq_lock_samples_failed_total{broker="b",broker_id="0",rocketmq_cluster="c"} 1`) ||
			!strings.Contains(got, `_count{broker="b",broker_id="0",rocketmq_cluster="c"} 8`) {
			t.Errorf("after a failed and a recovered sample:\n%s", got)
		}
		cancel()
		<-done
	})
}

// A scrape that reaches the broker again ends the sampler's backoff: the
// next tick samples, rather than when the backoff of up to 30 s runs out.
func TestScrapeEndsSamplerBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.broker="+b.Addr(), "--rocketmq.sample-interval=1s")
		ctx := t.Context()
		c.sampleOnce(ctx) // dial
		// Five failed samples, each once the last backoff ran out (2, 4, 8,
		// 16 s); then 30 s of backoff.
		for i := range 5 {
			if i > 0 {
				collectortest.Advance(31 * time.Second)
			}
			b.Inject(rocketmqtest.Garbage) // a bad reply is not retried
			c.sampleOnce(ctx)
		}
		collectortest.Advance(time.Second) // 29 s of backoff left
		c.sampleOnce(ctx)
		if n := b.RequestCount(remoting.GetBrokerRuntimeInfo); n != 6 {
			t.Fatalf("%d samples sent, want 6: the tick within the backoff sent one", n)
		}
		if got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_up"); !strings.HasSuffix(got, "} 1\n") {
			t.Fatalf("scrape: %s", got)
		}
		before := b.RequestCount(remoting.GetBrokerRuntimeInfo)
		c.sampleOnce(ctx)
		if n := b.RequestCount(remoting.GetBrokerRuntimeInfo) - before; n != 1 {
			t.Errorf("the tick after a scrape reached the broker sent %d samples, want 1 (backoff ended)", n)
		}
	})
}

// Run samples and follows the logs in the background, concurrently with
// scrapes (go test -race), until its context ends.
func TestRunStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerName=b\n")
		cfg := collectortest.Config("rocketmq", nil)
		cfg.Paths.Rootfs = t.TempDir()
		c := pipeScraper(t, cfg, &n, "--rocketmq.broker="+b.Addr(), "--rocketmq.sample-interval=5ms", "--rocketmq.log-dir=/logs")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		for range 6 {
			collectortest.Advance(5 * time.Millisecond)
			collectortest.Expose(t, context.Background(), c) // runs while the tick's sample does
		}
		synctest.Wait()
		if n := b.RequestCount(remoting.GetBrokerRuntimeInfo); n != 12 {
			t.Errorf("%d runtime-info requests, want 12 (6 samples, 6 scrapes)", n)
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run did not return after cancel")
		}
		got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_commitlog_lock_held_sampled_seconds")
		if !strings.Contains(got, `stall_rocketmq_commitlog_lock_held_sampled_seconds_count{broker="b",broker_id="",rocketmq_cluster=""} 6`) {
			t.Errorf("want 6 samples:\n%s", got)
		}
	})
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
	c := newScraper(collectortest.Config("rocketmq", nil), testOptions(b, "--rocketmq.broker="+br.Addr(), "--rocketmq.sample-interval=1s"))
	ctx := context.Background()
	c.sampleOnce(ctx) // dial outside the measurement
	b.ReportAllocs()
	cpu0 := collectortest.ProcessCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.sampleOnce(ctx)
	}
	b.StopTimer()
	cpu := collectortest.ProcessCPU() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e9*100, "%core@1s")
}
