package main

import (
	"io"
	"log/slog"
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
