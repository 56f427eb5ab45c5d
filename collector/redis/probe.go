package redis

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// /probe?module=redis&target=…: targets are checked against the allowlist,
// then served by a cached target (its connection pool, CONFIG cache
// and CLIENT LIST schedule survive between requests). Targets not probed
// for probeIdle are closed.

const probeIdle = 10 * time.Minute

// probeMaxTargets bounds the cache when a wide allowlist pattern lets
// many distinct targets be probed; the least recently used one is closed.
const probeMaxTargets = 1000

type probeCache struct {
	mu       sync.Mutex
	settings *settings
	allow    *allowlist
	targets  map[string]*probeEntry
}

type probeEntry struct {
	t        *target
	lastUsed time.Time
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
	for k, e := range pc.targets {
		if now.Sub(e.lastUsed) > probeIdle {
			go e.t.close()
			delete(pc.targets, k)
		}
	}
	// The configuration decides scheme and user, so one address is one
	// target whatever scheme the request spelled.
	key := spec.hostPort
	e, ok := pc.targets[key]
	if !ok && len(pc.targets) >= probeMaxTargets {
		oldest := ""
		for k, o := range pc.targets {
			if oldest == "" || o.lastUsed.Before(pc.targets[oldest].lastUsed) {
				oldest = k
			}
		}
		go pc.targets[oldest].t.close()
		delete(pc.targets, oldest)
	}
	if !ok {
		e = &probeEntry{t: newTarget(spec, *pc.settings, cfg)}
		pc.targets[key] = e
	}
	e.lastUsed = now
	return probeCollector{e.t}, nil
}

// probeAllowlistFromFlags builds the /probe allowlist: every
// --redis.addr and --redis.probe.allowed-targets entry with its configured
// scheme, TLS and user, and the regexp with --redis.probe.scheme.
func probeAllowlistFromFlags(conn connSettings) (*allowlist, error) {
	entries := append(append([]string(nil), *flags.addrs...), *flags.probeAllowed...)
	return newAllowlist(entries, *flags.probeAllowedRE, *flags.probeScheme, conn)
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
