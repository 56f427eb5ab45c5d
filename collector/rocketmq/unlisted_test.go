package rocketmq

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// unlistedRig is a name server and brokers on a rocketmqtest.Net, and a
// scraper of them that scrapes every 15 s and lets each discovery round
// finish; it runs under testing/synctest.
type unlistedRig struct {
	t    *testing.T
	n    rocketmqtest.Net
	ns   *rocketmqtest.NameServer
	c    *scraper
	logs *collectortest.Logs
}

func newUnlistedRig(t *testing.T, retention time.Duration) *unlistedRig {
	t.Helper()
	r := &unlistedRig{t: t}
	r.ns = pipeNameServer(t, &r.n, "10.0.0.9:9876")
	cfg := collectortest.Config("rocketmq", nil)
	r.logs = recordLogs(&cfg)
	r.c = pipeScraper(t, cfg, &r.n, "--rocketmq.namesrv="+r.ns.Addr(), "--rocketmq.timeout=1s",
		"--rocketmq.discovery-interval=30s", "--rocketmq.unlisted-broker-retention="+retention.String())
	return r
}

// broker starts a broker at addr, not yet listed by the name server.
func (r *unlistedRig) broker(addr string) *rocketmqtest.Broker {
	return pipeBroker(r.t, &r.n, addr, rocketmqtest.Runtime49(), "")
}

// scrape scrapes once, waits for the discovery round it started, lets
// 15 s pass and returns the exposition.
func (r *unlistedRig) scrape() collectortest.Exposition {
	r.t.Helper()
	e := collectortest.Expose(r.t, context.Background(), r.c)
	endRound(r.c)
	collectortest.Advance(15 * time.Second)
	return e
}

// A broker that dies unregisters from the name servers at once (its
// shutdown hook; its closed connection). Its stall_rocketmq_up 0 must
// outlive RocketMQBrokerDown's for: 1m, or the alert can never fire for a
// discovered broker (the series vanished at the next discovery round, at
// most 30 s later, once). It stays for the retention, then
// goes, so a broker taken out on purpose does not alert for ever.
func TestUnlistedBrokerKeptForRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newUnlistedRig(t, 10*time.Minute)
		a, b := r.broker("10.0.0.1:10911"), r.broker("10.0.0.2:10911")
		ba := remoting.BrokerAddr{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}
		bb := remoting.BrokerAddr{Cluster: "c", Name: "b", ID: 0, Addr: b.Addr()}
		r.ns.SetBrokers([]remoting.BrokerAddr{ba, bb})
		start := time.Now()
		families := []string{"stall_rocketmq_up", "stall_rocketmq_down_reason"}
		r.scrape().Compare(t, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="b",broker_id="0",rocketmq_cluster="c"} 1
`, families...)
		// b dies, and the name server stops listing it.
		b.Close()
		r.ns.SetBrokers([]remoting.BrokerAddr{ba})
		down := `
stall_rocketmq_down_reason{broker="b",broker_id="0",reason="refused",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="b",broker_id="0",rocketmq_cluster="c"} 0
`
		// Died at 15 s, unlisted from the round at 30 s; kept until 10m30s.
		for time.Since(start) < 10*time.Minute+30*time.Second {
			at := time.Since(start)
			if got := r.scrape().Families(families...); got != strings.TrimLeft(down, "\n") {
				t.Fatalf("scrape at %s: got\n%s", at, got)
			}
		}
		r.scrape().Compare(t, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
`, families...)
		checkLogs(t, "b unlisted, then dropped", r.logs.Take(), []string{
			"WARN " + downMessages[remote.ReasonRefused] + ";",
			"WARN rocketmq broker no longer listed by the name servers",
			"INFO rocketmq broker dropped: not listed by the name servers for --rocketmq.unlisted-broker-retention broker=" + b.Addr() + " id=c/b/0",
		})
		if n := b.Accepted(); n != 1 {
			t.Errorf("b: %d connections", n)
		}
	})
}

// An unlisted broker that still answers (its heartbeats to the name servers
// are lost, say) is up, not down; listed again, it is kept. One whose
// address is announced for another broker id (a slave promoted in its
// place) is that broker now: dropped at once, not reported twice.
func TestUnlistedBrokerAliveOrRenamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newUnlistedRig(t, time.Hour)
		a, s := r.broker("10.0.0.1:10911"), r.broker("10.0.0.2:10911")
		ba := remoting.BrokerAddr{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}
		bs := remoting.BrokerAddr{Cluster: "c", Name: "a", ID: 1, Addr: s.Addr()}
		r.ns.SetBrokers([]remoting.BrokerAddr{ba, bs})
		r.scrape()
		r.ns.SetBrokers([]remoting.BrokerAddr{ba})
		for range 4 {
			r.scrape().Compare(t, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="a",broker_id="1",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
		}
		r.ns.SetBrokers([]remoting.BrokerAddr{ba, bs})
		r.scrape()
		collectortest.Advance(2 * time.Hour)
		r.scrape().Compare(t, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="a",broker_id="1",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
		checkLogs(t, "unlisted, listed again", r.logs.Take(), []string{
			"WARN rocketmq broker no longer listed by the name servers",
			"INFO rocketmq broker listed by the name servers again broker=" + s.Addr() + " id=c/a/1",
		})
		// The master dies; the slave is promoted: id 0 at the slave's address.
		a.Close()
		r.ns.SetBrokers([]remoting.BrokerAddr{{Cluster: "c", Name: "a", ID: 0, Addr: s.Addr()}})
		r.scrape()
		r.scrape().Compare(t, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
	})
}

// --rocketmq.unlisted-broker-retention=0: dropped at the round that finds
// it unlisted, as before.
func TestUnlistedRetentionZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newUnlistedRig(t, 0)
		a := r.broker("10.0.0.1:10911")
		r.ns.SetBrokers([]remoting.BrokerAddr{{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}})
		r.scrape()
		r.ns.SetBrokers(nil)
		r.scrape()
		if got := strings.TrimSpace(r.scrape().Families("stall_rocketmq_up")); got != "" {
			t.Errorf("retention 0: %s", got)
		}
	})
}

// TestSharedAddrLog: several brokers announced at one address are a
// failing state of that address and set (collector.StateLog): one warning
// naming both, nothing at info while the rounds repeat it, and when the
// set changes an info line for the old set and a warning for the new one;
// an address announced for one broker again ends it.
func TestSharedAddrLog(t *testing.T) {
	cfg := collectortest.Config("rocketmq", nil)
	logs := recordLogs(&cfg)
	c := newScraper(cfg, testOptions(t))
	round := func(atAddr map[string][]string) []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.logSharedAddrs(atAddr)
		return logs.Take()
	}
	const warn = "WARN rocketmq name servers announce several brokers at one address; each keeps its own series (cluster/broker/broker_id), but all are read from the one process listening there"
	const ended = "INFO rocketmq name servers no longer announce these brokers at one address"
	for i, tc := range []struct {
		atAddr map[string][]string
		want   []string
	}{
		{map[string][]string{"10.0.0.1:10911": {"c/a/1", "c/a/0"}, "10.0.0.2:10911": {"c/b/0"}},
			[]string{warn + " address=10.0.0.1:10911 brokers=c/a/0, c/a/1 reason=shared_address"}},
		{map[string][]string{"10.0.0.1:10911": {"c/a/0", "c/a/1"}}, nil},
		{map[string][]string{"10.0.0.1:10911": {"c/a/0", "c/a/1", "c/a/2"}}, []string{
			warn + " address=10.0.0.1:10911 brokers=c/a/0, c/a/1, c/a/2 reason=shared_address",
			ended + " address=10.0.0.1:10911 brokers=c/a/0, c/a/1"}},
		{map[string][]string{"10.0.0.1:10911": {"c/a/0"}}, []string{ended + " address=10.0.0.1:10911 brokers=c/a/0, c/a/1, c/a/2"}},
		{map[string][]string{"10.0.0.1:10911": {"c/a/0"}}, nil},
	} {
		if got := round(tc.atAddr); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("round %d logged\n%s\nwant\n%s", i+1, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}
