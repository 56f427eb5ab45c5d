package rocketmq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/probecache"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// testProbe is the /probe module with the flag defaults and the
// allowlist entries allow.
func testProbe(t *testing.T, allow ...string) probeModule {
	t.Helper()
	a, err := remote.ParseAllowlist(allow, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return probeModule{options{Timeout: 3 * time.Second, SampleInterval: time.Second, ConfigInterval: 5 * time.Minute,
		DiscoveryInterval: 30 * time.Second, UnlistedRetention: time.Hour, MaxFrame: defaultMaxFrame, Allow: a}}
}

// probeTarget asks m for target and builds its collector with cfg, as the
// exporter does for a target it does not have yet; the collector is
// closed when the test ends.
func probeTarget(t *testing.T, m probeModule, cfg collector.Config, target string) (string, probeCollector, error) {
	t.Helper()
	key, build, err := m.Target(target)
	if err != nil {
		return "", probeCollector{}, err
	}
	c := build(cfg).(probeCollector)
	t.Cleanup(func() { c.Close() })
	return key, c, nil
}

// /probe refuses malformed targets before anything else (400, no
// connection), matches the allowlist on the normalised target, and gives
// every spelling of one broker one key, which is also the address dialled
// and the broker label.
func TestProbeTargets(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "")
	_, port, _ := strings.Cut(b.Addr(), ":")
	m := testProbe(t, "127.0.0.1/32")
	for _, bad := range []string{
		b.Addr() + "/x", b.Addr() + "?a=b", ":0", ":-1", ":99999", b.Addr() + "\x00", "127.0.0.1:99999",
	} {
		key, _, err := m.Target(bad)
		if err == nil || errors.Is(err, collector.ErrTargetNotAllowed) {
			t.Errorf("Target(%q) = %q, %v; want a bad-target error", bad, key, err)
		}
		if err != nil && strings.ContainsRune(err.Error(), 0) {
			t.Errorf("Target(%q): the error carries the NUL: %q", bad, err)
		}
	}
	if n := b.Accepted(); n != 0 {
		t.Errorf("%d connections to the broker for refused targets", n)
	}
	for _, spelling := range []string{"[::ffff:127.0.0.1]:" + port, "127.0.0.1:0" + port} {
		if key, _, err := m.Target(spelling); err != nil || key != b.Addr() {
			t.Errorf("Target(%q) = %q, %v; want the key %s", spelling, key, err, b.Addr())
		}
	}
	_, c, err := probeTarget(t, m, collectortest.Config("rocketmq", nil), "127.0.0.1:0"+port)
	if err != nil {
		t.Fatal(err)
	}
	collectortest.Compare(t, c, `
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="`+b.Addr()+`",broker_id="",rocketmq_cluster="",version="V4_9_7"} 1
stall_rocketmq_up{broker="`+b.Addr()+`",broker_id="",rocketmq_cluster=""} 1
`, "stall_rocketmq_up", "stall_rocketmq_broker_info")
}

// A probed broker is labelled from its config, and the module signs its
// requests with the ACL file's credentials (read once, when the module is
// built); a target outside the allowlist is refused with
// ErrTargetNotAllowed.
func TestProbe(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=probed\nbrokerClusterName=c\nbrokerId=0\n")
	cr := &remoting.Credentials{AccessKey: "exporter", SecretKey: "s3cret"}
	b.RequireACL(cr)
	m := testProbe(t, "127.0.0.1")
	m.opts.Credentials = cr
	if _, _, err := m.Target("10.9.9.9:10911"); !errors.Is(err, collector.ErrTargetNotAllowed) {
		t.Errorf("refused target: err = %v", err)
	}
	_, c, err := probeTarget(t, m, collectortest.Config("rocketmq", nil), b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	collectortest.Compare(t, c, `
stall_rocketmq_up{broker="probed",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
}

// Under a probe cache with the exporter's limits (main's probeLimits: 64
// connections), every kept broker keeps its state but only the 64 most
// recently probed keep their connection: a broker whose connection was
// closed (CloseIdle) is the same collector at its next probe, dials again
// and does not read its config again. Under the default flags a frame over
// --rocketmq.max-frame-bytes (4 MiB) is refused and counted.
func TestProbeBoundsConnections(t *testing.T) {
	const maxConns = 64
	m := testProbe(t, "127.0.0.1/32")
	cache := probecache.New[string, probeCollector](probecache.Limits{
		MaxTargets: 1000, Idle: 10 * time.Minute, MaxConns: maxConns, ConnIdle: 2 * time.Minute})
	cfg := collectortest.Config("rocketmq", nil)
	probe := func(addr string) probeCollector {
		t.Helper()
		key, build, err := m.Target(addr)
		if err != nil {
			t.Fatal(err)
		}
		return cache.Get(key, func() probeCollector {
			c := build(cfg).(probeCollector)
			t.Cleanup(func() { c.Close() })
			return c
		})
	}

	brokers := make([]*rocketmqtest.Broker, maxConns+6)
	var first probeCollector
	for i := range brokers {
		brokers[i] = startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
		c := probe(brokers[i].Addr())
		if got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_up"); !strings.HasSuffix(got, "} 1\n") {
			t.Fatalf("broker %d: %q, want up 1", i, got)
		}
		if i == 0 {
			first = c
		}
	}
	open := func() int {
		n := 0
		for _, b := range brokers {
			n += b.Open()
		}
		return n
	}
	// The brokers see the closes a moment after the cache makes them.
	collectortest.WaitFor(t, 5*time.Second, "the connections beyond the 64 most recent to close", func() error {
		if n := open(); n > maxConns {
			return errors.New("more than 64 connections open")
		}
		return nil
	})
	if n := open(); n != maxConns {
		t.Errorf("%d connections open after %d brokers were probed, want %d", n, len(brokers), maxConns)
	}
	if n := brokers[0].Open(); n != 0 {
		t.Errorf("the least recently probed broker has %d connections open, want 0", n)
	}

	if c := probe(brokers[0].Addr()); c != first {
		t.Error("the broker that lost its connection is a new collector: its state is gone")
	}
	if got := collectortest.Expose(t, context.Background(), first).Families("stall_rocketmq_up"); !strings.HasSuffix(got, "} 1\n") {
		t.Errorf("after its connection was closed: %q, want up 1", got)
	}
	if n := brokers[0].Accepted(); n != 2 {
		t.Errorf("%d connections accepted by the first broker, want 2 (one redial)", n)
	}
	if n := brokers[0].RequestCount(remoting.GetBrokerConfig); n != 1 {
		t.Errorf("config read %d times, want once: the cached config is kept", n)
	}

	// 16 MiB is within the broker's own limit, over the default 4 MiB.
	brokers[1].Inject(rocketmqtest.Announce)
	c := probe(brokers[1].Addr())
	before := cfg.Problems.Count()
	got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_down_reason")
	if !strings.Contains(got, `reason="reply_too_large",rocketmq_cluster=""} 1`) {
		t.Errorf("a 16 MiB frame: %q, want reason reply_too_large", got)
	}
	if d := cfg.Problems.Count() - before; d != 1 {
		t.Errorf("a 16 MiB frame: %d problems counted, want 1", d)
	}
}
