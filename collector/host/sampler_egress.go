package host

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The sampler's transmit view: each --sampler.interval, every exported
// interface's transmitted bytes per second over the interval become one
// histogram observation, so a wire that is full for 5 s between two 15 s
// scrapes shows in the top buckets, where rate() over the scrapes sees a
// third of it. One RTM_GETSTATS dump per tick (only rtnl_link_stats64,
// about 220 bytes per interface, allocation-free once the buffers have
// grown); the names come from an RTM_GETLINK dump when an unknown
// interface appears and every netSamplerNamesEvery ticks (renames).

// samplerTxBuckets are bytes per second at the link and allowance rates
// that matter: 10 Mbit/s to 100 Gbit/s, with the 300 Mbit/s and 500 Mbit/s
// of incident 7's instance allowance between 250 Mbit/s and 1 Gbit/s.
var samplerTxBuckets = []float64{
	10e6 / 8, 50e6 / 8, 100e6 / 8, 250e6 / 8, 300e6 / 8, 500e6 / 8,
	1e9 / 8, 2.5e9 / 8, 5e9 / 8, 10e9 / 8, 25e9 / 8, 50e9 / 8, 100e9 / 8,
}

var samplerTxRate = collector.DeclareHistogram("network_transmit_bytes_per_second_sampled",
	"Bytes per second the interface transmitted in each sampler interval (Δ tx_bytes of rtnl_link_stats64, rtnetlink RTM_GETSTATS, over Δt); interfaces as the egress collector exports them.",
	samplerTxBuckets, "device")

// netSamplerNamesEvery: the interface names are read again this often
// (ticks), so a renamed interface takes its new name within a minute.
const netSamplerNamesEvery = 60

// netSampler is the sampler's transmit state, used from the sampler's
// goroutine only; the histogram vector is safe for concurrent use.
type netSampler struct {
	filter   *netDeviceFilter
	interval time.Duration
	open     func() (*rtnlConn, error) // tests open it in a namespace
	conn     *rtnlConn

	gen       uint64
	devs      map[int32]*netSamplerDevice
	cur       []netStatsSample // this tick's dump
	links     []egressLink     // the last name dump
	sinceName int              // ticks since the last name dump

	rate *prometheus.HistogramVec
}

// netSamplerDevice is one interface between ticks.
type netSamplerDevice struct {
	name     string
	exported bool
	seen     uint64 // netSampler.gen of the last dump that listed it
	valid    bool   // prev holds a baseline
	prev     uint64 // tx_bytes
	prevAt   time.Time
	obs      prometheus.Observer
}

type netStatsSample struct {
	index int32
	tx    uint64
}

func newNetSampler(filter *netDeviceFilter, interval time.Duration) *netSampler {
	return &netSampler{
		filter:   filter,
		interval: interval,
		open:     openRTNL,
		devs:     map[int32]*netSamplerDevice{},
		rate:     samplerTxRate.HistogramVec(),
	}
}

// errNetSamplerBadMessage wraps the malformed messages of a tick's dumps.
var errNetSamplerBadMessage = errors.New("malformed rtnetlink message")

// sample takes one tick's transmit counters, made at now. bad counts the
// malformed messages skipped (first describes one); err is a failed dump,
// after which the socket is reopened at the next tick and every interface
// starts from a new baseline.
func (n *netSampler) sample(now time.Time) (bad int, first, err error) {
	if n.conn == nil {
		if n.conn, err = n.open(); err != nil {
			return 0, nil, err
		}
	}
	n.cur = n.cur[:0]
	unknown := false
	_, err = n.conn.Dump(unix.RTM_GETSTATS, dumpStatsHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWSTATS {
			return nil
		}
		idx, s, perr := parseStatsMessage(body)
		if perr != nil {
			if bad++; first == nil {
				first = fmt.Errorf("%w: %w", errNetSamplerBadMessage, perr)
			}
			return nil
		}
		if n.devs[idx] == nil {
			unknown = true
		}
		n.cur = append(n.cur, netStatsSample{index: idx, tx: s.TxBytes})
		return nil
	})
	if err == nil && (unknown || n.sinceName >= netSamplerNamesEvery) {
		var b int
		var f error
		b, f, err = n.readNames()
		if bad += b; first == nil {
			first = f
		}
	}
	if err != nil {
		n.conn.Close()
		n.conn = nil
		for _, d := range n.devs {
			d.valid = false
		}
		return bad, first, err
	}
	n.sinceName++
	n.gen++
	for _, c := range n.cur {
		d := n.devs[c.index]
		if d == nil {
			continue // came after the name dump: next tick
		}
		d.seen = n.gen
		if d.exported {
			n.observe(d, c.tx, now)
		}
	}
	for idx, d := range n.devs {
		if d.seen != n.gen {
			n.drop(idx, d)
		}
	}
	return bad, first, nil
}

// observe makes the interval since d's baseline one observation and tx
// the new baseline. A counter that went down (the interface was replaced
// under the same index) or an interval that is not positive or longer
// than ten intervals only re-baselines.
func (n *netSampler) observe(d *netSamplerDevice, tx uint64, now time.Time) {
	prev, prevAt, valid := d.prev, d.prevAt, d.valid
	d.prev, d.prevAt, d.valid = tx, now, true
	if !valid || tx < prev {
		return
	}
	dt := now.Sub(prevAt)
	if dt <= 0 || dt > samplerMaxGapIntervals*n.interval {
		return
	}
	d.obs.Observe(float64(tx-prev) / dt.Seconds())
}

// readNames dumps the links for their names and decides which interfaces
// are exported, as the egress collector does (netDeviceFilter.choose).
func (n *netSampler) readNames() (bad int, first, err error) {
	n.sinceName = 0
	n.links = n.links[:0]
	seen := map[int32]bool{}
	_, err = n.conn.Dump(unix.RTM_GETLINK, dumpLinksHdr, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWLINK {
			return nil
		}
		l, perr := parseLinkMessage(body)
		if perr != nil {
			if bad++; first == nil {
				first = fmt.Errorf("%w: %w", errNetSamplerBadMessage, perr)
			}
			return nil
		}
		if seen[l.Index] {
			return nil
		}
		seen[l.Index] = true
		name := string(l.Name)
		if d := n.devs[l.Index]; d != nil && d.name == name {
			name = d.name
		}
		n.links = append(n.links, egressLink{index: l.Index, name: name})
		return nil
	})
	if err != nil {
		return bad, first, fmt.Errorf("link dump: %w", err)
	}
	n.filter.choose(n.links)
	for _, l := range n.links {
		d := n.devs[l.index]
		if d != nil && (d.name != l.name || d.exported != l.exported) {
			n.drop(l.index, d) // renamed, or now in or out of the bound
			d = nil
		}
		if d == nil {
			d = &netSamplerDevice{name: l.name, exported: l.exported}
			if d.exported {
				d.obs = n.rate.WithLabelValues(d.name)
			}
			n.devs[l.index] = d
		}
	}
	for idx, d := range n.devs {
		if !seen[idx] {
			n.drop(idx, d)
		}
	}
	return bad, first, nil
}

// drop forgets an interface and its series.
func (n *netSampler) drop(idx int32, d *netSamplerDevice) {
	if d.exported {
		n.rate.DeleteLabelValues(d.name)
	}
	delete(n.devs, idx)
}
