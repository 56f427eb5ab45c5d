// Command stall_exporter is a Prometheus exporter for the early warning signs
// of latency stalls on message-broker and cache hosts: page-cache dirty and
// writeback pressure against the kernel's throttling thresholds, reclaim and
// allocation stalls, disk await, PSI, and the Redis and RocketMQ signals that
// precede timeouts. See README.md and docs/metrics.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	kitlog "github.com/go-kit/log"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	slogkit "github.com/tjhop/slog-gokit"

	"github.com/stall-exporter/stall_exporter/collector"
	// The collectors register themselves in their init.
	_ "github.com/stall-exporter/stall_exporter/collector/dns"
	_ "github.com/stall-exporter/stall_exporter/collector/host"
	_ "github.com/stall-exporter/stall_exporter/collector/redis"
	_ "github.com/stall-exporter/stall_exporter/collector/rocketmq"
	_ "github.com/stall-exporter/stall_exporter/collector/tcpqueues"
	_ "github.com/stall-exporter/stall_exporter/collector/writeback"
)

func init() {
	collector.Document("stall_exporter_build_info", "info", "version", "revision", "branch", "goversion", "goos", "goarch", "tags")
}

// defaultListenAddress is outside the 9100–9999 block of Prometheus' default
// port allocations (which is full) and below Linux's ephemeral port range;
// no common service claims it.
const defaultListenAddress = ":29110"

func main() {
	// A scrape is about a millisecond of work that gains nothing from a
	// second P: one P (as node_exporter) saves the idle spinning of others
	// and about 0.9 MiB of RSS (docs/benchmarks.md). The environment's
	// GOMAXPROCS still wins. GOGC and GOMEMLIMIT are left to the environment:
	// Go's default GOGC=100 costs up to 1.5 MiB of RSS more than 50 and
	// saves 8 % of the CPU at a scrape a second (docs/benchmarks.md).
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	os.Exit(run())
}

// The server's flags are declared at package level, as the collectors' are,
// so kingpin's model holds every flag before Parse: the docs tests check
// each --flag the docs name against it.
var (
	metricsPath = kingpin.Flag("web.telemetry-path", "Path under which to expose metrics.").
			Default("/metrics").String()
	maxRequests = kingpin.Flag("web.max-requests", "Maximum number of parallel /metrics requests; 0 disables the limit. /probe has a budget of its own (--web.max-probe-requests), so probes of slow targets cannot starve the host metrics.").
			Default("40").Int()
	maxProbeRequests = kingpin.Flag("web.max-probe-requests", "Maximum number of parallel /probe requests; 0 disables the limit.").
				Default("40").Int()
	maxConnections = kingpin.Flag("web.max-connections", "Maximum number of open HTTP connections; at the limit the longest idle keep-alive connection is closed to make room for a new one (a new one is closed only when all are serving requests). Idle connections are also closed after 2m. 0 disables the limit.").
			Default("256").Int()
	procfs = kingpin.Flag("path.procfs", "procfs mount point.").Default("/proc").String()
	sysfs  = kingpin.Flag("path.sysfs", "sysfs mount point.").Default("/sys").String()
	rootfs = kingpin.Flag("path.rootfs", "Host root file system mount point (for /dev/kmsg and log directories).").
		Default("/").String()
	timeout = kingpin.Flag("collector.timeout",
		"Per-collector time limit of one scrape; lowered to the Prometheus scrape timeout (header) minus --web.timeout-offset when that is shorter.").
		Default("8s").Duration()
	timeoutOffset = kingpin.Flag("web.timeout-offset",
		"Time left between the end of the collectors' time limit and Prometheus' scrape timeout (the X-Prometheus-Scrape-Timeout-Seconds header), to encode and send the answer.").
		Default("500ms").Duration()
	logLevel  = kingpin.Flag("log.level", "Only log messages with the given severity or above: debug, info, warn, error.").Default("info").Enum("debug", "info", "warn", "error")
	logFormat = kingpin.Flag("log.format", "Output format of log messages: logfmt, json.").Default("logfmt").Enum("logfmt", "json")
	webConfig = kingpinflag.AddFlags(kingpin.CommandLine, defaultListenAddress)
)

func run() int {
	kingpin.Version(version.Print("stall_exporter"))
	kingpin.HelpFlag.Short('h')
	kingpin.Parse()

	logger := newLogger(os.Stderr, *logLevel, *logFormat)
	if err := checkFlags(*metricsPath, *maxRequests, *maxProbeRequests, *maxConnections, *timeout, *timeoutOffset); err != nil {
		logger.Error("invalid flags", "err", err)
		return 1
	}
	logger.Info("starting stall_exporter", "version", version.Info(), "build_context", version.BuildContext())
	paths := collector.Paths{Procfs: *procfs, Sysfs: *sysfs, Rootfs: *rootfs}
	warnMissingSysfs(paths, logger)

	built, err := collector.Build(collector.Config{Paths: paths, Logger: logger})
	if err != nil {
		logger.Error("cannot build collectors", "err", err)
		return 1
	}
	logger.Info("enabled collectors", "collectors", strings.Join(slices.Sorted(maps.Keys(built)), ","))
	modules, err := collector.BuildProbes()
	if err != nil {
		logger.Error("cannot build the /probe modules", "err", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	entries := newEntries(built, logger)
	startRunners(ctx, entries)

	metricsLimit := newLimiter("metrics", "--web.max-requests", *maxRequests, logger)
	probeLimit := newLimiter("probe", "--web.max-probe-requests", *maxProbeRequests, logger)
	conns := newConnLimit(*maxConnections, logger)
	own := ownMetrics(metricsLimit, probeLimit, conns)
	deadline := scrapeTimeout{limit: *timeout, offset: *timeoutOffset}
	metrics := newMetricsHandler(entries, own, metricsLimit, deadline, logger)
	debugLog := func(w io.Writer) *slog.Logger { return newLogger(w, "debug", *logFormat) }
	probe := newProbeHandler(modules, paths, deadline, probeLimit, logger, debugLog)
	// Not http.DefaultServeMux: golang.org/x/net/trace adds /debug/requests to it.
	mux := http.NewServeMux()
	if err := routes(mux, *metricsPath, metrics, probe, probe.names); err != nil {
		logger.Error("cannot build the HTTP routes", "err", err)
		return 1
	}

	srv := newServer(mux, conns, logger)
	errc := make(chan error, 1)
	go func() { errc <- web.ListenAndServe(srv, webConfig, logger) }()
	select {
	case err := <-errc:
		logger.Error("HTTP server stopped", "err", err)
		return 1
	case <-ctx.Done():
		logger.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("HTTP shutdown", "err", err)
		}
		return 0
	}
}

// idleTimeout closes a keep-alive connection that has waited this long for
// its next request (Prometheus scrapes far more often, and reconnects when
// one is gone); without it net/http keeps an idle connection forever.
const idleTimeout = 2 * time.Minute

// newServer is the exporter's HTTP server: headers within 10 s, idle
// connections closed after idleTimeout, open connections bounded by conns,
// net/http's own messages (TLS handshake failures …) logged at warn level.
func newServer(h http.Handler, conns *connLimit, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idleTimeout,
		ConnState:         conns.connState,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// checkFlags refuses flag values that would otherwise panic at the first
// request (a path without a leading slash, one that collides with /probe)
// or silently mean something else (a negative limit).
func checkFlags(metricsPath string, maxRequests, maxProbeRequests, maxConnections int, timeout, timeoutOffset time.Duration) error {
	switch {
	case !strings.HasPrefix(metricsPath, "/"):
		return fmt.Errorf("--web.telemetry-path=%s must start with /", metricsPath)
	case metricsPath == "/probe" || strings.HasPrefix(metricsPath, "/probe/"):
		return fmt.Errorf("--web.telemetry-path=%s collides with /probe", metricsPath)
	case maxRequests < 0:
		return fmt.Errorf("--web.max-requests=%d must be 0 (no limit) or positive", maxRequests)
	case maxProbeRequests < 0:
		return fmt.Errorf("--web.max-probe-requests=%d must be 0 (no limit) or positive", maxProbeRequests)
	case maxConnections < 0:
		return fmt.Errorf("--web.max-connections=%d must be 0 (no limit) or positive", maxConnections)
	case timeout <= 0:
		return fmt.Errorf("--collector.timeout=%s must be positive", timeout)
	case timeoutOffset < 0:
		return fmt.Errorf("--web.timeout-offset=%s must be 0 or positive", timeoutOffset)
	}
	return nil
}

// warnMissingSysfs says once, at start, when --path.sysfs has no
// class/block directory. The exporter still starts: only the device filter
// reads sysfs (is a block device a partition?), and it falls back to device
// names; refusing would lose every host signal for a degraded filter.
func warnMissingSysfs(paths collector.Paths, logger *slog.Logger) {
	if _, err := os.Stat(paths.Sys("class", "block")); err != nil {
		logger.Warn("--path.sysfs has no class/block directory, so partitions are recognised by their names (sda1, nvme0n1p2 …); mount the host's /sys there if this is a container",
			"path.sysfs", paths.Sysfs, "err", err)
	}
}

// newLogger builds the go-kit logger (--log.level, --log.format) writing
// to w and bridges it to log/slog, which exporter-toolkit and the
// collectors use; the bridge adds time and caller and filters by level.
// /probe's debug answers use it too, so they read as the main log does.
func newLogger(w io.Writer, levelName, format string) *slog.Logger {
	newKitLogger := kitlog.NewLogfmtLogger
	if format == "json" {
		newKitLogger = kitlog.NewJSONLogger
	}
	var lvl slog.Level // debug, info, warn or error: the flag's enum
	if err := lvl.UnmarshalText([]byte(levelName)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slogkit.NewGoKitHandler(newKitLogger(kitlog.NewSyncWriter(w)), lvl))
}
