package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// broker is the state kept for one broker between scrapes.
type broker struct {
	addr   string
	client *remoting.Client
	direct bool // from --rocketmq.broker or /probe: labels come from its config

	unlistedSince time.Time           // when the name servers stopped listing it; guarded by the scraper's mu
	listing       *collector.StateLog // its leaving and returning to the name servers' list

	mu            sync.Mutex
	labels        [3]string
	version       string
	put           putHistogram
	lockCounts    []uint64 // per lockBounds bucket, not cumulative; last is +Inf
	lockSum       float64
	lockN         uint64
	sampleErrors  uint64
	budgetRefused atomic.Uint64 // requests that failed with remote.ErrBudget (OnBudget)
	nextSample    time.Time
	sampleFails   int
	keyErrors     map[string]uint64
	config        map[string]string
	configAt      time.Time
	// state: its runtime info failing; configState: its ACL refusing GET_BROKER_CONFIG.
	state, configState *collector.StateLog
}

func (b *broker) observeLock(s float64) {
	i := sort.SearchFloat64s(lockBounds, s) // first bound >= s
	b.lockCounts[i]++
	b.lockSum += s
	b.lockN++
}

// observeDistribution adds a putMessageDistributeTime window to the
// broker's cumulative histogram; "null" (no window yet) is not an error.
// version is brokerVersionDesc; b.mu must be held.
func (b *broker) observeDistribution(raw, version string, now time.Time) error {
	dist, err := parseDistribution(raw)
	if errors.Is(err, errNull) {
		return nil
	}
	if err == nil {
		b.put.observe(dist, reportsWindowInProgress(version), now)
	}
	return err
}

// scrapeBroker reads one broker's runtime info and, when it answered and
// the config is due, its config, both before ctx's deadline; then it sends
// the broker's metrics. stall_rocketmq_up is the runtime-info request's
// result alone: a slow or failed config read keeps the last config.
func (c *scraper) scrapeBroker(ctx context.Context, b *broker, ch chan<- prometheus.Metric) error {
	kv, err := b.client.RuntimeInfo(ctx)
	if err == nil {
		b.mu.Lock()
		configDue := b.config == nil || time.Since(b.configAt) >= c.opts.ConfigInterval
		b.mu.Unlock()
		if configDue {
			c.readConfig(ctx, b)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lv := b.labels[:]
	if err != nil {
		reason := downReason(err)
		b.state.Failed(downMessages[reason]+"; stall_rocketmq_up is 0", reason, err)
		if remoting.IsBadReply(err) {
			c.cfg.Problems.Add("rocketmq_runtime_info_reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
		}
		upDesc.Send(ch, 0, lv...)
		downReasonDesc.Send(ch, 1, append(lv[:3:3], reason)...)
		b.sendState(ch)
		return fmt.Errorf("broker %s: %s: %w", b.addr, reason, err)
	}
	b.state.OK("rocketmq broker answering again")
	// The sampler's backoff (sampleOnce) ends now, not when its 30 s run out.
	b.sampleFails, b.nextSample = 0, time.Time{}
	upDesc.Send(ch, 1, lv...)
	b.emitRuntime(ch, kv, time.Now(), c.cfg.Problems)
	b.sendState(ch)
	return nil
}

// readConfig reads GET_BROKER_CONFIG; a failure keeps the last config and
// labels and is retried at the next scrape.
func (c *scraper) readConfig(ctx context.Context, b *broker) {
	cfg, bad, err := b.client.BrokerConfig(ctx)
	if bad > 0 {
		c.cfg.Problems.Add("rocketmq_config_line", bad, fmt.Errorf("broker %s: %d config lines without '='", b.addr, bad))
	}
	if remoting.IsBadReply(err) {
		c.cfg.Problems.Add("rocketmq_config_reply", 1, fmt.Errorf("broker %s: %w", b.addr, err))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var re *remoting.ResponseError
	if errors.As(err, &re) && responseReason(re) == remote.ReasonPermission {
		// The account may read runtime info but not the config: the
		// config series and incident 3's alert are missing, so say so.
		b.configState.Failed("rocketmq broker refused GET_BROKER_CONFIG: access denied (ACL); stall_rocketmq_broker_config_* are absent until the account may read the config",
			remote.ReasonPermission, err)
		return
	}
	if err != nil {
		c.cfg.Logger.Debug("GET_BROKER_CONFIG failed; keeping the last config", "broker", b.addr, "err", err)
		return
	}
	b.configState.OK("rocketmq broker answers GET_BROKER_CONFIG again")
	b.config, b.configAt = cfg, time.Now()
	if b.direct {
		b.labels = labelsFromConfig(cfg, b.addr)
	}
}

// labelsFromConfig names a directly configured broker from its own
// config (brokerClusterName, brokerName, brokerId); the address stands in
// for a missing name.
func labelsFromConfig(cfg map[string]string, addr string) [3]string {
	l := [3]string{collector.Label(cfg["brokerClusterName"]), collector.Label(cfg["brokerName"]), collector.Label(cfg["brokerId"])}
	if l[1] == "" {
		l[1] = collector.Label(addr)
	}
	return l
}

// sendState sends what is kept between scrapes; b.mu must be held.
func (b *broker) sendState(ch chan<- prometheus.Metric) {
	lv := b.labels[:]
	if b.put.have {
		buckets, count := b.put.buckets()
		ch <- prometheus.MustNewConstHistogram(putLatencyDesc, count, math.NaN(), buckets, lv...)
	}
	if b.lockN > 0 || b.sampleErrors > 0 {
		buckets, count := cumulativeBuckets(b.lockCounts, lockBounds)
		ch <- prometheus.MustNewConstHistogram(lockSampledDesc, count, b.lockSum, buckets, lv...)
		sampleErrorsDesc.Send(ch, float64(b.sampleErrors), lv...)
	}
	if n := b.budgetRefused.Load(); n > 0 {
		budgetRefusedDesc.Send(ch, float64(n), lv...)
	}
	for key, n := range b.keyErrors {
		keyErrorsDesc.Send(ch, float64(n), append(lv[:3:3], key)...)
	}
	if b.config != nil {
		vals := append([]string(nil), lv...)
		for _, k := range configKeys {
			vals = append(vals, collector.Label(b.config[k]))
		}
		configInfoDesc.Send(ch, 1, vals...)
		for _, m := range configMillis {
			if raw, ok := b.config[m.key]; ok {
				if v, err := parseConfigMillis(raw); err == nil {
					m.m.Send(ch, v, lv...)
				}
			}
		}
	}
}
