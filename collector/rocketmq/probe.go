package rocketmq

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
)

// /probe?module=rocketmq&target=host:port

var probes = struct {
	sync.Mutex
	byTarget map[string]*probeEntry
}{byTarget: map[string]*probeEntry{}}

type probeEntry struct {
	c    *scraper
	used time.Time
}

// probeCacheSize bounds the cached probe collectors (connections and
// put-latency histograms kept per target); the least recently used goes.
const probeCacheSize = 256

// probe returns the collector of one broker, host:port. The target is
// checked and normalised first (normalizeHostPort: a malformed one is an
// error, 400, before the allowlist is asked), so the allowlist, the cache
// key, the address dialled and the broker label all see one spelling.
func probe(cfg collector.Config, target string) (collector.Collector, error) {
	norm, err := normalizeHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("target %w", err)
	}
	target = norm
	if !probeAllowed(*probeAllowFlag, target) {
		return nil, fmt.Errorf("%w: %s is not in --rocketmq.probe.allowed-targets", collector.ErrTargetNotAllowed, shown(target))
	}
	probes.Lock()
	defer probes.Unlock()
	if e, ok := probes.byTarget[target]; ok {
		e.used = time.Now()
		return e.c, nil
	}
	opts, err := optionsFromFlags()
	if err != nil {
		return nil, err
	}
	opts.Brokers = []string{target}
	if len(probes.byTarget) >= probeCacheSize {
		var oldest string
		var at time.Time
		for t, e := range probes.byTarget {
			if oldest == "" || e.used.Before(at) {
				oldest, at = t, e.used
			}
		}
		for _, b := range probes.byTarget[oldest].c.brokers {
			b.client.Close()
		}
		delete(probes.byTarget, oldest)
	}
	c := newScraper(cfg, opts)
	probes.byTarget[target] = &probeEntry{c: c, used: time.Now()}
	return c, nil
}

// probeAllowed reports whether target, as normalizeHostPort returns it,
// matches an allowlist entry: "*", a host:port or a host (any port),
// compared after the same normalisation, or a CIDR containing the target's
// IP address (an IPv4-mapped prefix is its IPv4 prefix). Host names are
// compared, never resolved.
func probeAllowed(allow []string, target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	ip, ipErr := netip.ParseAddr(host)
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "*":
			return true
		case strings.Contains(a, "/"):
			if p, err := parsePrefix(a); err == nil && ipErr == nil && p.Contains(ip) {
				return true
			}
		default:
			if n, err := normalizeHostPort(a); err == nil && n == target {
				return true
			}
			if n, err := normalizeHost(a); err == nil && n == host {
				return true
			}
		}
	}
	return false
}
