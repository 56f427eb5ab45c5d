package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// benchScrape measures one full scrape of the host collectors (vmstat,
// sysctl, zoneinfo, meminfo, pressure, diskstats) through the exporter's
// timeout wrapper, on the given procfs/sysfs.
func benchScrape(b *testing.B, procfs, sysfs string, only []string) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	built, err := collector.Build(collector.Config{
		Paths:  collector.Paths{Procfs: procfs, Sysfs: sysfs, Rootfs: "/"},
		Logger: logger,
	}, only...)
	if err != nil {
		b.Fatal(err)
	}
	e := NewExporter(built, 10*time.Second, logger)
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

var hostCollectorList = []string{"vmstat", "sysctl", "zoneinfo", "meminfo", "pressure", "diskstats"}

// BenchmarkScrapeRealProc is one host scrape on this machine's /proc.
func BenchmarkScrapeRealProc(b *testing.B) { benchScrape(b, "/proc", "/sys", hostCollectorList) }

// BenchmarkScrapeFixture is one host scrape on the Linux 6.8 fixture, for
// numbers that do not depend on the machine's device count.
func BenchmarkScrapeFixture(b *testing.B) {
	benchScrape(b, "collector/fixtures/linux-6.8/proc", "collector/fixtures/linux-6.8/sys", hostCollectorList)
}

// BenchmarkCollectorRealProc is each host collector alone on /proc.
func BenchmarkCollectorRealProc(b *testing.B) {
	for _, c := range hostCollectorList {
		b.Run(c, func(b *testing.B) { benchScrape(b, "/proc", "/sys", []string{c}) })
	}
}

// BenchmarkHTTPScrape serves /metrics through the real handler (host
// collectors, Go and process metrics, text encoding) and reports the
// process CPU per scrape from getrusage, which includes GC and the
// kernel's side of reading /proc; "none" is the same handler without
// collectors, so the difference is what the host collectors cost.
func BenchmarkHTTPScrape(b *testing.B) {
	for _, tc := range []struct {
		name string
		only []string
	}{{"host", hostCollectorList}, {"none", nil}} {
		b.Run(tc.name, func(b *testing.B) {
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			built := map[string]collector.Built{}
			if tc.only != nil {
				var err error
				built, err = collector.Build(collector.Config{
					Paths: collector.Paths{Procfs: "/proc", Sysfs: "/sys", Rootfs: "/"}, Logger: logger}, tc.only...)
				if err != nil {
					b.Fatal(err)
				}
			}
			h := metricsHandler(NewExporter(built, 10*time.Second, logger), 10*time.Second, 0, logger)
			req := httptest.NewRequest("GET", "/metrics", nil)
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
			}
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
