// Package collector is stall_exporter's collector framework: the registry
// of collectors and /probe modules, metric declaration (NewMetric,
// Declare*), bad-input counting (Problems), the mount points every file
// read goes through (Paths), label values taken from outside (LabelValue)
// and scrape deadlines. The collectors are packages of their own beneath
// it — collector/host (the kernel: /proc, /sys, /dev/kmsg), collector/redis,
// collector/rocketmq, collector/dns — which main imports for their init.
// Every collector follows one pattern: it registers itself by name, with a
// one-line description for --help, in an init function with Register (and
// a /probe module with RegisterProbe), declares its own command-line flags
// (named --<collector>.<option>), and implements Update, which sends the
// metrics of one scrape. The exporter turns each registered name into a
// --[no-]collector.<name> flag, wraps every Update with a timeout and with
// the stall_scrape_collector_* self-metrics, and starts the background loop
// of collectors that implement Runner.
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
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
	name           string
	defaultEnabled bool
	factory        Factory
	enabled        *bool
}

var (
	registryMu    sync.Mutex
	registrations = map[string]*registration{}
)

// Register makes a collector known by name. It is called from init
// functions; registering a name twice panics, as that is a programming error.
// description says in one line what the collector reports and where it reads
// it from ("Per-device I/O counts … from /proc/diskstats"), so that --help
// tells an operator what each --[no-]collector.<name> flag turns on or off;
// the flag is declared on kingpin.CommandLine.
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
	r := &registration{name: name, defaultEnabled: defaultEnabled, factory: factory}
	r.enabled = kingpin.Flag("collector."+name, help).Default(def).Bool()
	registrations[name] = r
}

// Names lists every registered collector, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registrations))
	for n := range registrations {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
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
	names := make([]string, 0, len(registrations))
	for n := range registrations {
		names = append(names, n)
	}
	sort.Strings(names) // the same collector reports a bad shared flag every time
	fs, err := procfs.NewFS(cfg.Paths.Procfs)
	if err != nil {
		return nil, fmt.Errorf("--path.procfs: %w", err)
	}
	out := map[string]Built{}
	for _, name := range names {
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

// ErrTargetNotAllowed is returned by a ProbeFactory for a /probe target that
// the module's configuration does not allow; /probe answers 403.
var ErrTargetNotAllowed = errors.New("target not allowed by configuration")

// ProbeFactory builds a collector for one remote target named in a
// /probe?module=<module>&target=<target> request (blackbox_exporter
// convention). It must validate target against the module's allowlist and
// return ErrTargetNotAllowed when it is outside, so /probe cannot be used as a
// proxy to arbitrary hosts. The returned collector may be cached and reused by
// the factory; the exporter calls Update on it once per request.
type ProbeFactory func(cfg Config, target string) (Collector, error)

var probes = map[string]ProbeFactory{}

// RegisterProbe makes a /probe module known; called from init functions.
func RegisterProbe(module string, f ProbeFactory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := probes[module]; dup {
		panic(fmt.Sprintf("probe module %q registered twice", module))
	}
	probes[module] = f
}

// Probe returns the factory of a /probe module.
func Probe(module string) (ProbeFactory, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	f, ok := probes[module]
	return f, ok
}
