package host

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// newNetnsEgress builds an egress collector with the given flags whose
// sockets are opened in ns.
func newNetnsEgress(t testing.TB, ns *testNetns, args ...string) *egressCollector {
	t.Helper()
	c := newEgressCollector(collectortest.Config("egress", nil), testSettings(t, args...))
	c.open = func() (e *ethtoolConn, err error) {
		ns.do(func() { e, err = openEthtool() })
		return e, err
	}
	c.links.open = netnsRTNL(ns)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.eth != nil {
			c.eth.Close()
		}
		if c.links.conn != nil {
			c.links.conn.Close()
		}
	})
	return c
}

// netnsRTNL opens rtnetlink sockets in ns.
func netnsRTNL(ns *testNetns) func() (*rtnlConn, error) {
	return func() (r *rtnlConn, err error) {
		ns.do(func() { r, err = openRTNL() })
		return r, err
	}
}

// TestEgressNetns checks the collector against ip -s link and tc -s qdisc
// on a veth shaped by tbf at 8 Mbit/s that a UDP flood overruns: the
// qdisc must back up, drop and count overlimits, and once the flood stops
// every counter must equal what the tools read around the same scrape.
func TestEgressNetns(t *testing.T) {
	t.Parallel()
	p := egressNetns(t)
	ns, dev := p.ns, p.dev
	c := newNetnsEgress(t, ns)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	udpFlood(t, ns, p.peerAddr, stop, &wg)
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
	// A kernel before 4.7 (no RTM_GETSTATS) gets the same counters from
	// the link dump.
	c.links.linkOnly = true
	old := scrape(t, c)
	if old.Err != nil {
		t.Fatal(old.Err)
	}
	for name := range want {
		if got, was := old.Must(t, name, "device", dev), res.Must(t, name, "device", dev); got != was {
			t.Errorf("%s from the link dump: %v, from RTM_GETSTATS: %v", name, got, was)
		}
	}
	if got := ns.linkStats(dev); got != link {
		t.Fatalf("counters moved during the test: %+v → %+v", link, got)
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

// TestEthtoolVeth runs the real SIOCETHTOOL path on a veth, whose driver
// has statistics though no allowance counters: with a table entry for
// veth made for the test (peer_ifindex read as bw_out), the collector
// must export exactly the peer's interface index, which ip link shows.
// Not parallel: it changes allowanceStats, which the parallel tests read.
func TestEthtoolVeth(t *testing.T) {
	p := egressNetns(t)
	var e *ethtoolConn
	var err error
	p.ns.do(func() { e, err = openEthtool() })
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	driver, n, err := e.Driver(p.dev)
	if err != nil || driver != "veth" || n == 0 {
		t.Fatalf("ETHTOOL_GDRVINFO %s: driver %q, %d statistics, %v", p.dev, driver, n, err)
	}
	if _, _, err := e.Driver("stallnosuch0"); !isNoDevice(err) {
		t.Errorf("an interface that does not exist: %v, want ENODEV", err)
	}

	allowanceStats["veth"] = map[string]string{"peer_ifindex": "bw_out"}
	t.Cleanup(func() { delete(allowanceStats, "veth") })
	c := newNetnsEgress(t, p.ns)
	res := scrape(t, c)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := p.peer.ifindex(p.peerDev)
	if got := res.Must(t, "stall_network_allowance_exceeded_packets_total", "device", p.dev, "reason", "bw_out"); got != float64(want) {
		t.Errorf("peer_ifindex of %s read as %v, ip link says %s has index %d", p.dev, got, p.peerDev, want)
	}
	if n := c.problems.Count(); n != 0 {
		t.Errorf("%d problems", n)
	}
	// The whole exposition, allowance series included, passes promtool's
	// lint and a pedantic registry.
	exp := collectortest.Expose(t, t.Context(), c)
	if exp.Err != nil {
		t.Fatal(exp.Err)
	}
	collectortest.CheckMetrics(t, exp.Text)
}

// TestEgressMQ: a multiqueue interface under mq is one series set, the
// root's (the kernel sums the queues' qdiscs into it), kind mq; its
// per-queue children are not exported.
func TestEgressMQ(t *testing.T) {
	t.Parallel()
	collectortest.RequireTool(t, "tc")
	ns := newTestNetns(t, "q")
	ns.batch([]string{"link add stallmq0 numtxqueues 4 type veth peer name stallmq1 numtxqueues 4", "link set stallmq0 up", "link set stallmq1 up"})
	ns.run("tc", "-n", ns.name, "qdisc", "add", "dev", "stallmq0", "root", "handle", "1:", "mq")
	c := newNetnsEgress(t, ns)
	res := scrape(t, c)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	q := ns.rootQdisc("stallmq0")
	if q.Kind != "mq" {
		t.Fatalf("tc shows root %q on stallmq0", q.Kind)
	}
	if got := res.Must(t, "stall_qdisc_backlog_bytes", "device", "stallmq0", "kind", "mq"); got != float64(q.Backlog) {
		t.Errorf("mq backlog %v, tc says %d", got, q.Backlog)
	}
	n := 0
	for _, m := range res.Metrics {
		if m.Name == "stall_qdisc_dropped_total" && m.Labels["device"] == "stallmq0" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d qdisc series sets for stallmq0, want 1 (the mq root)", n)
	}
}

// TestEgressManyInterfaces: 1,000 interfaces (500 veth pairs, as on a
// host with hundreds of containers) are cut to --egress.max-devices, the
// lowest indexes, and the rest counted; the sampler exports the same
// set.
func TestEgressManyInterfaces(t *testing.T) {
	t.Parallel()
	ns := newTestNetns(t, "m")
	ns.batch(vethPairs(500))
	c := newNetnsEgress(t, ns, "--egress.max-devices=50")
	res := scrape(t, c)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	exported := map[string]bool{}
	for _, m := range res.Metrics {
		if m.Name == "stall_network_transmit_bytes_total" {
			exported[m.Labels["device"]] = true
		}
	}
	if len(exported) != 50 {
		t.Fatalf("%d interfaces exported, want 50", len(exported))
	}
	// lo (index 1) is excluded; the 50 after it are va0, vb0, … va24, vb24.
	for i := range 25 {
		for _, d := range []string{fmt.Sprintf("va%d", i), fmt.Sprintf("vb%d", i)} {
			if !exported[d] {
				t.Errorf("%s (among the 50 lowest indexes) not exported", d)
			}
		}
	}
	if got, want := c.problems.Count(), uint64(1000-50); got != want {
		t.Errorf("%d problems counted, want %d (the interfaces left out)", got, want)
	}

	n := newNetSampler(c.links.filter, time.Second)
	n.links.open = netnsRTNL(ns)
	t0 := time.Now()
	for i := range 2 {
		if r, err := n.sample(t0.Add(time.Duration(i) * time.Second)); err != nil || r.bad != 0 {
			t.Fatalf("sampler tick %d: %v (%+v)", i, err, r)
		}
	}
	if got := countSeries(n.rate); got != 50 {
		t.Errorf("sampler: %d interfaces, want 50", got)
	}
}

// vethPairs is the ip -batch commands for n veth pairs vaI/vbI, up.
func vethPairs(n int) []string {
	var cmds []string
	for i := range n {
		cmds = append(cmds, fmt.Sprintf("link add va%d type veth peer name vb%d", i, i),
			fmt.Sprintf("link set va%d up", i), fmt.Sprintf("link set vb%d up", i))
	}
	return cmds
}

// TestEgressInterfaceGone: an interface deleted between the link dump and
// the ethtool read, and one created (with a qdisc) between the link dump
// and the qdisc dump, are counted, not exported and not an error.
func TestEgressInterfaceGone(t *testing.T) {
	t.Parallel()
	p := egressNetns(t)
	c := newNetnsEgress(t, p.ns)
	if res := scrape(t, c); res.Err != nil { // opens the sockets
		t.Fatal(res.Err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.links.read(time.Now()); err != nil {
		t.Fatal(err)
	}
	clear(c.nics) // the drivers are asked again, as for interfaces new since the last scrape
	p.ns.batch([]string{"link del " + p.dev, "link add stallnew0 type veth peer name stallnew1"})
	p.ns.run("tc", "-n", p.ns.name, "qdisc", "add", "dev", "stallnew0", "root", "tbf", "rate", "1mbit", "burst", "10kb", "limit", "10kb")
	ch := make(chan prometheus.Metric, 1000)
	if err := c.sendQdiscs(ch); err != nil {
		t.Fatal(err)
	}
	c.sendAllowances(ch)
	close(ch)
	for m := range ch {
		if d := m.Desc().String(); strings.Contains(d, "qdisc") {
			var pb dto.Metric
			_ = m.Write(&pb)
			t.Errorf("qdisc series of an interface not in the link dump: %v", pb.GetLabel())
		}
	}
	// One qdisc without its link (stallnew0's tbf), one driver read of a
	// deleted interface (p.dev, ENODEV).
	if got := c.problems.Count(); got != 2 {
		t.Errorf("%d problems counted, want 2", got)
	}
}

// TestEgressSamplerNetns: the sampler's observation is the bytes ip -s
// link counted between two ticks over the time between them. Not
// parallel: testing.AllocsPerRun refuses to run beside other tests.
func TestEgressSamplerNetns(t *testing.T) {
	p := egressNetns(t)
	n := newNetSampler(netDeviceFilterFor(testSettings(t).netDevices), time.Second)
	n.links.open = netnsRTNL(p.ns)
	// Unconnected, so the peer's port-unreachable answers are not write
	// errors.
	var conn net.PacketConn
	p.ns.do(func() {
		var err error
		if conn, err = net.ListenPacket("udp4", ":0"); err != nil {
			t.Fatal(err)
		}
	})
	defer conn.Close()
	peer, err := net.ResolveUDPAddr("udp4", p.peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	// A baseline taken while the counter holds still.
	t0 := time.Now()
	var before uint64
	collectortest.WaitFor(t, 10*time.Second, "a counter that holds still around the first tick", func() error {
		before = p.ns.linkStats(p.dev).Stats64.Tx.Bytes
		if _, err := n.sample(t0); err != nil {
			return err
		}
		if after := p.ns.linkStats(p.dev).Stats64.Tx.Bytes; after != before {
			return fmt.Errorf("%d → %d", before, after)
		}
		return nil
	})
	for range 20 { // 24 kB: within the tbf's limit, all sent
		if _, err := conn.WriteTo(make([]byte, 1200), peer); err != nil {
			t.Fatal(err)
		}
	}
	collectortest.WaitFor(t, 10*time.Second, "the tbf qdisc to drain", func() error {
		if q := p.ns.rootQdisc(p.dev); q.Backlog != 0 {
			return fmt.Errorf("backlog %d", q.Backlog)
		}
		return nil
	})
	after := p.ns.linkStats(p.dev).Stats64.Tx.Bytes
	if _, err := n.sample(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if again := p.ns.linkStats(p.dev).Stats64.Tx.Bytes; again != after {
		t.Fatalf("traffic besides the test's: %d → %d", after, again)
	}
	if after-before < 20*1200 {
		t.Fatalf("only %d bytes sent", after-before)
	}
	var m dto.Metric
	if err := n.rate.WithLabelValues(p.dev).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != float64(after-before)/2 {
		t.Errorf("observations %d, sum %v; want 1 of %d bytes / 2 s", h.GetSampleCount(), h.GetSampleSum(), after-before)
	}
	if got := countSeries(n.rate); got != 1 {
		t.Errorf("%d interfaces sampled, want 1 (lo excluded)", got)
	}
	// The steady state (no new interface, no name refresh due) allocates
	// nothing: the sampler runs it every second.
	now := t0.Add(2 * time.Second)
	if a := testing.AllocsPerRun(10, func() {
		now = now.Add(time.Second)
		if _, err := n.sample(now); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("%v allocations per tick", a)
	}
	// A renamed interface keeps its index: at the next name dump (once a
	// minute) its series goes and one of the new name comes.
	p.ns.batch([]string{"link set " + p.dev + " down", "link set " + p.dev + " name stallren0", "link set stallren0 up"})
	if _, err := n.sample(now.Add(linkNamesEvery)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range n.devs {
		names = append(names, i.name)
	}
	if got := countSeries(n.rate); got != 1 || len(names) != 1 || names[0] != "stallren0" {
		t.Errorf("after the rename: %d series, interfaces %v; want stallren0 alone", got, names)
	}
}

// countSeries is the number of series c collects.
func countSeries(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
