package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The hungtask collector reads the kernel's own hung-task detector state
// from /proc/sys/kernel at scrape time. Unlike the "INFO: task … blocked"
// kernel log records (counted by the kmsg collector), the detect count is
// not limited by kernel.hung_task_warnings, so it keeps counting after the
// kernel has stopped reporting.

var (
	hungTaskDetectedDesc = collector.NewMetric("kernel_hung_task_detected_total",
		"Tasks the kernel's hung-task detector found blocked since boot, not rate-limited (/proc/sys/kernel/hung_task_detect_count, Linux 6.11+).",
		prometheus.CounterValue)
	hungTaskWarningsDesc = collector.NewMetric("kernel_hung_task_warnings_remaining",
		"Hung-task reports the kernel will still write to its log, -1 for unlimited (/proc/sys/kernel/hung_task_warnings).",
		prometheus.GaugeValue)
	hungTaskTimeoutDesc = collector.NewMetric("kernel_hung_task_timeout_seconds",
		"Time a task must be blocked before the hung-task detector reports it, 0 if disabled (/proc/sys/kernel/hung_task_timeout_secs).",
		prometheus.GaugeValue)
)

func init() {
	register("hungtask", "The kernel hung-task detector's count, reports left and timeout, from /proc/sys/kernel", newHungTaskCollector)
}

func newHungTaskCollector(cfg collector.Config, _ settings) *hungTaskCollector {
	return &hungTaskCollector{fs: cfg.ProcFS, problems: cfg.Problems}
}

// hungTaskCollector reads the detector's files with procfs (FS.KernelHung
// for the detect count, FS.SysctlInts for the two tunables), once per
// scrape.
type hungTaskCollector struct {
	fs       procfs.FS
	problems *collector.Problems
}

// Update sends what the kernel has of the three files; a kernel built
// without CONFIG_DETECT_HUNG_TASK has none of them (ErrNoData). A file whose
// content is not one integer is skipped and counted in
// stall_collector_parse_errors_total; a read error other than "no such
// file" fails the scrape (without being counted as bad input). Either way
// the other files are still sent.
func (c *hungTaskCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	sent := 0
	var errs []error
	handle := func(name string, m collector.Metric, v float64, err error) {
		switch {
		case err == nil:
			m.Send(ch, v)
			sent++
		case errors.Is(err, fs.ErrNotExist):
		case procfsContentError(err):
			c.problems.Add("hungtask_"+strings.TrimPrefix(name, "hung_task_"), 1, fmt.Errorf("/proc/sys/kernel/%s: %w", name, err))
		default:
			errs = append(errs, err)
		}
	}
	hung, err := c.fs.KernelHung()
	var detected float64
	if err == nil {
		detected = float64(*hung.HungTaskDetectCount)
	}
	handle("hung_task_detect_count", hungTaskDetectedDesc, detected, err)
	for _, f := range [...]struct {
		name string
		m    collector.Metric
	}{{"hung_task_warnings", hungTaskWarningsDesc}, {"hung_task_timeout_secs", hungTaskTimeoutDesc}} {
		v, err := sysctlInt(c.fs, "kernel."+f.name)
		handle(f.name, f.m, float64(v), err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if sent == 0 {
		return collector.ErrNoData
	}
	return ctx.Err()
}

// sysctlInt reads a sysctl that holds exactly one integer with procfs.
func sysctlInt(pfs procfs.FS, name string) (int, error) {
	vs, err := pfs.SysctlInts(name)
	if err != nil {
		return 0, err
	}
	if len(vs) != 1 {
		return 0, fmt.Errorf("%w: %d values, want one integer", procfs.ErrFileParse, len(vs))
	}
	return vs[0], nil
}

// procfsContentError reports whether an error from procfs is about what a
// file holds (bad input, counted) rather than about reading it: procfs
// wraps its own parse errors in ErrFileParse and returns strconv's as they
// are.
func procfsContentError(err error) bool {
	var num *strconv.NumError
	return errors.Is(err, procfs.ErrFileParse) || errors.As(err, &num)
}
