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

// One silent broker and one refusing broker cost only their own up 0: the
// scrape takes one --rocketmq.timeout (the silent broker's config is not
// asked for on top of its runtime info), the healthy broker is fully
// reported, and the collector fails naming both bad brokers.
func TestSilentBrokerCostsOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		good := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerClusterName=c\nbrokerName=good\nbrokerId=0\n")
		silent := pipeSilent(t, &n, "10.0.0.2:10911")
		const timeout = time.Second
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n,
			"--rocketmq.broker="+good.Addr(), "--rocketmq.broker="+silent, "--rocketmq.broker=10.0.0.3:10911", "--rocketmq.timeout=1s")
		r := collectortest.Expose(t, context.Background(), c)
		r.Compare(t, `
stall_rocketmq_up{broker="10.0.0.2:10911",broker_id="",rocketmq_cluster=""} 0
stall_rocketmq_up{broker="10.0.0.3:10911",broker_id="",rocketmq_cluster=""} 0
stall_rocketmq_up{broker="good",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
		if r.Elapsed != timeout {
			t.Errorf("scrape took %v, want one --rocketmq.timeout (%v)", r.Elapsed, timeout)
		}
		if r.Err == nil || !strings.Contains(r.Err.Error(), "broker "+silent) || !strings.Contains(r.Err.Error(), "broker 10.0.0.3:10911") ||
			strings.Contains(r.Err.Error(), good.Addr()) {
			t.Errorf("err = %v, want the silent and the refusing broker", r.Err)
		}
		if !strings.Contains(r.Text, `stall_rocketmq_put_messages_total{broker="good",broker_id="0",rocketmq_cluster="c"} 1.234567e+06`) {
			t.Errorf("healthy broker's series missing:\n%s", r.Text)
		}
	})
}

// The scrape's own deadline (the exporter's collector timeout, lowered from
// the Prometheus scrape-timeout header) is kept even when it is shorter than
// --rocketmq.timeout: Update returns a tenth of it early, with up 0 for the
// silent broker and the healthy broker's series.
func TestScrapeEndsBeforeContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		good := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime5(), "brokerClusterName=c\nbrokerName=good\nbrokerId=0\n")
		silent := pipeSilent(t, &n, "10.0.0.2:10911")
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.broker="+good.Addr(), "--rocketmq.broker="+silent, "--rocketmq.timeout=10s")
		ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
		defer cancel()
		r := collectortest.Expose(t, ctx, c)
		if !r.InTime || r.Elapsed != 720*time.Millisecond {
			t.Errorf("Update returned after %v (in time: %v), want 720 ms: 800 ms less a tenth", r.Elapsed, r.InTime)
		}
		r.Compare(t, `
stall_rocketmq_up{broker="10.0.0.2:10911",broker_id="",rocketmq_cluster=""} 0
stall_rocketmq_up{broker="good",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
	})
}

// A silent name server delays the first scrape by half the budget and,
// once its failure is known, later scrapes not at all; the directly named
// broker keeps its labels from its config and its up reflects its own
// runtime info only.
func TestSilentNamesrvKeepsBrokerLabels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		good := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerClusterName=c\nbrokerName=good\nbrokerId=0\n")
		ns := pipeSilent(t, &n, "10.0.0.9:9876")
		const timeout = time.Second
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.namesrv="+ns, "--rocketmq.broker="+good.Addr(), "--rocketmq.timeout=1s")
		r := collectortest.Expose(t, context.Background(), c)
		r.Compare(t, `
stall_rocketmq_up{broker="good",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up", "stall_rocketmq_namesrv_up")
		if r.Elapsed != timeout/2 {
			t.Errorf("first scrape took %v, want half of --rocketmq.timeout (%v)", r.Elapsed, timeout)
		}
		endRound(c) // the discovery round times out
		r = collectortest.Expose(t, context.Background(), c)
		r.Compare(t, `
stall_rocketmq_namesrv_up{namesrv="`+ns+`"} 0
stall_rocketmq_up{broker="good",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up", "stall_rocketmq_namesrv_up")
		if r.Elapsed != 0 {
			t.Errorf("scrape after the name server failed took %v, want no wait for it", r.Elapsed)
		}
		if r.Err == nil || !strings.Contains(r.Err.Error(), "name server "+ns) {
			t.Errorf("err = %v, want the silent name server", r.Err)
		}
	})
}

// A name server that never answers delays at most one scrape: a scrape
// that comes while the round it delayed is still running does not wait
// for it again.
func TestSilentNamesrvDelaysOneScrape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		good := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerClusterName=c\nbrokerName=good\nbrokerId=0\n")
		ns := pipeSilent(t, &n, "10.0.0.9:9876")
		const timeout = 2 * time.Second
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.namesrv="+ns, "--rocketmq.broker="+good.Addr(), "--rocketmq.timeout=2s")
		first := collectortest.Expose(t, context.Background(), c)
		second := collectortest.Expose(t, context.Background(), c) // the first round still waits for the name server
		if first.Elapsed != timeout/2 {
			t.Errorf("first scrape took %v, want half of --rocketmq.timeout waiting for the name server's first answer", first.Elapsed)
		}
		if second.Elapsed != 0 {
			t.Errorf("second scrape took %v, want no wait for a round that already delayed a scrape", second.Elapsed)
		}
		for i, r := range []collectortest.Exposition{first, second} {
			if !strings.Contains(r.Families("stall_rocketmq_up"), `stall_rocketmq_up{broker="good",broker_id="0",rocketmq_cluster="c"} 1`) {
				t.Errorf("scrape %d: %s", i+1, r.Families("stall_rocketmq_up"))
			}
		}
	})
}

// Brokers found through a name server keep their labels when the name
// server later stops answering; five bad brokers and two silent name
// servers still end the scrape within one --rocketmq.timeout.
func TestManyBadTargetsOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		good := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "")
		ns := pipeNameServer(t, &n, "10.0.0.9:9876", remoting.BrokerAddr{Cluster: "c", Name: "good", ID: 1, Addr: good.Addr()})
		ns.Delay(time.Minute)
		const timeout = time.Second
		args := []string{"--rocketmq.timeout=1s", "--rocketmq.discovery-interval=30s", "--rocketmq.namesrv=" + ns.Addr(),
			"--rocketmq.namesrv=" + pipeSilent(t, &n, "10.0.0.10:9876"), "--rocketmq.namesrv=" + pipeSilent(t, &n, "10.0.0.11:9876"),
			"--rocketmq.broker=10.0.0.5:10911", "--rocketmq.broker=10.0.0.6:10911"} // nothing listens there
		for _, a := range []string{"10.0.0.2:10911", "10.0.0.3:10911", "10.0.0.4:10911"} {
			args = append(args, "--rocketmq.broker="+pipeSilent(t, &n, a))
		}
		c := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, args...)
		for i := range 3 {
			if i == 1 {
				ns.Inject(rocketmqtest.Slow) // the name server hangs from the second round on
				collectortest.Advance(31 * time.Second)
			}
			r := collectortest.Expose(t, context.Background(), c)
			up := r.Families("stall_rocketmq_up")
			if !strings.Contains(up, "stall_rocketmq_up{broker=\"good\",broker_id=\"1\",rocketmq_cluster=\"c\"} 1\n") {
				t.Errorf("scrape %d: healthy broker missing or down:\n%s", i, up)
			}
			if n := strings.Count(up, "} 0\n"); n != 5 {
				t.Errorf("scrape %d: %d brokers up 0, want 5", i, n)
			}
			if r.Elapsed != timeout {
				t.Errorf("scrape %d took %v, want one --rocketmq.timeout (%v)", i, r.Elapsed, timeout)
			}
		}
	})
}

// A broker or name server going down is logged at warn, its recovery at
// info (collector.StateLog), never each scrape, and never with the ACL
// secret.
func TestFailuresLoggedOnTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerName=b\n")
		cr := &remoting.Credentials{AccessKey: "exporter", SecretKey: "s3cret-key"}
		b.RequireACL(cr)
		cfg := collectortest.Config("rocketmq", nil)
		h := recordLogs(&cfg)
		ns := pipeSilent(t, &n, "10.0.0.9:9876")
		opts := pipeOptions(t, &n, "--rocketmq.broker="+b.Addr(), "--rocketmq.broker=10.0.0.2:10911", "--rocketmq.namesrv="+ns,
			"--rocketmq.timeout=300ms")
		opts.Credentials = cr
		c := newScraper(cfg, opts)
		defer c.close()
		for range 3 {
			collectortest.Expose(t, context.Background(), c)
			endRound(c)
		}
		checkLogs(t, "three scrapes", h.Take(), []string{
			"WARN " + downMessages[remote.ReasonRefused] + "; stall_rocketmq_up is 0 broker=10.0.0.2:10911 reason=refused",
			"WARN rocketmq name server failed GET_BROKER_CLUSTER_INFO; the last known brokers are scraped namesrv=" + ns + " reason=timeout",
		})

		b.Inject(rocketmqtest.Reset, rocketmqtest.Reset) // the reused connection, then the one retry
		for range 3 {
			collectortest.Expose(t, context.Background(), c)
		}
		checkLogs(t, "reset, then recovery", h.Take(), []string{
			"WARN " + downMessages[remote.ReasonNetwork] + "; stall_rocketmq_up is 0 broker=" + b.Addr() + " reason=network",
			"INFO rocketmq broker answering again broker=" + b.Addr(),
		})
	})
}

// Flag values that cannot work stop the exporter at startup, each error
// naming its flag.
func TestInvalidFlags(t *testing.T) {
	valid := []string{"--rocketmq.probe.allowed-targets=10.0.0.0/24", "--rocketmq.probe.allowed-targets=*",
		"--rocketmq.probe.allowed-targets=host", "--rocketmq.probe.allowed-targets=h:10911", "--rocketmq.broker=127.0.0.1:10911"}
	if _, err := parseFlags(t, valid...).validateMetrics(); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	for _, tc := range []struct {
		name, arg, want string
	}{
		{"bad CIDR", "--rocketmq.probe.allowed-targets=10.0.0.0/99", "--rocketmq.probe.allowed-targets"},
		{"bad allowed port", "--rocketmq.probe.allowed-targets=10.0.0.1:99999", "--rocketmq.probe.allowed-targets"},
		{"broker without port", "--rocketmq.broker=nohostport", "--rocketmq.broker"},
		{"broker without host", "--rocketmq.broker=:10911", "--rocketmq.broker"},
		{"broker with a path", "--rocketmq.broker=127.0.0.1:10911/x", "--rocketmq.broker"},
		{"bad allowed host", "--rocketmq.probe.allowed-targets=bro ker", "--rocketmq.probe.allowed-targets"},
		{"namesrv bad port", "--rocketmq.namesrv=ns:port", "--rocketmq.namesrv"},
		{"frame 0", "--rocketmq.max-frame-bytes=0", "--rocketmq.max-frame-bytes"},
		{"frame huge", "--rocketmq.max-frame-bytes=2147483648", "--rocketmq.max-frame-bytes"},
		{"negative sample", "--rocketmq.sample-interval=-1s", "--rocketmq.sample-interval"},
		{"timeout 0", "--rocketmq.timeout=0s", "--rocketmq.timeout"},
		{"negative timeout", "--rocketmq.timeout=-1s", "--rocketmq.timeout"},
		{"config interval 0", "--rocketmq.config-interval=0s", "--rocketmq.config-interval"},
		{"discovery interval 0", "--rocketmq.discovery-interval=0s", "--rocketmq.discovery-interval"},
		{"negative unlisted retention", "--rocketmq.unlisted-broker-retention=-1m", "--rocketmq.unlisted-broker-retention"},
		{"missing ACL file", "--rocketmq.acl-file=/nonexistent/acl", "--rocketmq.acl-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(t, append(valid, tc.arg)...).validateMetrics()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("err = %v, want one starting with %s", err, tc.want)
			}
		})
	}
}

// The whole exposition of a scrape (4.9 master with sampled lock holds and
// the put-latency histogram, a 5.x broker, a name server) passes
// `promtool check metrics`.
func TestPromtoolCheckMetrics(t *testing.T) {
	collectortest.RequireTool(t, "promtool")
	b49 := startBroker(t, rocketmqtest.Runtime49(), rocketmqtest.Config49)
	b5 := startBroker(t, rocketmqtest.Runtime5(), config5)
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", []remoting.BrokerAddr{
		{Cluster: "DefaultCluster", Name: "broker-a", ID: 0, Addr: b49.Addr()},
		{Cluster: "c5", Name: "broker-5", ID: 0, Addr: b5.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c := newScraper(collectortest.Config("rocketmq", nil), testOptions(t, "--rocketmq.namesrv="+ns.Addr(), "--rocketmq.timeout=2s", "--rocketmq.sample-interval=1s"))
	collectortest.Expose(t, context.Background(), c)
	c.sampleOnce(context.Background())
	b49.Set("putLatency99", "12")
	r := collectortest.Expose(t, context.Background(), c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, family := range []string{"stall_rocketmq_put_latency_window_percentile_seconds", "stall_rocketmq_commitlog_lock_held_sampled_seconds_bucket",
		"stall_rocketmq_put_latency_seconds_bucket", "stall_rocketmq_broker_config_info", "stall_rocketmq_namesrv_up"} {
		if !strings.Contains(r.Text, family) {
			t.Errorf("%s missing from the scrape checked", family)
		}
	}
	collectortest.CheckMetrics(t, r.Text)
}

// A config re-read (every --rocketmq.config-interval) that fails keeps the
// directly named broker's labels and config, and does not touch its up.
func TestFailedConfigReadKeepsLabels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerClusterName=c\nbrokerName=direct\nbrokerId=2\nflushDiskType=SYNC_FLUSH\n")
		cfg := collectortest.Config("rocketmq", nil)
		c := pipeScraper(t, cfg, &n, "--rocketmq.broker="+b.Addr(), "--rocketmq.timeout=1s", "--rocketmq.config-interval=1m")
		want := `
stall_rocketmq_up{broker="direct",broker_id="2",rocketmq_cluster="c"} 1
`
		r := collectortest.Expose(t, context.Background(), c)
		r.Compare(t, want, "stall_rocketmq_up")
		collectortest.Advance(59 * time.Second)
		collectortest.Expose(t, context.Background(), c)
		if n := b.RequestCount(remoting.GetBrokerConfig); n != 1 {
			t.Errorf("%d config requests within --rocketmq.config-interval, want 1", n)
		}
		collectortest.Advance(time.Second)
		b.Inject(rocketmqtest.None, rocketmqtest.Reset, rocketmqtest.Reset) // runtime info answers, the config re-read (and its retry) is reset
		r = collectortest.Expose(t, context.Background(), c)
		r.Compare(t, want, "stall_rocketmq_up")
		if r.Err != nil {
			t.Errorf("err = %v; a failed config read is not a failed broker", r.Err)
		}
		if !strings.Contains(r.Text, `flush_disk_type="SYNC_FLUSH"`) {
			t.Errorf("last config lost:\n%s", r.Families("stall_rocketmq_broker_config_info"))
		}
		if n := b.RequestCount(remoting.GetBrokerConfig); n != 3 {
			t.Errorf("%d config requests, want 3 (the failed re-read was sent twice: reused connection, then a fresh one)", n)
		}
		// A config reply cut short is bad input from the broker: counted, and
		// the last config is still kept. The failed re-read is retried at the
		// next scrape.
		b.Inject(rocketmqtest.None, rocketmqtest.Truncated)
		before := cfg.Problems.Count()
		r = collectortest.Expose(t, context.Background(), c)
		r.Compare(t, want, "stall_rocketmq_up")
		if d := cfg.Problems.Count() - before; d != 1 {
			t.Errorf("truncated config reply: %d problems counted, want 1", d)
		}
		if !strings.Contains(r.Text, `flush_disk_type="SYNC_FLUSH"`) {
			t.Errorf("last config lost after a truncated reply:\n%s", r.Families("stall_rocketmq_broker_config_info"))
		}
	})
}
