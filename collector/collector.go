package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// Namespace is the prefix of every metric the exporter exports.
const Namespace = "stall"

// ErrNoData is returned (possibly wrapped) by an Update when the host has
// nothing to report for this collector — a kernel without PSI, a container
// without /proc/zoneinfo. The scrape counts it as a success with no series.
var ErrNoData = errors.New("no data on this host")

// Collector is one named source of metrics.
type Collector interface {
	// Update sends the metrics of one scrape to ch. It must return promptly
	// once ctx is done; metrics sent after that are discarded. An error marks
	// the scrape of this collector as failed (stall_scrape_collector_success
	// 0) but never affects the other collectors.
	Update(ctx context.Context, ch chan<- prometheus.Metric) error
}

// Runner is implemented by collectors that keep state between scrapes (the
// 1 s sampler, the kernel log reader). The exporter calls Run once in its own
// goroutine; Run returns when ctx is cancelled.
type Runner interface {
	Run(ctx context.Context)
}

// Config is what every collector factory receives.
type Config struct {
	Paths Paths
	// ProcFS is procfs' view of Paths.Procfs, built once by Build for
	// every collector (procfs.NewFS stats the mount point).
	ProcFS   procfs.FS
	Logger   *slog.Logger // already carries collector=<name>
	Problems *Problems    // bad-input counter of this collector
}

// Factory builds a collector from the parsed flags. A factory error disables
// the exporter's start: it is for invalid flags, not for missing files.
type Factory func(cfg Config) (Collector, error)

type registration struct {
	factory Factory
	enabled *bool // --[no-]collector.<name>
}

var (
	registryMu    sync.Mutex
	registrations = map[string]*registration{}
)

// Register makes a collector known by name, from an init function;
// registering a name twice panics. description says in one line what the
// collector reports and where it reads it ("Per-device I/O counts … from
// /proc/diskstats"): it is the --help of the --[no-]collector.<name> flag.
func Register(name, description string, defaultEnabled bool, factory Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registrations[name]; dup {
		panic(fmt.Sprintf("collector %q registered twice", name))
	}
	def, state := "false", "disabled"
	if defaultEnabled {
		def, state = "true", "enabled"
	}
	help := fmt.Sprintf("%s (default: %s).", description, state)
	registrations[name] = &registration{factory: factory, enabled: kingpin.Flag("collector."+name, help).Default(def).Bool()}
}

// Built is one constructed collector with its bad-input counter.
type Built struct {
	Collector Collector
	Problems  *Problems
}

// Build constructs the collectors enabled by flags, keyed by name. If only is
// non-empty, exactly those collectors are built, whatever the flags say.
// cfg.Logger and cfg.Problems are replaced per collector.
func Build(cfg Config, only ...string) (map[string]Built, error) {
	registryMu.Lock()
	defer registryMu.Unlock()
	want := map[string]bool{}
	for _, n := range only {
		if _, ok := registrations[n]; !ok {
			return nil, fmt.Errorf("unknown collector %q", n)
		}
		want[n] = true
	}
	fs, err := procfs.NewFS(cfg.Paths.Procfs)
	if err != nil {
		return nil, fmt.Errorf("--path.procfs: %w", err)
	}
	out := map[string]Built{}
	for _, name := range slices.Sorted(maps.Keys(registrations)) { // the same collector reports a bad shared flag every time
		r := registrations[name]
		if len(want) > 0 && !want[name] || len(want) == 0 && !*r.enabled {
			continue
		}
		logger := cfg.Logger.With("collector", name)
		problems := NewProblems(name, logger)
		c, err := r.factory(Config{Paths: cfg.Paths, ProcFS: fs, Logger: logger, Problems: problems})
		if err != nil {
			return nil, fmt.Errorf("collector %s: %w", name, err)
		}
		out[name] = Built{Collector: c, Problems: problems}
	}
	return out, nil
}

// ErrTargetNotAllowed is returned (wrapped) by ProbeModule.Target for a
// target outside the module's allowlist; /probe answers 403.
var ErrTargetNotAllowed = errors.New("target not allowed by configuration")

// ProbeModule is a /probe?module=<name>&target=<target> module
// (blackbox_exporter's convention): one remote instance scraped on demand.
// The exporter builds every module at start, whether or not its /metrics
// collector is enabled, so a bad flag stops the start; after that it must
// be safe for concurrent use.
type ProbeModule interface {
	// Target checks one requested target without connecting: a malformed
	// one is an error (/probe answers 400 with its text, which must not
	// quote a secret), one outside the allowlist wraps ErrTargetNotAllowed
	// (403). It returns the target's one spelling, key (one collector is
	// kept per module and key, logged as target=<key>), and build, which
	// makes that collector, not connecting either. The exporter calls its
	// Update once per request and never Run; when collector/probecache
	// drops the target it calls Close (io.Closer), between requests
	// CloseIdle (IdleCloser).
	Target(target string) (key string, build func(Config) Collector, err error)
}

// IdleCloser is implemented by a probe collector that keeps connections
// between requests. CloseIdle closes them unless a scrape is using them,
// and reports whether none is left open; the next Update connects again.
type IdleCloser interface {
	CloseIdle() bool
}

// ProbeBuilder builds a /probe module from the parsed flags; its error
// names the flag to fix.
type ProbeBuilder func() (ProbeModule, error)

var probes = map[string]ProbeBuilder{}

// RegisterProbe makes a /probe module known, from an init function;
// registering a name twice panics.
func RegisterProbe(module string, build ProbeBuilder) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := probes[module]; dup {
		panic(fmt.Sprintf("probe module %q registered twice", module))
	}
	probes[module] = build
}

// BuildProbes builds every registered /probe module, keyed by name.
func BuildProbes() (map[string]ProbeModule, error) {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make(map[string]ProbeModule, len(probes))
	for _, name := range slices.Sorted(maps.Keys(probes)) {
		m, err := probes[name]()
		if err != nil {
			return nil, fmt.Errorf("probe module %s: %w", name, err)
		}
		out[name] = m
	}
	return out, nil
}
