package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
)

func hostHandler(t *testing.T, procfs, sysfs string) http.Handler {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	built, err := collector.Build(collector.Config{
		Paths: collector.Paths{Procfs: procfs, Sysfs: sysfs, Rootfs: "/"}, Logger: logger}, hostCollectorList...)
	if err != nil {
		t.Fatal(err)
	}
	return testMetricsHandler(NewExporter(built, 5*time.Second, logger), 5*time.Second, 0, logger)
}

func get(t *testing.T, h http.Handler, url string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, rec.Code, rec.Body)
	}
	return rec
}

// stableLines drops the series that change between two scrapes.
func stableLines(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "go_") || strings.HasPrefix(l, "process_") || strings.HasPrefix(l, "stall_scrape_collector_duration") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// TestNegotiation: gzip when asked (and the same text inside), the text
// format by default, protobuf when asked, and promhttp's name[] filter.
func TestNegotiation(t *testing.T) {
	fix := "collector/fixtures/linux-6.8"
	h := hostHandler(t, fix+"/proc", fix+"/sys")
	plain := get(t, h, "/metrics")
	if ct := plain.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	if plain.Header().Get("Content-Encoding") != "" {
		t.Error("compressed without Accept-Encoding")
	}
	for _, ae := range []string{"gzip", "identity;q=0.5, gzip"} {
		zipped := get(t, h, "/metrics", "Accept-Encoding", ae)
		if zipped.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("Accept-Encoding %q: not compressed", ae)
		}
		zr, err := gzip.NewReader(zipped.Body)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if stableLines(string(body)) != stableLines(plain.Body.String()) {
			t.Errorf("Accept-Encoding %q: gzip body differs from the plain one", ae)
		}
	}
	for _, ae := range []string{"gzip;q=0", "gzip, identity", "br"} {
		if get(t, h, "/metrics", "Accept-Encoding", ae).Header().Get("Content-Encoding") != "" {
			t.Errorf("Accept-Encoding %q: compressed", ae)
		}
	}
	proto := get(t, h, "/metrics", "Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	if ct := proto.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/vnd.google.protobuf") {
		t.Errorf("protobuf Content-Type %q", ct)
	}
	if !bytes.Contains(proto.Body.Bytes(), []byte("stall_vm_dirty_bytes")) {
		t.Error("protobuf body lacks stall_vm_dirty_bytes")
	}
	filtered := get(t, h, "/metrics?name[]=stall_vm_dirty_bytes&name[]=go_goroutines").Body.String()
	if !strings.Contains(filtered, "\nstall_vm_dirty_bytes ") || !strings.Contains(filtered, "\ngo_goroutines ") ||
		strings.Contains(filtered, "stall_memory_total_bytes") {
		t.Errorf("name[] filter:\n%s", filtered)
	}
}

// TestConcurrentScrapes: scrapes running at once share collectors, buffers
// and the registry; under -race this finds unsynchronised state, and every
// scrape must see the same host series.
func TestConcurrentScrapes(t *testing.T) {
	fix := "collector/fixtures/linux-6.8"
	h := hostHandler(t, fix+"/proc", fix+"/sys")
	want := stableLines(get(t, h, "/metrics").Body.String())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				hdr := []string{}
				if i%2 == 0 {
					hdr = []string{"Accept-Encoding", "gzip"}
				}
				rec := get(t, h, "/metrics", hdr...)
				body := rec.Body.Bytes()
				if rec.Header().Get("Content-Encoding") == "gzip" {
					zr, err := gzip.NewReader(bytes.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					body, _ = io.ReadAll(zr)
				}
				if got := stableLines(string(body)); got != want {
					t.Errorf("concurrent scrape differs:\n%s", lineDiff(want, got))
					return
				}
			}
		})
	}
	wg.Wait()
}
