package redis

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestProbeCacheBounded: /probe over a wide allowlist, 300 targets probed
// 8 at a time, twice. The exporter keeps every target's state (CONFIG
// cache, CLIENT LIST schedule and aggregates) but an open connection only
// for the probeMaxConns most recently probed ones, and a cached target
// costs a few kB of heap (review 1, item 3: 1,000 cached targets held
// 1,000 connections and 123 MB of heap, about 120 KB each, for 10 minutes).
//
// Not parallel: the heap is process-wide.
func TestProbeCacheBounded(t *testing.T) {
	const n = 300
	raiseOpenFiles(t, 4*n+256)
	list, _, _, _ := podClientList(50)
	servers := make([]*redistest.Server, n)
	for i := range servers {
		servers[i] = redistest.Start(t, redistest.Replies{"info": redistest.Bulk(fmt.Sprintf(autoInfo, 50)), "client list": redistest.Bulk(list)})
	}
	s := testSettings()
	allow, err := newAllowlist(nil, nil, `127\.0\.0\.1:[0-9]+`, "redis", s.conn)
	if err != nil {
		t.Fatal(err)
	}
	var pc probeCache
	pc.configure(s, allow)
	t.Cleanup(func() { pc.configure(s, allow) })
	cfg := collectortest.Config("redis", nil)

	probeAll := func() {
		eachEightAtATime(servers, func(srv *redistest.Server) {
			c, err := pc.get(cfg, srv.Addr)
			if err != nil {
				t.Error(err)
				return
			}
			if res := collectortest.Scrape(t, c, 5*time.Second); res.Err != nil {
				t.Error(res.Err)
			}
		})
	}
	heapBefore := heapAfterGC()
	probeAll()
	probeAll()
	perTarget := (int64(heapAfterGC()) - int64(heapBefore)) / n
	open := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		open = 0
		for _, srv := range servers {
			open += int(srv.Open())
		}
		if open <= probeMaxConns || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d targets cached, %d connections open, %d bytes of heap per cached target", pc.targets.Len(), open, perTarget)
	if pc.targets.Len() != n {
		t.Errorf("%d targets cached, want %d", pc.targets.Len(), n)
	}
	if open > probeMaxConns {
		t.Errorf("%d connections open, want at most %d", open, probeMaxConns)
	}
	if perTarget > 12<<10 {
		t.Errorf("%d bytes of heap per cached target", perTarget)
	}

	// Connections idle for probeConnIdle are closed, the targets' state
	// kept; targets idle for probeIdle are dropped.
	trim := func(after time.Duration) { pc.targets.Trim(time.Now().Add(after)) }
	trim(probeConnIdle + time.Second)
	collectortest.WaitFor(t, 10*time.Second, "idle connections to close", func() error {
		for _, srv := range servers {
			if n := srv.Open(); n > 0 {
				return fmt.Errorf("%s has %d open", srv.Addr, n)
			}
		}
		return nil
	})
	if pc.targets.Len() != n {
		t.Errorf("%d targets cached after closing their connections, want %d", pc.targets.Len(), n)
	}
	trim(probeIdle + time.Second)
	if pc.targets.Len() != 0 {
		t.Errorf("%d targets cached after %v without a probe", pc.targets.Len(), probeIdle)
	}
}

// eachEightAtATime runs f for every server, at most 8 at a time, as a
// Prometheus probing many targets does, and returns when all are done.
func eachEightAtATime(servers []*redistest.Server, f func(*redistest.Server)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, srv := range servers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(srv)
		}()
	}
	wg.Wait()
}
