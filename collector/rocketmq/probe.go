package rocketmq

import (
	"fmt"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/probecache"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// /probe?module=rocketmq&target=host:port

// The /probe cache's limits (probecache.Limits): the collector of a probed
// broker — its put-latency histograms, counters and config — is kept for
// probeIdle after its last probe, for at most probeMaxTargets brokers (the
// least recently probed one goes first). Its connection is kept only while
// it is among the probeMaxConns most recently probed brokers and was
// probed in the last probeConnIdle (the cache's background trim closes
// the others within 30 s of that); the next probe dials again, which costs a TCP
// connect: brokers need no handshake. An allowlist CIDR can admit many
// brokers, and a peer need not close idle connections itself.
//
// What it costs (docs/benchmarks.md): 300 distinct brokers probed 40 at a
// time, twice, left the exporter at 23.4 MB RSS with 64 connections,
// against 43.6–45.0 MB with 256 connections and their 64 KiB read buffers
// before.
const (
	probeIdle       = 10 * time.Minute
	probeMaxTargets = 256
	probeConnIdle   = 2 * time.Minute
	probeMaxConns   = 64
)

var probes = probecache.New(probecache.Limits{
	MaxTargets: probeMaxTargets, Idle: probeIdle, MaxConns: probeMaxConns, ConnIdle: probeConnIdle,
}, probecache.Hooks[*scraper]{
	Close:    (*scraper).close, // waits for a request in progress
	DropConn: (*scraper).dropConns,
})

// probe returns the collector of one broker, host:port. The target is
// checked and normalised first (remote.NormalizeHostPort: a malformed one is an
// error, 400, before the allowlist is asked), so the allowlist, the cache
// key, the address dialled and the broker label all see one spelling.
func probe(cfg collector.Config, target string) (collector.Collector, error) {
	norm, err := remote.NormalizeHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("target %w", err)
	}
	target = norm
	allow, err := remote.ParseAllowlist(*flags.probeAllowed, "", "")
	if err != nil {
		return nil, fmt.Errorf("--rocketmq.probe.allowed-targets: %w", err)
	}
	if !allow.Allows(target) {
		return nil, fmt.Errorf("%w: %s is not in --rocketmq.probe.allowed-targets", collector.ErrTargetNotAllowed, remote.Shown(target))
	}
	return probes.Get(target, time.Now(), func() (*scraper, error) {
		opts, err := optionsFromFlags()
		if err != nil {
			return nil, err
		}
		opts.Brokers = []string{target}
		return newScraper(cfg, opts), nil
	})
}
