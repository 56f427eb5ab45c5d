package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The egress collector answers incident 7's question, "is the wire
// full?", with what leaves each interface, the root qdisc's queue in
// front of it, and the cloud allowance counters of the NIC; the sampler
// adds each second's transmit rate (sampler_egress.go). It reads the
// kernel over rtnetlink (egress_netlink.go, egress_parse.go) and the
// driver's statistics over SIOCETHTOOL (egress_ethtool.go), in the
// exporter's network namespace: in a container, the host's interfaces
// only with hostNetwork.

func init() {
	register("egress",
		"Per-interface transmit counters (rtnetlink link statistics), root qdisc backlog and drops (rtnetlink RTM_GETQDISC) and cloud NIC allowance counters (ethtool statistics of ena)",
		newEgressCollector)
}

var (
	egressTxBytes = collector.NewMetric("network_transmit_bytes_total",
		"Bytes transmitted by the interface (tx_bytes of the kernel's rtnl_link_stats64, as ip -s link shows).",
		prometheus.CounterValue, "device")
	egressTxPackets = collector.NewMetric("network_transmit_packets_total",
		"Packets transmitted by the interface (tx_packets of rtnl_link_stats64).",
		prometheus.CounterValue, "device")
	egressTxDropped = collector.NewMetric("network_transmit_dropped_total",
		"Packets the interface dropped on transmit (tx_dropped of rtnl_link_stats64; the qdisc's own drops are stall_qdisc_dropped_total).",
		prometheus.CounterValue, "device")
	egressTxErrors = collector.NewMetric("network_transmit_errors_total",
		"Transmit errors of the interface (tx_errors of rtnl_link_stats64).",
		prometheus.CounterValue, "device")

	qdiscBacklogBytes = collector.NewMetric("qdisc_backlog_bytes",
		"Bytes queued in the interface's root qdisc (backlog of TCA_STATS_QUEUE, rtnetlink RTM_GETQDISC; tc -s qdisc's backlog); for mq and mqprio the sum of the queues.",
		prometheus.GaugeValue, "device", "kind")
	qdiscBacklogPackets = collector.NewMetric("qdisc_backlog_packets",
		"Packets queued in the interface's root qdisc (qlen of TCA_STATS_QUEUE, rtnetlink RTM_GETQDISC).",
		prometheus.GaugeValue, "device", "kind")
	qdiscDropped = collector.NewMetric("qdisc_dropped_total",
		"Packets the interface's root qdisc dropped (drops of TCA_STATS_QUEUE, rtnetlink RTM_GETQDISC; a 32-bit kernel counter, wraps at 2^32).",
		prometheus.CounterValue, "device", "kind")
	qdiscOverlimits = collector.NewMetric("qdisc_overlimits_total",
		"Times the interface's root qdisc held packets back because a shaper's rate was exceeded (overlimits of TCA_STATS_QUEUE, rtnetlink RTM_GETQDISC; 32-bit, wraps at 2^32).",
		prometheus.CounterValue, "device", "kind")
	qdiscRequeues = collector.NewMetric("qdisc_requeues_total",
		"Packets the interface's root qdisc requeued because the driver's ring was full (requeues of TCA_STATS_QUEUE, rtnetlink RTM_GETQDISC; 32-bit, wraps at 2^32).",
		prometheus.CounterValue, "device", "kind")

	allowanceExceeded = collector.NewMetric("network_allowance_exceeded_packets_total",
		"Packets the cloud's virtual NIC shaped or dropped because the instance exceeded an allowance (ethtool statistics of ena: <reason>_allowance_exceeded); reason is bw_in, bw_out, pps, conntrack or linklocal. Absent for a NIC whose driver has no such counters.",
		prometheus.CounterValue, "device", "reason")
)

// The problems the egress collector counts that are not a parse error.
var (
	errLinkDumpInterrupted  = errors.New("interfaces changed during the link dump (NLM_F_DUMP_INTR)")
	errQdiscDumpInterrupted = errors.New("qdiscs changed during the qdisc dump (NLM_F_DUMP_INTR)")
	errQdiscWithoutLink     = errors.New("a qdisc's interface was not in the link dump just before (created in between)")
)

// egressCollector is the "egress" collector. Update holds mu for the
// whole scrape: the sockets and buffers are reused, so concurrent scrapes
// take turns.
type egressCollector struct {
	filter   *netDeviceFilter
	problems *collector.Problems
	// open opens the sockets, in the exporter's network namespace; tests
	// open them in one of their own.
	open func() (*rtnlConn, *ethtoolConn, error)

	mu    sync.Mutex
	rtnl  *rtnlConn
	eth   *ethtoolConn
	links []egressLink
	byIdx map[int32]int // index in links
	nics  map[int32]*egressNIC
	kinds map[string]string // qdisc kinds, interned
	vals  []uint64
}

// egressLink is one interface of a link dump.
type egressLink struct {
	index    int32
	name     string
	stats    linkStats
	hasStats bool
	exported bool
}

// egressNIC is what the collector knows of an interface's driver, kept
// between scrapes: the driver is asked once per interface (by index and
// name), the names of its statistics once per change of their number.
type egressNIC struct {
	name    string
	driver  string // "" when the device has no ethtool driver information
	nStats  int
	allow   []allowanceIndex // nil: nothing to read
	checked bool             // the statistics' names were read for nStats
}

func newEgressCollector(cfg collector.Config, s settings) *egressCollector {
	return &egressCollector{
		filter:   netDeviceFilterFor(s.netDevices),
		problems: cfg.Problems,
		open:     openEgressSockets,
		byIdx:    map[int32]int{},
		nics:     map[int32]*egressNIC{},
		kinds:    map[string]string{},
	}
}

// openEgressSockets opens the rtnetlink and ethtool sockets in the
// calling thread's network namespace.
func openEgressSockets() (*rtnlConn, *ethtoolConn, error) {
	r, err := openRTNL()
	if err != nil {
		return nil, nil, err
	}
	e, err := openEthtool()
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, e, nil
}

// Update dumps the links, then the qdiscs, then reads the allowance
// counters of the exported interfaces whose driver has them. An interface
// that disappears between the reads is left out of the later ones and
// counted (egress_device_gone); a malformed message is skipped and counted
// (egress_netlink_message). It fails when a dump fails: a socket that
// cannot be opened or a kernel error.
func (c *egressCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rtnl == nil {
		r, e, err := c.open()
		if err != nil {
			return err
		}
		c.rtnl, c.eth = r, e
	}
	if err := c.dumpLinks(); err != nil {
		return c.reset(err)
	}
	for i := range c.links {
		l := &c.links[i]
		if !l.exported || !l.hasStats {
			continue
		}
		egressTxBytes.Send(ch, float64(l.stats.TxBytes), l.name)
		egressTxPackets.Send(ch, float64(l.stats.TxPackets), l.name)
		egressTxDropped.Send(ch, float64(l.stats.TxDropped), l.name)
		egressTxErrors.Send(ch, float64(l.stats.TxErrors), l.name)
	}
	if err := c.sendQdiscs(ch); err != nil {
		return c.reset(err)
	}
	c.sendAllowances(ch)
	return nil
}

// reset closes the sockets after a failed dump, so the next scrape starts
// on fresh ones rather than behind the rest of an unread reply.
func (c *egressCollector) reset(err error) error {
	c.rtnl.Close()
	c.eth.Close()
	c.rtnl, c.eth = nil, nil
	return err
}

// dumpLinks fills c.links from an RTM_GETLINK dump and marks the ones the
// device filter exports.
func (c *egressCollector) dumpLinks() error {
	c.links = c.links[:0]
	clear(c.byIdx)
	bad, first := 0, error(nil)
	intr, err := c.rtnl.Dump(unix.RTM_GETLINK, dumpLinksHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWLINK {
			return nil
		}
		l, err := parseLinkMessage(body)
		if err != nil {
			if bad++; first == nil {
				first = err
			}
			return nil
		}
		if _, dup := c.byIdx[l.Index]; dup {
			return nil // a dump restarted by the kernel may repeat an interface
		}
		name := string(l.Name)
		if nic := c.nics[l.Index]; nic != nil && nic.name == string(l.Name) {
			name = nic.name // no allocation for a known interface
		}
		c.byIdx[l.Index] = len(c.links)
		c.links = append(c.links, egressLink{index: l.Index, name: name, stats: l.Stats, hasStats: l.HasStats})
		return nil
	})
	c.problems.Add("egress_netlink_message", bad, first)
	if intr {
		c.problems.Add("egress_dump_interrupted", 1, errLinkDumpInterrupted)
	}
	if err != nil {
		return fmt.Errorf("link dump: %w", err)
	}
	left := c.filter.choose(c.links)
	if left > 0 {
		c.problems.Add("egress_device_limit", left, fmt.Errorf("%d interfaces pass the device filter, more than --egress.max-devices=%d; the ones with the highest index are left out", c.filter.max+left, c.filter.max))
	}
	// Forget the drivers of interfaces that are gone.
	for idx := range c.nics {
		if _, ok := c.byIdx[idx]; !ok {
			delete(c.nics, idx)
		}
	}
	return nil
}

// sendQdiscs sends the root qdisc of every exported interface, from an
// RTM_GETQDISC dump. noqueue (veth, bridges, loopback, tunnels: no queue,
// so nothing to report) is left out.
func (c *egressCollector) sendQdiscs(ch chan<- prometheus.Metric) error {
	bad, first := 0, error(nil)
	gone := 0
	intr, err := c.rtnl.Dump(unix.RTM_GETQDISC, dumpQdiscsHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWQDISC {
			return nil
		}
		q, err := parseQdiscMessage(body)
		if err != nil {
			if bad++; first == nil {
				first = err
			}
			return nil
		}
		if !q.Root() || !q.HasStats || string(q.Kind) == "noqueue" {
			return nil
		}
		i, ok := c.byIdx[q.Index]
		if !ok {
			gone++ // came after the link dump
			return nil
		}
		l := &c.links[i]
		if !l.exported {
			return nil
		}
		kind := c.kind(q.Kind)
		qdiscBacklogBytes.Send(ch, float64(q.Stats.Backlog), l.name, kind)
		qdiscBacklogPackets.Send(ch, float64(q.Stats.Qlen), l.name, kind)
		qdiscDropped.Send(ch, float64(q.Stats.Drops), l.name, kind)
		qdiscOverlimits.Send(ch, float64(q.Stats.Overlimits), l.name, kind)
		qdiscRequeues.Send(ch, float64(q.Stats.Requeues), l.name, kind)
		return nil
	})
	c.problems.Add("egress_netlink_message", bad, first)
	c.problems.Add("egress_device_gone", gone, errQdiscWithoutLink)
	if intr {
		c.problems.Add("egress_dump_interrupted", 1, errQdiscDumpInterrupted)
	}
	if err != nil {
		return fmt.Errorf("qdisc dump: %w", err)
	}
	return nil
}

// kind interns a qdisc kind (the kernel's names: a bounded set).
func (c *egressCollector) kind(b []byte) string {
	if k, ok := c.kinds[string(b)]; ok {
		return k
	}
	k := collector.LabelValue(string(b), 32)
	if len(c.kinds) < 64 {
		c.kinds[k] = k
	}
	return k
}

// sendAllowances sends the allowance counters of the exported interfaces
// whose driver has them. The driver is asked once per interface; an
// interface without ethtool operations, or whose driver has no allowance
// counters, costs nothing after that.
func (c *egressCollector) sendAllowances(ch chan<- prometheus.Metric) {
	gone := 0
	var firstGone error
	for i := range c.links {
		l := &c.links[i]
		if !l.exported {
			continue
		}
		nic, err := c.nic(l)
		if err == nil && nic.allow != nil {
			c.vals, err = c.eth.Stats(l.name, nic.nStats, nic.allow, c.vals)
			if errors.Is(err, errEthtoolStatsChanged) {
				delete(c.nics, l.index) // read the driver and the names again next time
			}
			if err == nil {
				for j, a := range nic.allow {
					allowanceExceeded.Send(ch, float64(c.vals[j]), l.name, a.reason)
				}
			}
		}
		switch {
		case err == nil:
		case isNoDevice(err):
			if gone++; firstGone == nil {
				firstGone = err
			}
			delete(c.nics, l.index)
		default:
			c.problems.Add("egress_ethtool", 1, err)
		}
	}
	c.problems.Add("egress_device_gone", gone, firstGone)
}

// nic returns what is known of an interface's driver, asking the driver
// when the interface is new (or was renamed).
func (c *egressCollector) nic(l *egressLink) (*egressNIC, error) {
	if nic := c.nics[l.index]; nic != nil && nic.name == l.name {
		return nic, nil
	}
	nic := &egressNIC{name: l.name}
	driver, n, err := c.eth.Driver(l.name)
	switch {
	case err == nil:
		nic.driver, nic.nStats = driver, n
	case isNoEthtool(err):
		// No ethtool operations: nothing to read, remembered.
	default:
		return nil, err
	}
	if _, ok := allowanceStats[nic.driver]; ok && nic.nStats > 0 {
		strs, got, err := c.eth.Strings(l.name, nic.nStats)
		if err != nil && !isNoEthtool(err) {
			return nil, err
		}
		if err == nil {
			nic.allow = findAllowanceStats(nic.driver, strs, got)
		}
	}
	c.nics[l.index] = nic
	return nic, nil
}

var _ collector.Collector = (*egressCollector)(nil)
