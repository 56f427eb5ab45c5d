package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// hostBuilt builds the host collectors of hostCollectorList, or only
// those named, on procfs and sysfs.
func hostBuilt(t testing.TB, procfs, sysfs string, only ...string) map[string]collector.Built {
	t.Helper()
	if len(only) == 0 {
		only = hostCollectorList
	}
	built, err := collector.Build(collector.Config{
		Paths: collector.Paths{Procfs: procfs, Sysfs: sysfs, Rootfs: "/"}, Logger: slog.New(slog.DiscardHandler)}, only...)
	if err != nil {
		t.Fatal(err)
	}
	return built
}

// hostHandler is /metrics of the host collectors on procfs and sysfs.
func hostHandler(t *testing.T, procfs, sysfs string) http.Handler {
	return newTestServer(testSetup{built: hostBuilt(t, procfs, sysfs)}).metrics
}

// TestNegotiation: /metrics answers what its clients ask for — gzip when
// asked (the same text inside), the text format by default, protobuf when
// asked, and only the families of name[].
func TestNegotiation(t *testing.T) {
	fix := "collector/host/fixtures/linux-6.8"
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
		if stable(string(body)) != stable(plain.Body.String()) {
			t.Errorf("Accept-Encoding %q: gzip body differs from the plain one", ae)
		}
	}
	if get(t, h, "/metrics", "Accept-Encoding", "br").Header().Get("Content-Encoding") != "" {
		t.Error("Accept-Encoding br: compressed")
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
	fix := "collector/host/fixtures/linux-6.8"
	h := hostHandler(t, fix+"/proc", fix+"/sys")
	want := stable(get(t, h, "/metrics").Body.String())
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
				if got := stable(string(body)); got != want {
					t.Errorf("concurrent scrape differs:\n%s", lineDiff(want, got))
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSelfMetrics: /metrics carries the exporter's own series from
// client_golang's collectors (the nine process_* families, the Go runtime,
// build info) with values that describe this process.
func TestSelfMetrics(t *testing.T) {
	fix := "collector/host/fixtures/linux-6.8"
	s := collectortest.Parse(t, get(t, hostHandler(t, fix+"/proc", fix+"/sys"), "/metrics").Body.String())
	for _, name := range []string{
		"process_cpu_seconds_total", "process_open_fds", "process_max_fds", "process_virtual_memory_bytes",
		"process_virtual_memory_max_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
		"process_network_receive_bytes_total", "process_network_transmit_bytes_total",
		"go_goroutines", "go_memstats_heap_alloc_bytes",
	} {
		if _, ok := s.Get(name); !ok {
			t.Errorf("%s missing", name)
		}
	}
	if start := s.Must(t, "process_start_time_seconds"); math.Abs(start-float64(time.Now().Unix())) > 3600 {
		t.Errorf("process_start_time_seconds = %v, not within the last hour", start)
	}
	rss, fds, goroutines := s.Must(t, "process_resident_memory_bytes"), s.Must(t, "process_open_fds"), s.Must(t, "go_goroutines")
	if rss < 1<<20 || fds < 3 || goroutines < 1 {
		t.Errorf("implausible self metrics: rss %v, fds %v, goroutines %v", rss, fds, goroutines)
	}
	if v := s.Must(t, "stall_exporter_build_info", "goos", runtime.GOOS); v != 1 {
		t.Errorf("stall_exporter_build_info = %v, want 1", v)
	}
}

// pipeListener is a net.Listener of in-memory connections (net.Pipe),
// so an http.Server runs inside a synctest bubble.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects a client to the listener.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestConnectionLimit: with --web.max-connections=2 and two idle
// keep-alive connections, a third connection is served and the one idle
// longest is closed for it (closing the newcomer instead let a client
// holding idle connections lock Prometheus out); only when both open
// connections are serving requests is a new one closed on accept. The
// counters and one log line each say which happened. (Without a bound,
// 21,000 idle connections once took 408 MB and every file descriptor.)
func TestConnectionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lines, logger := collectortest.NewLogs(slog.LevelDebug)
		conns := newConnLimit(2, logger)
		release := make(chan struct{})
		srv := newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			io.WriteString(w, "ok")
		}), conns, logger)
		ln := newPipeListener()
		go srv.Serve(ln)
		defer srv.Close()

		send := func(c net.Conn, path string) error {
			_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			return err
		}
		// answered reads one answer from c and reports whether it was a 200.
		answered := func(c net.Conn) bool {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
		// get sends a request and reads its answer; once it returns, the
		// server has marked the connection idle again.
		get := func(c net.Conn) bool {
			ok := send(c, "/") == nil && answered(c)
			synctest.Wait()
			return ok
		}
		evictedRefused := func() [2]uint64 { return [2]uint64{conns.evictions.refused.Load(), conns.refused.Load()} }

		a := ln.dial()
		if !get(a) {
			t.Fatal("first connection not served")
		}
		collectortest.Advance(time.Second) // a has been idle longer than b
		b := ln.dial()
		if !get(b) {
			t.Fatal("second connection not served")
		}
		c := ln.dial()
		if !get(c) {
			t.Fatal("a third connection was not served although two were idle")
		}
		if get(a) {
			t.Error("the connection idle longest was kept; it should have made room")
		}
		if !get(b) {
			t.Error("the connection idle for less time was closed")
		}
		if got := evictedRefused(); got != [2]uint64{1, 0} {
			t.Errorf("evicted, refused %v; want 1 and 0", got)
		}

		// b and c busy: a new connection has nothing to take the place of.
		if send(b, "/block") != nil || send(c, "/block") != nil {
			t.Fatal("cannot send on the open connections")
		}
		synctest.Wait()
		if get(ln.dial()) {
			t.Error("a new connection was served while both open connections were serving requests")
		}
		close(release)
		if !answered(b) || !answered(c) {
			t.Error("the busy connections' requests were not answered")
		}
		if got := evictedRefused(); got != [2]uint64{1, 1} {
			t.Errorf("evicted, refused %v; want 1 and 1", got)
		}
		if n := lines.Count("WARN", "closing the longest idle", "--web.max-connections"); n != 1 {
			t.Errorf("%d warnings about evicted idle connections, want 1", n)
		}
		if n := lines.Count("WARN", "closing new connections", "--web.max-connections"); n != 1 {
			t.Errorf("%d warnings about refused connections, want 1", n)
		}
	})
}
