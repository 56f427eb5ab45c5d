package redis

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// /probe?module=redis&target=…: a request names an address and nothing
// else (parseProbeAddress); the allowlist decides whether and how it is
// reached (allowlist.go). The exporter keeps the collector of each address
// between probes, under its /probe limits (docs/redis.md: a cached target
// is 3–6 kB of heap, an idle connection about 15 kB more and a file
// descriptor).

// newProbe builds the /probe module from the process's flags, at start.
func newProbe() (collector.ProbeModule, error) {
	m, err := flags.probe()
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return m, nil
}

// probe builds the /probe module from the flags: the --redis.* settings
// and the allowlist of --redis.addr and --redis.probe.*; every error names
// its flag.
func (f *flagValues) probe() (*probeModule, error) {
	s, err := f.validate()
	if err != nil {
		return nil, err
	}
	allow, err := newAllowlist(*f.addrs, *f.probeAllowed, *f.probeAllowedRE, *f.probeScheme, s.conn)
	if err != nil {
		return nil, err
	}
	return &probeModule{s: s, allow: allow}, nil
}

type probeModule struct {
	s     settings
	allow *allowlist
}

// Target implements collector.ProbeModule; the key is the address,
// host:port or the socket path.
func (m *probeModule) Target(requested string) (string, func(collector.Config) collector.Collector, error) {
	addr, err := parseProbeAddress(requested)
	if err != nil {
		return "", nil, err
	}
	spec, err := m.allow.resolve(addr)
	if err != nil {
		return "", nil, err
	}
	return spec.hostPort, func(cfg collector.Config) collector.Collector {
		return probeCollector{newTarget(spec, m.s, cfg)}
	}, nil
}

// probeCollector is one probed target.
type probeCollector struct{ t *target }

func (p probeCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	return p.t.collect(ctx, ch)
}

// Close closes the connection once a scrape in progress has ended.
func (p probeCollector) Close() error {
	p.t.close()
	return nil
}

// CloseIdle implements collector.IdleCloser.
func (p probeCollector) CloseIdle() bool { return p.t.closeIdle() }
