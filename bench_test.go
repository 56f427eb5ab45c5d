package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// benchScrape measures one full scrape of the host collectors (vmstat,
// sysctl, zoneinfo, meminfo, pressure, diskstats) as /metrics runs them
// (each through its entry, grouped and gathered as a request does), on
// the given procfs/sysfs, without the HTTP and encoding of a request.
func benchScrape(b *testing.B, procfs, sysfs string, only []string) {
	s := newScraper(nil, scrapeTimeout{limit: 10 * time.Second}, slog.New(slog.DiscardHandler))
	entries := newEntries(hostBuilt(b, procfs, sysfs, only...), slog.New(slog.DiscardHandler))
	b.ReportAllocs()
	for b.Loop() {
		_, done, err := s.gather(context.Background(), entries)
		if err != nil {
			b.Fatal(err)
		}
		done()
	}
}

var hostCollectorList = []string{"vmstat", "sysctl", "zoneinfo", "meminfo", "pressure", "diskstats"}

// BenchmarkScrapeRealProc is one host scrape on this machine's /proc.
func BenchmarkScrapeRealProc(b *testing.B) { benchScrape(b, "/proc", "/sys", hostCollectorList) }

// BenchmarkScrapeFixture is one host scrape on the Linux 6.8 fixture, for
// numbers that do not depend on the machine's device count.
func BenchmarkScrapeFixture(b *testing.B) {
	benchScrape(b, "collector/host/fixtures/linux-6.8/proc", "collector/host/fixtures/linux-6.8/sys", hostCollectorList)
}

// BenchmarkCollectorRealProc is each host collector alone on /proc, and
// hungtask (a default collector outside the node_exporter comparison).
func BenchmarkCollectorRealProc(b *testing.B) {
	for _, c := range append(hostCollectorList[:len(hostCollectorList):len(hostCollectorList)], "hungtask") {
		b.Run(c, func(b *testing.B) { benchScrape(b, "/proc", "/sys", []string{c}) })
	}
}

// prometheusHeaders are the request headers Prometheus 2.x sends with a
// scrape; gzip selects whether Accept-Encoding asks for compression.
func prometheusRequest(gzip bool) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	return req
}

// discardResponse is a reusable http.ResponseWriter that throws the body
// away, so the benchmark measures the handler and not a recorder's buffer.
type discardResponse struct {
	h    http.Header
	code int
	n    int
}

func (d *discardResponse) Header() http.Header  { return d.h }
func (d *discardResponse) WriteHeader(code int) { d.code = code }
func (d *discardResponse) Write(p []byte) (int, error) {
	d.n += len(p)
	return len(p), nil
}

// benchHandler serves req with h b.N times and reports the process CPU per
// scrape from getrusage (GC and the kernel's side of reading /proc
// included) and the response size.
func benchHandler(b *testing.B, h http.Handler, req *http.Request) {
	w := &discardResponse{h: http.Header{}}
	h.ServeHTTP(w, req) // warm-up: caches, first reads
	if w.code != 0 && w.code != http.StatusOK {
		b.Fatalf("status %d", w.code)
	}
	b.ReportAllocs()
	start := collectortest.ProcessCPU()
	for b.Loop() {
		clear(w.h)
		w.n = 0
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64((collectortest.ProcessCPU()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(w.n), "resp-B")
}

// BenchmarkHTTPScrape serves /metrics through the real handler (host
// collectors, Go and process metrics, text encoding) as Prometheus requests
// it, with and without gzip; "none" is the same handler without collectors,
// so the difference is what the host collectors cost.
func BenchmarkHTTPScrape(b *testing.B) {
	for _, tc := range []struct {
		name string
		only []string
	}{{"host", hostCollectorList}, {"none", nil}} {
		for _, gz := range []bool{false, true} {
			name := tc.name + "/plain"
			if gz {
				name = tc.name + "/gzip"
			}
			b.Run(name, func(b *testing.B) {
				var built map[string]collector.Built
				if tc.only != nil {
					built = hostBuilt(b, "/proc", "/sys", tc.only...)
				}
				h := newTestServer(testSetup{built: built, timeout: 10 * time.Second}).metrics
				benchHandler(b, h, prometheusRequest(gz))
			})
		}
	}
}

// writeSyntheticDisks writes a procfs with n whole disks in
// /proc/diskstats (the 20-field 5.5+ layout, names sdaaa, sdaab, …) and an
// empty sysfs, as scripts/compare-node-exporter.sh does.
func writeSyntheticDisks(tb testing.TB, n int) (procfs, sysfs string) {
	dir := tb.TempDir()
	procfs, sysfs = filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
	for _, d := range []string{procfs, sysfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	var sb strings.Builder
	for i := range n {
		name := "sd" + string(rune('a'+i/676%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i%26))
		fmt.Fprintf(&sb, "%4d %7d %s %d 0 %d %d %d 0 %d %d 0 %d %d 0 0 0 0 %d %d\n",
			8+i/256, i%256*16, name, 1000+i, 8000+i, 300+i, 2000+i, 16000+i, 900+i, 700+i, 1200+i, 50+i, 40+i)
	}
	if err := os.WriteFile(filepath.Join(procfs, "diskstats"), []byte(sb.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	return procfs, sysfs
}

// BenchmarkHTTPScrapeDisks is a whole /metrics request with the diskstats
// collector alone on 10, 100 and 1,000 synthetic disks (13 series each);
// the growth from 10 to 1,000 is the cost per exported series.
func BenchmarkHTTPScrapeDisks(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			procfs, sysfs := writeSyntheticDisks(b, n)
			h := newTestServer(testSetup{built: hostBuilt(b, procfs, sysfs, "diskstats"), timeout: 10 * time.Second}).metrics
			benchHandler(b, h, prometheusRequest(true))
		})
	}
}

// BenchmarkProcessCollector is client_golang's process collector (the nine
// process_* series of /metrics) gathered through a registry.
func BenchmarkProcessCollector(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
