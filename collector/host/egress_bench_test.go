package host

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
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
			cpu := processCPU()
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
			cpu := processCPU()
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
			cpu := processCPU()
			for b.Loop() {
				tick()
			}
			reportCPU(b, cpu, time.Second)
		})
	}
}
