package redis

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/probecache"
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

// The /probe cache's limits (probecache.Limits).
const (
	probeIdle = 10 * time.Minute
	// probeMaxTargets bounds the cache when a wide allowlist pattern lets
	// many distinct targets be probed; the least recently probed one is
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
	targets  *probecache.Cache[*target]
}

var probes probeCache

func newProbe(cfg collector.Config, target string) (collector.Collector, error) {
	return probes.get(cfg, target)
}

func (pc *probeCache) get(cfg collector.Config, requested string) (collector.Collector, error) {
	addr, err := parseProbeAddress(requested)
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.settings == nil {
		s, err := flags.settings()
		if err != nil {
			return nil, err
		}
		allow, err := flags.allowlist(s.conn)
		if err != nil {
			return nil, err
		}
		pc.configure(s, allow)
	}
	spec, err := pc.allow.resolve(addr)
	if err != nil {
		return nil, err
	}
	// The configuration decides scheme and user, so one address is one
	// target whatever scheme the request spelled.
	t, err := pc.targets.Get(spec.hostPort, time.Now(), func() (*target, error) {
		return newTarget(spec, *pc.settings, cfg), nil
	})
	if err != nil {
		return nil, err
	}
	return probeCollector{t}, nil
}

// allowlist builds the /probe allowlist: every --redis.addr and
// --redis.probe.allowed-targets entry with its configured scheme, TLS and
// user, and the regexp with --redis.probe.scheme.
func (f *flagValues) allowlist(conn connSettings) (*allowlist, error) {
	return newAllowlist(*f.addrs, *f.probeAllowed, *f.probeAllowedRE, *f.probeScheme, conn)
}

// configure sets the probe settings and drops the targets cached under
// older ones; tests call it directly.
func (pc *probeCache) configure(s settings, allow *allowlist) {
	if pc.targets != nil {
		pc.targets.Reset()
	}
	pc.settings, pc.allow = &s, allow
	pc.targets = probecache.New(probecache.Limits{
		MaxTargets: probeMaxTargets, Idle: probeIdle, MaxConns: probeMaxConns, ConnIdle: probeConnIdle,
	}, probecache.Hooks[*target]{
		Close:    (*target).close, // waits for a scrape in progress
		DropConn: (*target).dropConn,
	})
}

type probeCollector struct{ t *target }

func (p probeCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	return p.t.collect(ctx, ch)
}
