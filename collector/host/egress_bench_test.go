package host

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// BenchmarkEgress is one scrape of the egress collector and one sampler
// tick in a network namespace with 1,000 interfaces (500 veth pairs, as
// a host with hundreds of containers has) plus loopback, with the default
// bound (64 exported) and with every interface exported. cpu-ns/op is
// the process's user+system CPU, so it includes the kernel's side of the
// dumps.
//
//	go test -run '^$' -bench Egress -benchmem ./collector/host/
func BenchmarkEgress(b *testing.B) {
	ns := newTestNetns(b, "bench")
	ns.batch(vethPairs(500))
	// The three dumps alone (the kernel's work and the message walk),
	// each message's body parsed and dropped.
	for _, d := range []struct {
		name string
		typ  uint16
		hdr  []byte
	}{{"links", unix.RTM_GETLINK, dumpLinksHdr}, {"stats", unix.RTM_GETSTATS, dumpStatsHdr}, {"qdiscs", unix.RTM_GETQDISC, dumpQdiscsHdr}} {
		b.Run("dump/"+d.name, func(b *testing.B) {
			var r *rtnlConn
			var err error
			ns.do(func() { r, err = openRTNL() })
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			b.ReportAllocs()
			cpu := collectortest.ProcessCPU()
			msgs := 0
			for b.Loop() {
				msgs = 0
				if _, err := r.Dump(d.typ, d.hdr, func(uint16, []byte) error { msgs++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu, 0)
			b.ReportMetric(float64(msgs), "messages")
		})
	}
	for _, bound := range []int{64, 4096} {
		b.Run(fmt.Sprintf("scrape/max-devices=%d", bound), func(b *testing.B) {
			c := newNetnsEgress(b, ns, fmt.Sprintf("--egress.max-devices=%d", bound))
			ch := make(chan prometheus.Metric, 16<<10)
			update := func() {
				if err := c.Update(b.Context(), ch); err != nil {
					b.Fatal(err)
				}
				for len(ch) > 0 {
					<-ch
				}
			}
			update() // sockets, buffers and driver lookups
			b.ReportAllocs()
			cpu := collectortest.ProcessCPU()
			for b.Loop() {
				update()
			}
			reportCPU(b, cpu, 15*time.Second)
		})
		b.Run(fmt.Sprintf("sampler-tick/max-devices=%d", bound), func(b *testing.B) {
			n := newNetSampler(netDeviceFilterFor(testSettings(b, fmt.Sprintf("--egress.max-devices=%d", bound)).netDevices), time.Second)
			n.links.open = netnsRTNL(ns)
			now := time.Now()
			tick := func() {
				now = now.Add(time.Second)
				if _, err := n.sample(now); err != nil {
					b.Fatal(err)
				}
			}
			tick()
			b.ReportAllocs()
			cpu := collectortest.ProcessCPU()
			for b.Loop() {
				tick()
			}
			reportCPU(b, cpu, time.Second)
		})
	}
}

// BenchmarkEthtool is the allowance read of one NIC as a scrape does it
// (ETHTOOL_GSTATS of every statistic, five values picked), on a veth with
// 64 queues: 577 statistics (ENA has about 800 on a 32-queue instance).
// names is the read of a new NIC (or one whose count changed): the names
// too. github.com/safchain/ethtool's Stats, measured beside it, does
// both on every read (docs/benchmarks.md).
//
//	go test -run '^$' -bench Ethtool -benchmem ./collector/host/
func BenchmarkEthtool(b *testing.B) {
	ns := newTestNetns(b, "ethbench")
	ns.batch([]string{"link add eb0 numtxqueues 64 numrxqueues 64 type veth peer name eb1"})
	var e *ethtoolConn
	var err error
	ns.do(func() { e, err = openEthtool() })
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	_, n, err := e.Driver("eb0")
	if err != nil {
		b.Fatal(err)
	}
	idx := []allowanceIndex{{"bw_in", 1}, {"bw_out", 2}, {"pps", 3}, {"conntrack", 4}, {"linklocal", 5}}
	var vals []uint64
	b.Run("stats", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if vals, err = e.Stats("eb0", n, idx, vals); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "statistics")
	})
	b.Run("names+stats", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := e.Driver("eb0"); err != nil {
				b.Fatal(err)
			}
			if _, _, err := e.Strings("eb0", n); err != nil {
				b.Fatal(err)
			}
			if vals, err = e.Stats("eb0", n, idx, vals); err != nil {
				b.Fatal(err)
			}
		}
	})
}
