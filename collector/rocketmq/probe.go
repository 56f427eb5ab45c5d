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

func probe(cfg collector.Config, target string) (collector.Collector, error) {
	if !probeAllowed(*probeAllowFlag, target) {
		return nil, fmt.Errorf("%w: %q is not in --rocketmq.probe.allowed-targets", collector.ErrTargetNotAllowed, target)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("target %q: want host:port: %w", target, err)
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

// probeAllowed reports whether target (host:port) matches an allowlist
// entry: "*", an exact host:port, a host (any port), or a CIDR containing
// the target's IP address. Host names are compared as written, never
// resolved.
func probeAllowed(allow []string, target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	ip, ipErr := netip.ParseAddr(host)
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "*", a == target, a == host:
			return true
		case strings.Contains(a, "/") && ipErr == nil:
			if p, err := netip.ParsePrefix(a); err == nil && p.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}
