package redis

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// /probe?module=redis&target=…: targets are checked against the allowlist,
// then served by a cached target: its CONFIG cache, CLIENT LIST schedule
// and last aggregates survive between requests, and so does its connection
// while it is among the probeMaxConns most recently probed and was probed
// in the last probeConnIdle. A target not probed for probeIdle is dropped.
//
// What the cache costs (docs/redis.md): a cached target is 3–6 kB of heap,
// an idle connection about 15 kB more and a file descriptor
// (TestProbeCacheBounded). 2,000 allowed targets probed 8 at a time leave
// 1,000 cached, 64 connections and the exporter at 34 MiB RSS, host
// collectors included (BenchmarkProbeCacheRSS; 175 MiB, 1,000 connections
// and 1,015 descriptors when every cached target kept two connections) —
// within the deploy kit's 64 MiB.

const (
	probeIdle = 10 * time.Minute
	// probeMaxTargets bounds the cache when a wide allowlist pattern lets
	// many distinct targets be probed; the least recently used one is
	// dropped.
	probeMaxTargets = 1000
	// probeConnIdle: a connection not used for this long is closed (a
	// Prometheus scrape interval is rarely over a minute).
	probeConnIdle = 2 * time.Minute
	// probeMaxConns bounds the idle connections the cache keeps; beyond
	// it, the least recently probed targets reconnect on their next probe
	// (a TCP connect and HELLO, as redis_exporter does on every scrape).
	probeMaxConns = 64
)

type probeCache struct {
	mu       sync.Mutex
	settings *settings
	allow    *allowlist
	targets  map[string]*probeEntry
}

type probeEntry struct {
	t        *target
	lastUsed time.Time
	conn     bool // the target may hold a connection
}

var probes probeCache

func newProbe(cfg collector.Config, target string) (collector.Collector, error) {
	return probes.get(cfg, target)
}

func (pc *probeCache) get(cfg collector.Config, target string) (collector.Collector, error) {
	addr, err := parseProbeAddress(target)
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.settings == nil {
		s, err := settingsFromFlags()
		if err != nil {
			return nil, err
		}
		allow, err := probeAllowlistFromFlags(s.conn)
		if err != nil {
			return nil, err
		}
		pc.configure(s, allow)
	}
	spec, err := pc.allow.resolve(addr)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	// The configuration decides scheme and user, so one address is one
	// target whatever scheme the request spelled.
	key := spec.hostPort
	e, ok := pc.targets[key]
	if !ok {
		e = &probeEntry{t: newTarget(spec, *pc.settings, cfg)}
		pc.targets[key] = e
	}
	e.lastUsed, e.conn = now, true
	pc.trim(now)
	return probeCollector{e.t}, nil
}

// trim drops targets idle for probeIdle and the least recently used ones
// beyond probeMaxTargets, and closes the connections of targets idle for
// probeConnIdle and of the least recently used ones beyond probeMaxConns.
// The caller holds pc.mu.
func (pc *probeCache) trim(now time.Time) {
	var byAge []*probeEntry // entries that keep their connection
	for k, e := range pc.targets {
		switch {
		case now.Sub(e.lastUsed) > probeIdle:
			go e.t.close() // waits for a scrape in progress
			delete(pc.targets, k)
		case e.conn && now.Sub(e.lastUsed) > probeConnIdle:
			e.conn = !e.t.dropConn()
		case e.conn:
			byAge = append(byAge, e)
		}
	}
	for len(pc.targets) > probeMaxTargets { // one at most: a get adds one
		oldest := ""
		for k, e := range pc.targets {
			if oldest == "" || e.lastUsed.Before(pc.targets[oldest].lastUsed) {
				oldest = k
			}
		}
		go pc.targets[oldest].t.close()
		delete(pc.targets, oldest)
	}
	if len(byAge) > probeMaxConns {
		slices.SortFunc(byAge, func(a, b *probeEntry) int { return a.lastUsed.Compare(b.lastUsed) })
		for _, e := range byAge[:len(byAge)-probeMaxConns] {
			// A target whose scrape is running keeps its connection
			// until a later trim.
			e.conn = !e.t.dropConn()
		}
	}
}

// allowlist builds the /probe allowlist: every --redis.addr and
// --redis.probe.allowed-targets entry with its configured scheme, TLS and
// user, and the regexp with --redis.probe.scheme.
func (f *flagValues) allowlist(conn connSettings) (*allowlist, error) {
	return newAllowlist(*f.addrs, *f.probeAllowed, *f.probeAllowedRE, *f.probeScheme, conn)
}

// configure sets the probe settings; tests call it directly.
func (pc *probeCache) configure(s settings, allow *allowlist) {
	for _, e := range pc.targets {
		go e.t.close()
	}
	pc.settings, pc.allow, pc.targets = &s, allow, map[string]*probeEntry{}
}

type probeCollector struct{ t *target }

func (p probeCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	return p.t.collect(ctx, ch)
}
