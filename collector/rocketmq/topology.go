package rocketmq

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// brokerKey identifies a broker across scrapes. A discovered broker is its
// cluster, name and id, as labelled: a master and its slave may be
// announced at one address and must stay two brokers with their own series.
// A directly named broker (--rocketmq.broker, /probe) is its address: who
// it is, it says only in its config.
type brokerKey struct {
	direct string    // the address of a directly named broker; empty for a discovered one
	labels [3]string // cluster, broker, broker_id of a discovered one
}

// String is cluster/broker/broker_id, as logged.
func (k brokerKey) String() string { return strings.Join(k.labels[:], "/") }

func discoveredKey(ba remoting.BrokerAddr) brokerKey {
	return brokerKey{labels: [3]string{collector.Label(ba.Cluster), collector.Label(ba.Name), strconv.FormatInt(ba.ID, 10)}}
}

// knownBrokers returns the brokers to scrape, sorted by address, then key,
// after dropping those unlisted for longer than the retention.
func (c *scraper) knownBrokers() []*broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropUnlisted(time.Now())
	keys := slices.Collect(maps.Keys(c.brokers))
	slices.SortFunc(keys, func(a, b brokerKey) int {
		return cmp.Or(strings.Compare(c.brokers[a].addr, c.brokers[b].addr), strings.Compare(a.String(), b.String()))
	})
	out := make([]*broker, len(keys))
	for i, k := range keys {
		out[i] = c.brokers[k]
	}
	return out
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
			b.unlistedSince = time.Time{}
			b.listing.OK("rocketmq broker listed by the name servers again", "id", k.String())
		case len(atAddr[b.addr]) > 0:
			c.dropBroker(k, b, "its address is now announced for another broker")
		case b.unlistedSince.IsZero():
			b.unlistedSince = now
			if c.opts.UnlistedRetention > 0 {
				b.listing.Failed("rocketmq broker no longer listed by the name servers (it unregistered, or its connection to them closed: a broker that stops does both); still scraped, stall_rocketmq_up 0 while it does not answer, until --rocketmq.unlisted-broker-retention runs out",
					"unlisted", nil, "id", k.String(), "retention", c.opts.UnlistedRetention)
			}
		}
	}
	c.dropUnlisted(now)
}

// dropUnlisted drops the brokers unlisted for the retention; c.mu must be held.
func (c *scraper) dropUnlisted(now time.Time) {
	for k, b := range c.brokers {
		if !b.unlistedSince.IsZero() && now.Sub(b.unlistedSince) >= c.opts.UnlistedRetention {
			c.dropBroker(k, b, "not listed by the name servers for --rocketmq.unlisted-broker-retention")
		}
	}
}

// dropBroker forgets a broker: its series end. c.mu must be held.
func (c *scraper) dropBroker(k brokerKey, b *broker, why string) {
	b.client.Close()
	delete(c.brokers, k)
	c.cfg.Logger.Info("rocketmq broker dropped: "+why, "broker", b.addr, "id", k.String())
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

// logSharedAddrs warns when the name servers announce several brokers at
// one address (a master and its slave, say, by a configuration mistake or
// a NAT): each keeps its own series, but all are read from the one process
// listening there. Each address and set of brokers is one state of its own
// (a StateLog): a new set warns again, and a set no longer announced logs
// its end. c.mu must be held.
func (c *scraper) logSharedAddrs(atAddr map[string][]string) {
	now := map[string]bool{}
	for addr, ids := range atAddr {
		if len(ids) < 2 {
			continue
		}
		slices.Sort(ids)
		desc := strings.Join(ids, ", ")
		key := addr + " " + desc
		now[key] = true
		s, ok := c.sharedAddrs[key]
		if !ok {
			s = collector.NewStateLog(c.cfg.Logger.With("address", addr, "brokers", desc))
			c.sharedAddrs[key] = s
		}
		s.Failed("rocketmq name servers announce several brokers at one address; each keeps its own series (cluster/broker/broker_id), but all are read from the one process listening there",
			"shared_address", nil)
	}
	for key, s := range c.sharedAddrs {
		if !now[key] {
			s.OK("rocketmq name servers no longer announce these brokers at one address")
			delete(c.sharedAddrs, key)
		}
	}
}
