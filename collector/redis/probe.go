package redis

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// /probe?module=redis&target=…: targets are checked against the allowlist,
// then served by a cached redisTarget (its connection pool, CONFIG cache
// and CLIENT LIST schedule survive between requests). Targets not probed
// for redisProbeIdle are closed.

const redisProbeIdle = 10 * time.Minute

// redisProbeMaxTargets bounds the cache when a wide allowlist pattern lets
// many distinct targets be probed; the least recently used one is closed.
const redisProbeMaxTargets = 1000

type redisProbeCache struct {
	mu       sync.Mutex
	settings *redisSettings
	allow    *redisAllowlist
	targets  map[string]*redisProbeEntry
}

type redisProbeEntry struct {
	t        *redisTarget
	lastUsed time.Time
}

var redisProbes redisProbeCache

func newRedisProbe(cfg collector.Config, target string) (collector.Collector, error) {
	return redisProbes.get(cfg, target)
}

func (pc *redisProbeCache) get(cfg collector.Config, target string) (collector.Collector, error) {
	addr, err := parseProbeAddress(target)
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.settings == nil {
		s, err := redisSettingsFromFlags()
		if err != nil {
			return nil, err
		}
		allow, err := redisProbeAllowlistFromFlags(s.conn)
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
		if now.Sub(e.lastUsed) > redisProbeIdle {
			go e.t.close()
			delete(pc.targets, k)
		}
	}
	// The configuration decides scheme and user, so one address is one
	// target whatever scheme the request spelled.
	key := spec.hostPort
	e, ok := pc.targets[key]
	if !ok && len(pc.targets) >= redisProbeMaxTargets {
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
		e = &redisProbeEntry{t: newRedisTarget(spec, *pc.settings, cfg)}
		pc.targets[key] = e
	}
	e.lastUsed = now
	return redisProbeCollector{e.t}, nil
}

// redisProbeAllowlistFromFlags builds the /probe allowlist: every
// --redis.addr and --redis.probe.allowed-targets entry with its configured
// scheme, TLS and user, and the regexp with --redis.probe.scheme.
func redisProbeAllowlistFromFlags(conn redisConnSettings) (*redisAllowlist, error) {
	entries := append(append([]string(nil), *redisAddrs...), *redisProbeAllowed...)
	return newRedisAllowlist(entries, *redisProbeAllowedRE, *redisProbeScheme, conn)
}

// configure sets the probe settings; tests call it directly.
func (pc *redisProbeCache) configure(s redisSettings, allow *redisAllowlist) {
	for _, e := range pc.targets {
		go e.t.close()
	}
	pc.settings, pc.allow, pc.targets = &s, allow, map[string]*redisProbeEntry{}
}

type redisProbeCollector struct{ t *redisTarget }

func (p redisProbeCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	return p.t.collect(ctx, ch)
}
