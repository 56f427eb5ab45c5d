package host

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The sampler's transmit view: each --sampler.interval, every exported
// interface's transmitted bytes per second over the interval become one
// histogram observation, so a wire that is full for 5 s between two 15 s
// scrapes shows in the top buckets, where rate() over the scrapes sees a
// third of it. Each tick is one read of a linkTable of the sampler's own
// (egress_links.go): one RTM_GETSTATS dump, allocation-free in the steady
// state.

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

// netSampler is the sampler's transmit state, used from the sampler's
// goroutine only; the histogram vector is safe for concurrent use.
type netSampler struct {
	interval time.Duration
	links    *linkTable // its own socket: the scrape's is another goroutine's
	devs     map[*netIface]*netSamplerDevice
	rate     *prometheus.HistogramVec
}

// netSamplerDevice is one exported interface between ticks.
type netSamplerDevice struct {
	valid  bool // prev holds a baseline
	prev   uint64
	prevAt time.Time
	obs    prometheus.Observer
}

func newNetSampler(filter *netDeviceFilter, interval time.Duration) *netSampler {
	return &netSampler{
		interval: interval,
		links:    newLinkTable(filter),
		devs:     map[*netIface]*netSamplerDevice{},
		rate:     samplerTxRate.HistogramVec(),
	}
}

// sample takes one tick's transmit counters, made at now. err is a failed
// dump, after which every interface starts from a new baseline.
func (n *netSampler) sample(now time.Time) (linkRead, error) {
	r, err := n.links.read(now)
	if err != nil {
		for _, d := range n.devs {
			d.valid = false
		}
		return r, err
	}
	for _, i := range n.links.list {
		if !i.exported {
			continue
		}
		d := n.devs[i]
		if d == nil {
			d = &netSamplerDevice{obs: n.rate.WithLabelValues(i.name)}
			n.devs[i] = d
		}
		n.observe(d, i.stats.TxBytes, now)
	}
	// Interfaces gone, renamed or out of the bound: their series go.
	for i := range n.devs {
		if i.seen != n.links.gen || n.links.byIdx[i.index] != i {
			n.rate.DeleteLabelValues(i.name)
			delete(n.devs, i)
		}
	}
	return r, nil
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
