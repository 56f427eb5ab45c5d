package rocketmq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// Run samples pageCacheLockTimeMills every --rocketmq.sample-interval and
// follows the broker logs, until ctx is done.
func (c *scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.logs != nil {
		wg.Go(func() { c.logs.run(ctx) })
	}
	if !c.remoteConfigured() || c.opts.SampleInterval <= 0 {
		return
	}
	t := time.NewTicker(c.opts.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.sampleOnce(ctx)
		}
	}
}

// sampleOnce polls every known broker once, each bounded by the sample
// interval. A broker that fails is skipped for a backoff of 2^n intervals
// after its n-th failure in a row (up to 30 s) so a dead broker is not
// redialled every second.
func (c *scraper) sampleOnce(ctx context.Context) {
	c.refreshTopology(false)
	brokers := c.knownBrokers()
	interval := c.opts.SampleInterval
	backoff := collector.Backoff{Min: 2 * interval, Max: 30 * time.Second}
	var wg sync.WaitGroup
	for _, b := range brokers {
		b.mu.Lock()
		skip := time.Now().Before(b.nextSample)
		b.mu.Unlock()
		if skip {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, interval)
			defer cancel()
			kv, err := b.client.RuntimeInfo(sctx)
			now := time.Now()
			b.mu.Lock()
			defer b.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if remoting.IsBadReply(err) {
					c.cfg.Problems.Add("rocketmq_runtime_info_reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
				}
				b.sampleErrors++
				b.sampleFails++
				b.nextSample = now.Add(backoff.Delay(b.sampleFails))
				return
			}
			b.sampleFails, b.nextSample = 0, time.Time{}
			if s, err := parseMillis(kv["pageCacheLockTimeMills"]); err == nil { // a missing key is ""
				b.observeLock(s)
			}
			// A bad value is counted by the scrape that emits the metrics.
			_ = b.observeDistribution(kv["putMessageDistributeTime"], kv["brokerVersionDesc"], now)
		})
	}
	wg.Wait()
}
