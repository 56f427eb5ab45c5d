package rocketmq

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// refreshTopology starts a discovery round in the background when one is
// due and none is running: --rocketmq.discovery-interval after the last
// round, or, while no name server has ever answered, at every scrape
// (byScrape) — never at the sampler's ticks, which would ask a dead name
// server every --rocketmq.sample-interval. It returns a channel closed when
// the running round has the brokers a scrape needs (nil when none runs),
// and whether this scrape should wait for it: not when every name server
// failed the last round, and not when the round already delayed a scrape.
// So a silent name server delays at most one scrape per round, and none
// once its failure is known. A round is bounded by --rocketmq.timeout and
// never by a scrape.
func (c *scraper) refreshTopology(byScrape bool) (<-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.discovering == nil {
		due := len(c.opts.Namesrv) > 0 && (c.discovered && c.now().Sub(c.lastDiscovery) >= c.opts.DiscoveryInterval ||
			!c.discovered && byScrape)
		if !due {
			return nil, false
		}
		c.startRound()
	}
	if !byScrape || c.roundFailed || c.roundWaited {
		return c.ready, false
	}
	c.roundWaited = true
	return c.ready, true
}

// startRound starts a discovery round in the background; c.mu must be held.
func (c *scraper) startRound() {
	done, ready := make(chan struct{}), make(chan struct{})
	c.discovering, c.ready, c.roundWaited = done, ready, false
	c.lastDiscovery = c.now()
	var once sync.Once
	markReady := func() { once.Do(func() { close(ready) }) }
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		c.discover(ctx, markReady)
		cancel()
		markReady()
		c.mu.Lock()
		c.discovering, c.ready = nil, nil
		c.mu.Unlock()
		close(done)
	}()
}

// knownBrokers returns the brokers to scrape, sorted by address.
func (c *scraper) knownBrokers() []*broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*broker, 0, len(c.brokers))
	for _, b := range c.brokers {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// discover asks every name server concurrently for the topology. Every
// name server knows every broker (each broker registers with all of them),
// so the brokers of an answer are added at once, and ready is called as
// soon as only name servers that failed the previous round are still
// pending; brokers that no answering name server lists are dropped when the
// round ends. When none answers, the last known brokers are kept. A name server
// going down is logged once at warn, its recovery at info.
func (c *scraper) discover(ctx context.Context, ready func()) {
	type result struct {
		ns      string
		brokers []remoting.BrokerAddr
		err     error
	}
	results := make([]result, len(c.opts.Namesrv))
	pending := map[string]bool{} // guarded by c.mu
	for _, ns := range c.opts.Namesrv {
		pending[ns] = true
	}
	answered := false // guarded by c.mu
	var wg sync.WaitGroup
	for i, ns := range c.opts.Namesrv {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs, err := c.nsClients[ns].ClusterInfo(ctx)
			results[i] = result{ns, bs, err}
			c.mu.Lock()
			delete(pending, ns)
			if err == nil {
				answered = true
				c.addBrokers(bs)
			}
			// Ready early when an answer came and every name server still
			// pending failed the previous round: a scrape does not wait
			// for name servers known to be down.
			early := answered && len(pending) > 0
			for p := range pending {
				if prev, seen := c.namesrvErr[p]; !seen || prev == nil {
					early = false
				}
			}
			c.mu.Unlock()
			if early {
				ready()
			}
		}()
	}
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	found := map[string]remoting.BrokerAddr{}
	failed := 0
	for _, r := range results {
		prev, seen := c.namesrvErr[r.ns]
		c.namesrvErr[r.ns] = r.err
		if r.err != nil {
			failed++
			if !seen || prev == nil {
				c.cfg.Logger.Warn("rocketmq name server not answering GET_BROKER_CLUSTER_INFO; the last known brokers are scraped (logged again when it recovers)",
					"namesrv", r.ns, "err", r.err)
			}
			if remoting.IsBadReply(r.err) {
				c.cfg.Problems.Add("rocketmq cluster info", 1, r.err)
			}
			continue
		}
		if seen && prev != nil {
			c.cfg.Logger.Info("rocketmq name server answering again", "namesrv", r.ns)
		}
		for _, b := range r.brokers {
			found[b.Addr] = b
		}
	}
	c.roundFailed = failed == len(results)
	if c.roundFailed {
		return
	}
	c.discovered = true
	for addr, b := range c.brokers {
		if _, ok := found[addr]; !ok && !b.direct {
			b.client.Close()
			delete(c.brokers, addr)
		}
	}
	for _, r := range results {
		if r.err == nil {
			c.addBrokers(r.brokers)
		}
	}
}

// addBrokers adds discovered brokers and updates the labels of known ones
// (directly named brokers keep the labels from their config); c.mu must be
// held.
func (c *scraper) addBrokers(found []remoting.BrokerAddr) {
	for _, ba := range found {
		labels := [3]string{labelValue(ba.Cluster), labelValue(ba.Name), strconv.FormatInt(ba.ID, 10)}
		if b, ok := c.brokers[ba.Addr]; ok {
			b.mu.Lock()
			if !b.direct {
				b.labels = labels
			}
			b.mu.Unlock()
			continue
		}
		c.brokers[ba.Addr] = c.newBroker(ba.Addr, false, labels)
	}
}

// sendNamesrv sends stall_rocketmq_namesrv_up from the last finished
// discovery round and returns the errors of the name servers that failed it.
func (c *scraper) sendNamesrv(ch chan<- prometheus.Metric) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, ns := range c.opts.Namesrv {
		err, ok := c.namesrvErr[ns]
		if !ok {
			continue
		}
		namesrvUpDesc.Send(ch, b2f(err == nil), ns)
		if err != nil {
			errs = append(errs, fmt.Errorf("name server %s: %w", ns, err))
		}
	}
	return errs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
