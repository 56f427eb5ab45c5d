package rocketmq

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// namesrv is one name server.
type namesrv struct {
	client *remoting.Client
	state  *collector.StateLog // it failing and answering again
	asked  bool                // a discovery round has finished with it; guarded by the scraper's mu
	err    error               // its result in that round (nil: answered)
}

// failedLast reports whether the name server failed the last round;
// c.mu must be held.
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
			((c.discovered && time.Now().Sub(c.lastDiscovery) >= c.opts.DiscoveryInterval) || (!c.discovered && byScrape))
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

// brokerKey identifies a broker across scrapes. A discovered broker is its
// cluster, name and id, as labelled: a master and its slave may be
// announced at one address and must stay two brokers with their own series.
// A directly named broker (--rocketmq.broker, /probe) is its address: who
// it is, it says only in its config.
type brokerKey struct {
	direct string    // the address of a directly named broker; empty for a discovered one
	labels [3]string // cluster, broker, broker_id of a discovered one
}

func discoveredKey(ba remoting.BrokerAddr) brokerKey {
	return brokerKey{labels: [3]string{labelValue(ba.Cluster), labelValue(ba.Name), strconv.FormatInt(ba.ID, 10)}}
}

// knownBrokers returns the brokers to scrape, sorted by address, then key,
// after dropping those unlisted for longer than the retention.
func (c *scraper) knownBrokers() []*broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropUnlisted(time.Now())
	keys := make([]brokerKey, 0, len(c.brokers))
	for k := range c.brokers {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := c.brokers[keys[i]].addr, c.brokers[keys[j]].addr
		if a != b {
			return a < b
		}
		return strings.Join(keys[i].labels[:], "/") < strings.Join(keys[j].labels[:], "/")
	})
	out := make([]*broker, len(keys))
	for i, k := range keys {
		out[i] = c.brokers[k]
	}
	return out
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs, err := c.namesrvs[ns].client.ClusterInfo(ctx)
			bs = c.dialable(ns, bs)
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
				if !c.namesrvs[p].failedLast() {
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
				atAddr[b.Addr] = append(atAddr[b.Addr], strings.Join(k.labels[:], "/"))
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

// markUnlisted starts the retention of the discovered brokers that no
// answering name server listed in this round, and ends it for those listed
// again. A broker that stops — a crash, a kill, SIGHUP with its shell
// (incident 1) — leaves the name servers' lists within seconds: its
// shutdown hook unregisters it, and a name server drops a broker whose
// connection closed. Dropping it at once would take its stall_rocketmq_up 0
// away before RocketMQBrokerDown's for: ran out, so it is still scraped for
// --rocketmq.unlisted-broker-retention (up 0 while it is dead, 1 if it is
// alive but unregistered), then dropped (dropUnlisted), so a broker taken
// out on purpose does not alert for ever. An unlisted broker whose address
// the name servers now announce for another broker (a slave promoted in
// its place, with a new broker id) is that process under a new identity:
// it is dropped at once. c.mu must be held.
func (c *scraper) markUnlisted(found map[brokerKey]bool, atAddr map[string][]string) {
	now := time.Now()
	for k, b := range c.brokers {
		switch {
		case b.direct:
		case found[k]:
			if !b.unlistedSince.IsZero() {
				b.unlistedSince = time.Time{}
				c.cfg.Logger.Info("rocketmq broker listed by the name servers again", "broker", b.addr, "id", strings.Join(k.labels[:], "/"))
			}
		case len(atAddr[b.addr]) > 0:
			c.dropBroker(k, b, "its address is now announced for another broker")
		case b.unlistedSince.IsZero():
			b.unlistedSince = now
			if c.opts.UnlistedRetention > 0 {
				c.cfg.Logger.Warn("rocketmq broker no longer listed by the name servers (it unregistered, or its connection to them closed: a broker that stops does both); still scraped, stall_rocketmq_up 0 while it does not answer, until --rocketmq.unlisted-broker-retention runs out",
					"broker", b.addr, "id", strings.Join(k.labels[:], "/"), "retention", c.opts.UnlistedRetention)
			}
		}
	}
	c.dropUnlisted(now)
}

// dropUnlisted drops the brokers unlisted for --rocketmq.unlisted-broker-retention
// or longer. c.mu must be held.
func (c *scraper) dropUnlisted(now time.Time) {
	for k, b := range c.brokers {
		if !b.unlistedSince.IsZero() && now.Sub(b.unlistedSince) >= c.opts.UnlistedRetention {
			c.dropBroker(k, b, "not listed by the name servers for --rocketmq.unlisted-broker-retention")
		}
	}
}

// dropBroker forgets a discovered broker: its series end. c.mu must be held.
func (c *scraper) dropBroker(k brokerKey, b *broker, why string) {
	b.client.Close()
	delete(c.brokers, k)
	c.cfg.Logger.Info("rocketmq broker dropped: "+why, "broker", b.addr, "id", strings.Join(k.labels[:], "/"))
}

// maxAddrLen is the longest address a broker can have: "[" + a 253-byte
// host name + "]:" + a 5-digit port.
const maxAddrLen = 1 + 253 + 2 + 5

// dialable drops, as bad input, the brokers a name server announces at an
// empty address or one longer than any host:port: the address would be
// dialled, logged and exported as the address label, and its length is the
// peer's choice.
func (c *scraper) dialable(ns string, bs []remoting.BrokerAddr) []remoting.BrokerAddr {
	out := bs[:0]
	for _, b := range bs {
		if b.Addr == "" || len(b.Addr) > maxAddrLen {
			c.cfg.Problems.Add("rocketmq_cluster_info_address", 1,
				fmt.Errorf("name server %s: broker %s id %d: an address of %d bytes is not host:port", ns, remote.Shown(b.Name), b.ID, len(b.Addr)))
			continue
		}
		out = append(out, b)
	}
	return out
}

// addBrokers adds discovered brokers, keyed by cluster, name and id; a
// broker announced at a new address gets a new client there. An address
// that is also named directly is skipped: that broker is scraped once, and
// labelled from its own config. c.mu must be held.
func (c *scraper) addBrokers(found []remoting.BrokerAddr) {
	for _, ba := range found {
		if _, direct := c.brokers[brokerKey{direct: ba.Addr}]; direct {
			continue
		}
		k := discoveredKey(ba)
		if b, ok := c.brokers[k]; ok {
			if b.addr == ba.Addr {
				continue
			}
			b.client.Close() // moved: read at the new address from now on, with fresh state
		}
		c.brokers[k] = c.newBroker(ba.Addr, false, k.labels)
	}
}

// logSharedAddrs warns, once per address and set of brokers, when the name
// servers announce several brokers at one address (a master and its slave,
// say, by a configuration mistake or a NAT): each keeps its own series, but
// all are read from the one process listening there. c.mu must be held.
func (c *scraper) logSharedAddrs(atAddr map[string][]string) {
	for addr, ids := range atAddr {
		if len(ids) < 2 {
			delete(c.sharedAddrs, addr)
			continue
		}
		sort.Strings(ids)
		desc := strings.Join(ids, ", ")
		if c.sharedAddrs[addr] == desc {
			continue
		}
		c.sharedAddrs[addr] = desc
		c.cfg.Logger.Warn("rocketmq name servers announce several brokers at one address; each keeps its own series (cluster/broker/broker_id), but all are read from the one process listening there",
			"address", addr, "brokers", desc)
	}
	for addr := range c.sharedAddrs {
		if _, ok := atAddr[addr]; !ok {
			delete(c.sharedAddrs, addr)
		}
	}
}

// sendNamesrv sends stall_rocketmq_namesrv_up from the last finished
// discovery round and returns the errors of the name servers that failed it.
func (c *scraper) sendNamesrv(ch chan<- prometheus.Metric) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, addr := range c.opts.Namesrv {
		ns := c.namesrvs[addr]
		if !ns.asked {
			continue
		}
		namesrvUpDesc.Send(ch, b2f(ns.err == nil), addr)
		if ns.err != nil {
			errs = append(errs, fmt.Errorf("name server %s: %w", addr, ns.err))
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
