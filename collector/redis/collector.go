package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	collector.Register("redis",
		"Redis memory, clients, output buffers, persistence, replication and big keys, from INFO, MEMORY STATS, CLIENT LIST, CONFIG GET and MEMORY USAGE of each --redis.addr",
		true, newCollector)
	collector.RegisterProbe("redis", newProbe)
	// go-redis' log lines would repeat what stall_redis_up and the
	// once-a-minute warning say.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// scraper scrapes the --redis.addr targets concurrently.
type scraper struct {
	targets []*target
	bigkeys []*bigKeyScanner
}

func newCollector(cfg collector.Config) (collector.Collector, error) { return flags.collector(cfg) }

// collector builds the /metrics collector; every error names its flag.
func (f *flagValues) collector(cfg collector.Config) (*scraper, error) {
	s, err := f.validate()
	if err != nil {
		return nil, err
	}
	return newScraper(cfg, s, *f.addrs)
}

func newScraper(cfg collector.Config, s settings, addrs []string) (*scraper, error) {
	c := &scraper{}
	seen := map[string]bool{}
	for _, a := range addrs {
		spec, err := parseTarget(a, s.conn)
		if err != nil {
			return nil, fmt.Errorf("--redis.addr: %w", err)
		}
		if seen[spec.label] {
			return nil, fmt.Errorf("--redis.addr %s given twice", spec.label)
		}
		seen[spec.label] = true
		if spec.passwordInURL {
			cfg.Logger.Warn("the password in this --redis.addr is visible in the process list; prefer ?password_file= or --redis.password-file",
				"addr", spec.label)
		}
		t := newTarget(spec, s, cfg)
		c.targets = append(c.targets, t)
		if s.bigkeys.enabled {
			c.bigkeys = append(c.bigkeys, newBigKeyScanner(t, s.bigkeys, cfg))
		}
	}
	logWatched(cfg.Logger, c.targets)
	return c, nil
}

// logWatched says at start what the collector will scrape, so that a
// missing --redis.addr is seen in the log rather than guessed from absent
// series: the targets' addr labels, which carry no user or password.
func logWatched(logger *slog.Logger, targets []*target) {
	if len(targets) == 0 {
		logger.Info("redis: no targets (--redis.addr); the collector exports no Redis series, /probe is unaffected")
		return
	}
	labels := make([]string, len(targets))
	for i, t := range targets {
		labels[i] = t.spec.label
	}
	logger.Info("redis: watching", "targets", strings.Join(labels, ","))
}

// Update implements Collector. With no target it reports ErrNoData. A
// target that is down is reported by stall_redis_up 0; the error returned
// (success 0 for the collector) names the targets that failed.
func (c *scraper) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if len(c.targets) == 0 {
		return collector.ErrNoData
	}
	errs := make([]error, len(c.targets))
	var wg sync.WaitGroup
	for i, t := range c.targets {
		wg.Go(func() { errs[i] = t.collect(ctx, ch) })
	}
	wg.Wait()
	for _, b := range c.bigkeys {
		b.send(ch)
	}
	return errors.Join(errs...)
}

// Run implements Runner: the big-key scanners, when enabled.
func (c *scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range c.bigkeys {
		wg.Go(func() { b.run(ctx) })
	}
	wg.Wait()
}
