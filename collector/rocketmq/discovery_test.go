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

// Discovery follows the topology at every --rocketmq.discovery-interval;
// when every name server fails the last known brokers are still scraped.
func TestTopologyChangesAndNamesrvOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		a := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "")
		b := pipeBroker(t, &n, "10.0.0.2:10911", rocketmqtest.Runtime5(), "")
		ns := pipeNameServer(t, &n, "10.0.0.9:9876",
			remoting.BrokerAddr{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}, remoting.BrokerAddr{Cluster: "c", Name: "b", ID: 0, Addr: b.Addr()})
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.namesrv="+ns.Addr(),
			"--rocketmq.discovery-interval=30s", "--rocketmq.unlisted-broker-retention=0s")
		collectortest.Compare(t, c, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="b",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
		// Broker b leaves the topology; within the interval nobody asks.
		ns.SetBrokers([]remoting.BrokerAddr{{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()}})
		collectortest.Advance(29 * time.Second)
		if got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_up"); strings.Count(got, "\n") != 2 {
			t.Errorf("within the discovery interval:\n%s", got)
		}
		collectortest.Advance(2 * time.Second)
		collectortest.Compare(t, c, `
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
		// The name server goes away: broker a is still scraped.
		ns.Inject(rocketmqtest.Reset, rocketmqtest.Reset) // the reused connection, then the one retry
		collectortest.Advance(31 * time.Second)
		err := collectortest.Compare(t, c, `
stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 0
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up", "stall_rocketmq_namesrv_up")
		if err == nil || !strings.Contains(err.Error(), "name server "+ns.Addr()) {
			t.Errorf("err = %v, want the name server's failure", err)
		}
		if n := ns.RequestCount(remoting.GetBrokerClusterInfo); n != 4 {
			t.Errorf("%d cluster-info requests, want 4 (the failed discovery was sent twice: reused connection, then a fresh one)", n)
		}
	})
}

// Bad replies from a name server — garbage, a length over the limit, noise
// starting with a 0x7fffffff length, half a frame and a close — are bad
// input: each is counted in stall_collector_parse_errors_total, and the
// last known brokers are still scraped.
func TestNamesrvBadRepliesCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		a := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "")
		ns := pipeNameServer(t, &n, "10.0.0.9:9876", remoting.BrokerAddr{Cluster: "c", Name: "a", ID: 0, Addr: a.Addr()})
		cfg := collectortest.Config("rocketmq", nil)
		c := pipeScraper(t, cfg, &n, "--rocketmq.namesrv="+ns.Addr(), "--rocketmq.timeout=1s", "--rocketmq.discovery-interval=30s")
		scrapeAndEndRound := func() string {
			t.Helper()
			got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_up", "stall_rocketmq_namesrv_up")
			endRound(c)
			return got
		}
		scrapeAndEndRound()
		for _, f := range []rocketmqtest.Fault{rocketmqtest.Garbage, rocketmqtest.Huge, rocketmqtest.Noise, rocketmqtest.Truncated} {
			before := cfg.Problems.Count()
			ns.Inject(f)
			collectortest.Advance(31 * time.Second)
			scrapeAndEndRound()
			got := scrapeAndEndRound()
			if d := cfg.Problems.Count() - before; d != 1 {
				t.Errorf("fault %d from the name server: %d problems counted, want 1", f, d)
			}
			if !strings.Contains(got, `stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 0`) ||
				!strings.Contains(got, `stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1`) {
				t.Errorf("fault %d: %s", f, got)
			}
		}
	})
}

// A master and a slave that the name server announces at one address are
// two brokers: each keeps its own series and labels, and the shared address
// is logged once (they collapsed into one series labelled as the slave,
// silently, once).
func TestBrokersSharingAnAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "")
		ns := pipeNameServer(t, &n, "10.0.0.9:9876",
			remoting.BrokerAddr{Cluster: "c", Name: "broker-a", ID: 0, Addr: b.Addr()},
			remoting.BrokerAddr{Cluster: "c", Name: "broker-a", ID: 1, Addr: b.Addr()},
			remoting.BrokerAddr{Cluster: "c", Name: "broker-b", ID: 0, Addr: "10.0.0.2:10911"}) // nothing listens there
		cfg := collectortest.Config("rocketmq", nil)
		h := recordLogs(&cfg)
		c := pipeScraper(t, cfg, &n, "--rocketmq.namesrv="+ns.Addr(), "--rocketmq.timeout=1s", "--rocketmq.discovery-interval=30s",
			"--rocketmq.unlisted-broker-retention=0s")
		for range 2 {
			collectortest.Compare(t, c, `
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="broker-a",broker_id="0",rocketmq_cluster="c",version="V4_9_7"} 1
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="broker-a",broker_id="1",rocketmq_cluster="c",version="V4_9_7"} 1
stall_rocketmq_up{broker="broker-a",broker_id="0",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="broker-a",broker_id="1",rocketmq_cluster="c"} 1
stall_rocketmq_up{broker="broker-b",broker_id="0",rocketmq_cluster="c"} 0
`, "stall_rocketmq_up", "stall_rocketmq_broker_info")
			collectortest.Advance(31 * time.Second) // the second scrape runs a new round: logged only once
		}
		var shared []string
		for _, r := range h.Take() {
			if strings.Contains(r, "one address") {
				shared = append(shared, r)
			}
		}
		if len(shared) != 1 || !strings.Contains(shared[0], "address="+b.Addr()) ||
			!strings.Contains(shared[0], "c/broker-a/0") || !strings.Contains(shared[0], "c/broker-a/1") {
			t.Errorf("want one warning naming the shared address and both brokers, got %q", shared)
		}
		// The slave moves to an address of its own: same series, new address.
		b2 := pipeBroker(t, &n, "10.0.0.3:10911", rocketmqtest.Runtime5(), "")
		ns.SetBrokers([]remoting.BrokerAddr{{Cluster: "c", Name: "broker-a", ID: 0, Addr: b.Addr()}, {Cluster: "c", Name: "broker-a", ID: 1, Addr: b2.Addr()}})
		got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_up", "stall_rocketmq_broker_info")
		for _, want := range []string{
			`stall_rocketmq_broker_info{address="` + b.Addr() + `",broker="broker-a",broker_id="0",rocketmq_cluster="c",version="V4_9_7"} 1`,
			`stall_rocketmq_broker_info{address="` + b2.Addr() + `",broker="broker-a",broker_id="1",rocketmq_cluster="c",version="V5_3_3"} 1`,
			`stall_rocketmq_up{broker="broker-a",broker_id="0",rocketmq_cluster="c"} 1`,
			`stall_rocketmq_up{broker="broker-a",broker_id="1",rocketmq_cluster="c"} 1`,
		} {
			if !strings.Contains(got, want+"\n") {
				t.Errorf("after the slave moved: missing %s in\n%s", want, got)
			}
		}
		if n := strings.Count(got, "\n"); n != 4 {
			t.Errorf("after the slave moved: %d series, want 4:\n%s", n, got)
		}
	})
}

// Until a name server has answered, it is asked once per scrape, never by
// the background sampler's ticks (it was asked at every 1 s tick).
func TestUnansweredNamesrvAskedOncePerScrape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		ns := pipeNameServer(t, &n, "10.0.0.9:9876")
		for range 500 {
			ns.Inject(rocketmqtest.Unsupported) // a well-formed refusal, as from a 5.x Proxy
		}
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.namesrv="+ns.Addr(), "--rocketmq.timeout=1s",
			"--rocketmq.sample-interval=10ms")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		for range 2 {
			collectortest.Expose(t, context.Background(), c)
			collectortest.Advance(300 * time.Millisecond) // 30 sampler ticks
		}
		cancel()
		<-done
		if n := ns.RequestCount(remoting.GetBrokerClusterInfo); n != 2 {
			t.Errorf("name server asked %d times over 2 scrapes and 60 sampler ticks, want 2 (once per scrape)", n)
		}
	})
}

// A name server that answers with an empty topology is not a failure.
func TestEmptyTopologyIsNoError(t *testing.T) {
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c := newScraper(collectortest.Config("rocketmq", nil), testOptions(t, "--rocketmq.namesrv="+ns.Addr(), "--rocketmq.timeout=1s"))
	r := collectortest.Expose(t, context.Background(), c)
	if r.Err != nil {
		t.Errorf("err = %v", r.Err)
	}
	r.Compare(t, `
stall_rocketmq_namesrv_up{namesrv="`+ns.Addr()+`"} 1
`, "stall_rocketmq_namesrv_up", "stall_rocketmq_up")
}
