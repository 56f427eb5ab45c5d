package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	errQdiscDumpInterrupted = errors.New("qdiscs changed during the qdisc dump (NLM_F_DUMP_INTR)")
	errQdiscWithoutLink     = errors.New("a qdisc's interface was not in the link statistics read just before (created in between)")
)

// egressCollector is the "egress" collector. Update holds mu for the
// whole scrape: the sockets and buffers are reused, so concurrent scrapes
// take turns.
type egressCollector struct {
	problems *collector.Problems
	// open opens the ethtool socket, in the exporter's network namespace
	// (links.open the rtnetlink one); tests open both in one of their own.
	open func() (*ethtoolConn, error)

	mu    sync.Mutex
	links *linkTable
	eth   *ethtoolConn
	nics  map[*netIface]*egressNIC
	kinds map[string]string // qdisc kinds, interned
	vals  []uint64
}

// egressNIC is what the collector knows of an interface's driver, kept
// between scrapes: the driver and the names of its statistics are asked
// once per interface (a renamed one is a new netIface), and again when
// the number of statistics changes.
type egressNIC struct {
	driver string // "" when the device has no ethtool driver information
	nStats int
	allow  []allowanceIndex // nil: nothing to read
}

func newEgressCollector(cfg collector.Config, s settings) *egressCollector {
	return &egressCollector{
		problems: cfg.Problems,
		open:     openEthtool,
		links:    newLinkTable(netDeviceFilterFor(s.netDevices)),
		nics:     map[*netIface]*egressNIC{},
		kinds:    map[string]string{},
	}
}

// Update reads the interfaces' transmit counters (linkTable), then the
// qdiscs, then the allowance counters of the exported interfaces whose
// driver has them. An interface that disappears between the reads is
// left out of the later ones and counted (egress_device_gone); a
// malformed message is skipped and counted (egress_netlink_message). It
// fails when a dump fails: a socket that cannot be opened or a kernel
// error.
func (c *egressCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eth == nil {
		e, err := c.open()
		if err != nil {
			return err
		}
		c.eth = e
	}
	r, err := c.links.read(time.Now())
	countLinkRead(c.problems, "egress", r)
	if err != nil {
		return err
	}
	for _, i := range c.links.list {
		if !i.exported {
			continue
		}
		egressTxBytes.Send(ch, float64(i.stats.TxBytes), i.name)
		egressTxPackets.Send(ch, float64(i.stats.TxPackets), i.name)
		egressTxDropped.Send(ch, float64(i.stats.TxDropped), i.name)
		egressTxErrors.Send(ch, float64(i.stats.TxErrors), i.name)
	}
	if err := c.sendQdiscs(ch); err != nil {
		c.links.conn.Close()
		c.links.conn = nil // reopened at the next scrape
		return err
	}
	c.sendAllowances(ch)
	return nil
}

// countLinkRead counts the problems of one linkTable read under kinds
// named <prefix>_… (built only when there is one: the sampler's tick
// allocates nothing).
func countLinkRead(p *collector.Problems, prefix string, r linkRead) {
	if r.bad > 0 {
		p.Add(prefix+"_netlink_message", r.bad, r.first)
	}
	if r.interrupted {
		p.Add(prefix+"_dump_interrupted", 1, errLinkDumpInterrupted)
	}
	if r.left > 0 {
		p.Add(prefix+"_device_limit", r.left, errDeviceLimit)
	}
}

// errDeviceLimit is the problem of interfaces left out by the bound.
var errDeviceLimit = errors.New("more interfaces pass the device filter than --egress.max-devices; the ones with the highest index are left out")

// sendQdiscs sends the root qdisc of every exported interface, from an
// RTM_GETQDISC dump. noqueue (veth, bridges, loopback, tunnels: no queue,
// so nothing to report) is left out.
func (c *egressCollector) sendQdiscs(ch chan<- prometheus.Metric) error {
	var r linkRead
	gone := 0
	intr, err := c.links.conn.Dump(unix.RTM_GETQDISC, dumpQdiscsHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWQDISC {
			return nil
		}
		q, err := parseQdiscMessage(body)
		if err != nil {
			r.addBad(err)
			return nil
		}
		if !q.Root() || !q.HasStats || string(q.Kind) == "noqueue" {
			return nil
		}
		i := c.links.byIdx[q.Index]
		if i == nil || i.seen != c.links.gen {
			gone++ // came after the link statistics
			return nil
		}
		if !i.exported {
			return nil
		}
		kind := c.kind(q.Kind)
		qdiscBacklogBytes.Send(ch, float64(q.Stats.Backlog), i.name, kind)
		qdiscBacklogPackets.Send(ch, float64(q.Stats.Qlen), i.name, kind)
		qdiscDropped.Send(ch, float64(q.Stats.Drops), i.name, kind)
		qdiscOverlimits.Send(ch, float64(q.Stats.Overlimits), i.name, kind)
		qdiscRequeues.Send(ch, float64(q.Stats.Requeues), i.name, kind)
		return nil
	})
	c.problems.Add("egress_netlink_message", r.bad, r.first)
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
	for i := range c.nics {
		if i.seen != c.links.gen {
			delete(c.nics, i) // gone, renamed or replaced
		}
	}
	gone := 0
	var firstGone error
	for _, i := range c.links.list {
		if !i.exported {
			continue
		}
		nic, err := c.nic(i)
		if err == nil && nic.allow != nil {
			c.vals, err = c.eth.Stats(i.name, nic.nStats, nic.allow, c.vals)
			if errors.Is(err, errEthtoolStatsChanged) {
				delete(c.nics, i) // read the driver and the names again next time
			}
			if err == nil {
				for j, a := range nic.allow {
					allowanceExceeded.Send(ch, float64(c.vals[j]), i.name, a.reason)
				}
			}
		}
		switch {
		case err == nil:
		case isNoDevice(err):
			if gone++; firstGone == nil {
				firstGone = err
			}
			delete(c.nics, i)
		default:
			c.problems.Add("egress_ethtool", 1, err)
		}
	}
	c.problems.Add("egress_device_gone", gone, firstGone)
}

// nic returns what is known of an interface's driver, asking the driver
// when the interface is new.
func (c *egressCollector) nic(i *netIface) (*egressNIC, error) {
	if nic := c.nics[i]; nic != nil {
		return nic, nil
	}
	nic := &egressNIC{}
	driver, n, err := c.eth.Driver(i.name)
	switch {
	case err == nil:
		nic.driver, nic.nStats = driver, n
	case isNoEthtool(err):
		// No ethtool operations: nothing to read, remembered.
	default:
		return nil, err
	}
	if _, ok := allowanceStats[nic.driver]; ok && nic.nStats > 0 {
		strs, got, err := c.eth.Strings(i.name, nic.nStats)
		if err != nil && !isNoEthtool(err) {
			return nil, err
		}
		if err == nil {
			nic.allow = findAllowanceStats(nic.driver, strs, got)
		}
	}
	c.nics[i] = nic
	return nic, nil
}

var _ collector.Collector = (*egressCollector)(nil)
