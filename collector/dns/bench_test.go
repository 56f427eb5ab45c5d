package dns

import (
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// BenchmarkHandle measures the per-packet path — parse IP/UDP, parse the DNS
// header and question, match against the pending table, count, observe the
// latency — on a steady stream of query/response pairs (PTR queries to two
// resolvers, one NXDOMAIN in four), one packet per op. It reports packets/s
// on one core by wall time, and by the process's CPU time (getrusage), which
// is steadier on a shared machine; allocs/op must be 0.
func BenchmarkHandle(b *testing.B) {
	const pairs = 4096
	tr := newTestTracker(16384, 8, 5*time.Second)
	pkts := make([][]byte, 0, 2*pairs)
	for i := range pairs {
		name := "9.2.0.192.in-addr.arpa."
		client, server := "192.0.2.10", []string{"192.0.2.53", "fd00::53"}[i%2]
		if i%2 == 1 {
			client = "fd00::10"
		}
		port, id := uint16(10000+i), uint16(i*7)
		rc := dnsmessage.RCodeSuccess
		if i%4 == 0 {
			rc = dnsmessage.RCodeNameError
		}
		pkts = append(pkts,
			udpPacket(client, port, server, 53, query(b, id, name, dnsmessage.TypePTR)),
			udpPacket(server, 53, client, port, response(b, id, name, dnsmessage.TypePTR, rc, false)))
	}
	ts := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		ts += 1000
		tr.handle(pkts[i%len(pkts)], ts)
		if i%4096 == 0 {
			tr.expire(ts)
		}
	}
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if tr.problems.Count() != 0 {
		b.Fatalf("%d parse problems", tr.problems.Count())
	}
}

// processCPU is the user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
