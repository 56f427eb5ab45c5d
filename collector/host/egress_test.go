package host

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// newNetnsEgress builds an egress collector with the given flags whose
// sockets are opened in ns.
func newNetnsEgress(t testing.TB, ns *testNetns, args ...string) *egressCollector {
	t.Helper()
	c := newEgressCollector(collectortest.Config("egress", nil), testSettings(t, args...))
	var r *rtnlConn
	var e *ethtoolConn
	var err error
	ns.do(func() { r, e, err = openEgressSockets() })
	if err != nil {
		t.Fatal(err)
	}
	c.open = func() (*rtnlConn, *ethtoolConn, error) { return r, e, nil }
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.rtnl != nil {
			c.reset(nil)
		}
	})
	return c
}

// TestEgressNetns checks the collector against ip -s link and tc -s qdisc
// on a veth shaped by tbf at 8 Mbit/s that a UDP flood overruns: the
// qdisc must back up, drop and count overlimits, and once the flood stops
// every counter must equal what the tools read around the same scrape.
func TestEgressNetns(t *testing.T) {
	t.Parallel()
	ns, dev, peer := egressNetns(t)
	c := newNetnsEgress(t, ns)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	udpFlood(t, ns, peer, stop, &wg)
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
		wg.Wait()
	}()
	// While the flood runs, the tbf queue holds packets: a backlog seen
	// by the collector.
	collectortest.WaitFor(t, 10*time.Second, "a backlog in the tbf qdisc", func() error {
		r := scrape(t, c)
		if r.Err != nil {
			return r.Err
		}
		if v := r.Must(t, "stall_qdisc_backlog_bytes", "device", dev, "kind", "tbf"); v == 0 {
			return fmt.Errorf("backlog %v bytes", v)
		}
		if v := r.Must(t, "stall_qdisc_backlog_packets", "device", dev, "kind", "tbf"); v == 0 {
			return fmt.Errorf("backlog %v packets", v)
		}
		return nil
	})
	close(stop)
	stopped = true
	wg.Wait()
	// The queue drains in ~30 ms (30 kB at 8 Mbit/s); then nothing else
	// leaves the interface, and the counters hold still.
	collectortest.WaitFor(t, 10*time.Second, "the tbf qdisc to drain", func() error {
		if q := ns.rootQdisc(dev); q.Backlog != 0 {
			return fmt.Errorf("backlog %d", q.Backlog)
		}
		return nil
	})
	var res collectortest.Result
	var link ipLinkStats
	var q tcQdisc
	collectortest.WaitFor(t, 10*time.Second, "counters that hold still around a scrape", func() error {
		link, q = ns.linkStats(dev), ns.rootQdisc(dev)
		res = scrape(t, c)
		if link2, q2 := ns.linkStats(dev), ns.rootQdisc(dev); link2 != link || q2 != q {
			return fmt.Errorf("counters moved: %+v %+v → %+v %+v", link, q, link2, q2)
		}
		return res.Err
	})
	if q.Kind != "tbf" || q.Drops == 0 || q.Overlimits == 0 {
		t.Fatalf("the flood did not overrun the shaper: %+v", q)
	}
	if link.Stats64.Tx.Packets < 20 {
		t.Fatalf("only %d packets left %s", link.Stats64.Tx.Packets, dev)
	}
	want := map[string]uint64{
		"stall_network_transmit_bytes_total":   link.Stats64.Tx.Bytes,
		"stall_network_transmit_packets_total": link.Stats64.Tx.Packets,
		"stall_network_transmit_errors_total":  link.Stats64.Tx.Errors,
		"stall_network_transmit_dropped_total": link.Stats64.Tx.Dropped,
	}
	for name, v := range want {
		if got := res.Must(t, name, "device", dev); got != float64(v) {
			t.Errorf("%s{device=%q} = %v, ip -s link says %d", name, dev, got, v)
		}
	}
	wantQ := map[string]uint64{
		"stall_qdisc_backlog_bytes":    q.Backlog,
		"stall_qdisc_backlog_packets":  q.Qlen,
		"stall_qdisc_dropped_total":    q.Drops,
		"stall_qdisc_overlimits_total": q.Overlimits,
		"stall_qdisc_requeues_total":   q.Requeues,
	}
	for name, v := range wantQ {
		if got := res.Must(t, name, "device", dev, "kind", "tbf"); got != float64(v) {
			t.Errorf("%s{device=%q,kind=tbf} = %v, tc -s qdisc says %d", name, dev, got, v)
		}
	}
	// Loopback is excluded by default; veth has ethtool statistics but no
	// allowance counters, so no allowance series.
	for _, m := range res.Metrics {
		if m.Labels["device"] == "lo" {
			t.Errorf("loopback exported: %s", m.Name)
		}
		if m.Name == "stall_network_allowance_exceeded_packets_total" {
			t.Errorf("allowance series for a veth: %v", m.Labels)
		}
	}
	if n := c.problems.Count(); n != 0 {
		t.Errorf("%d problems counted on a healthy namespace", n)
	}
}

var _ collector.Collector = (*egressCollector)(nil)
