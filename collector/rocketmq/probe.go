package rocketmq

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// /probe?module=rocketmq&target=host:port: the target is normalised first
// (remote.NormalizeHostPort: a malformed one is an error, 400, before the
// allowlist is asked), so the allowlist, the exporter's cache key, the
// address dialled and the broker label all see one spelling. The exporter
// keeps the collector of each broker — its put-latency histograms,
// counters and config — under its /probe limits (docs/rocketmq.md); a
// broker whose connection was closed dials again at its next probe, which
// costs a TCP connect: brokers need no handshake.

// errNotAllowed names the flag that would allow a refused target, not the
// target (the exporter logs it) nor the allowlist's entries. As for Redis
// (collector/redis/allowlist.go), names are compared as written and never
// resolved, which would let a name's DNS record choose the host probed.
var errNotAllowed = fmt.Errorf("%w: the broker is not in --rocketmq.probe.allowed-targets; add it there to allow it. Names and IP addresses are compared as written, never resolved: probe the spelling that is configured (localhost:10911 and 127.0.0.1:10911 are different targets)", collector.ErrTargetNotAllowed)

// probe builds the /probe module from the --rocketmq.* flags, at start:
// the allowlist is parsed and the ACL file read once.
func probe() (collector.ProbeModule, error) {
	opts, err := flags.validate()
	if err != nil {
		return nil, err
	}
	return probeModule{opts}, nil
}

type probeModule struct{ opts options }

// Target implements collector.ProbeModule; the key is the normalised
// host:port.
func (m probeModule) Target(target string) (string, func(collector.Config) collector.Collector, error) {
	norm, err := remote.NormalizeHostPort(target)
	if err != nil {
		return "", nil, fmt.Errorf("target %w", err)
	}
	if !m.opts.Allow.Allows(norm) {
		return "", nil, errNotAllowed
	}
	return norm, func(cfg collector.Config) collector.Collector {
		opts := m.opts
		opts.Brokers = []string{norm}
		return probeCollector{newScraper(cfg, opts)}
	}, nil
}

// probeCollector is one probed broker.
type probeCollector struct{ s *scraper }

func (p probeCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	return p.s.Update(ctx, ch)
}

// Close closes the broker's connection once a request in progress has
// ended.
func (p probeCollector) Close() error {
	p.s.close()
	return nil
}

// CloseIdle implements collector.IdleCloser.
func (p probeCollector) CloseIdle() bool { return p.s.closeIdle() }
