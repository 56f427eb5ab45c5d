package rocketmq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// namesrv is one name server.
type namesrv struct {
	client *remoting.Client
	state  *collector.StateLog // it failing and answering again
	asked  bool                // a discovery round has finished with it; guarded by the scraper's mu
	err    error               // its result in that round (nil: answered)
}

// failedLast: the name server failed the last round; c.mu must be held.
func (ns *namesrv) failedLast() bool { return ns.asked && ns.err != nil }

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
		due := len(c.opts.Namesrv) > 0 &&
			((c.discovered && time.Since(c.lastDiscovery) >= c.opts.DiscoveryInterval) || (!c.discovered && byScrape))
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
	c.lastDiscovery = time.Now()
	markReady := sync.OnceFunc(func() { close(ready) })
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

// discover asks every name server concurrently for the topology. Every
// name server knows every broker (each broker registers with all of them),
// so the brokers of an answer are added at once, and ready is called as
// soon as only name servers that failed the previous round are still
// pending; brokers that no answering name server lists are marked unlisted
// when the round ends (see markUnlisted). When none answers, the last known
// brokers are kept. A name server failing and answering again is logged
// through its StateLog.
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
		wg.Go(func() {
			bs, err := c.namesrvs[ns].client.ClusterInfo(ctx)
			bs = c.dialable(ns, bs)
			results[i] = result{ns, bs, err}
			c.mu.Lock()
			delete(pending, ns)
			if err == nil {
				answered = true
				c.addBrokers(bs)
			}
			// Ready early once only name servers that failed the previous
			// round are pending: a scrape does not wait for those.
			early := answered && len(pending) > 0
			for p := range pending {
				if !c.namesrvs[p].failedLast() {
					early = false
				}
			}
			c.mu.Unlock()
			if early {
				ready()
			}
		})
	}
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	found := map[brokerKey]bool{}
	atAddr := map[string][]string{} // the brokers announced at each address
	failed := 0
	for _, r := range results {
		ns := c.namesrvs[r.ns]
		ns.asked, ns.err = true, r.err
		if r.err != nil {
			failed++
			ns.state.Failed("rocketmq name server failed GET_BROKER_CLUSTER_INFO; the last known brokers are scraped", downReason(r.err), r.err)
			if remoting.IsBadReply(r.err) {
				c.cfg.Problems.Add("rocketmq_cluster_info_reply", 1, r.err)
			}
			continue
		}
		ns.state.OK("rocketmq name server answering again")
		for _, b := range r.brokers {
			k := discoveredKey(b)
			if !found[k] {
				found[k] = true
				atAddr[b.Addr] = append(atAddr[b.Addr], k.String())
			}
		}
	}
	c.roundFailed = failed == len(results)
	if c.roundFailed {
		return
	}
	c.discovered = true
	for _, r := range results {
		if r.err == nil {
			c.addBrokers(r.brokers)
		}
	}
	c.markUnlisted(found, atAddr)
	c.logSharedAddrs(atAddr)
}

// sendNamesrv sends stall_rocketmq_namesrv_up of the last finished round
// and returns the errors of the name servers that failed it.
func (c *scraper) sendNamesrv(ch chan<- prometheus.Metric) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, addr := range c.opts.Namesrv {
		ns := c.namesrvs[addr]
		if !ns.asked {
			continue
		}
		if ns.err != nil {
			namesrvUpDesc.Send(ch, 0, addr)
			errs = append(errs, fmt.Errorf("name server %s: %w", addr, ns.err))
			continue
		}
		namesrvUpDesc.Send(ch, 1, addr)
	}
	return errs
}
