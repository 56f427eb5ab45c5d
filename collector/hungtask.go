package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// The hungtask collector reads the kernel's own hung-task detector state
// from /proc/sys/kernel at scrape time. Unlike the "INFO: task … blocked"
// kernel log records (counted by the kmsg collector), the detect count is
// not limited by kernel.hung_task_warnings, so it keeps counting after the
// kernel has stopped reporting.

var (
	hungTaskDetectedDesc = NewMetric("kernel_hung_task_detected_total",
		"Tasks the kernel's hung-task detector found blocked for longer than kernel.hung_task_timeout_secs since boot (/proc/sys/kernel/hung_task_detect_count, Linux 6.11+). Not rate-limited, unlike the kernel log reports.",
		prometheus.CounterValue)
	hungTaskWarningsDesc = NewMetric("kernel_hung_task_warnings_remaining",
		"Hung-task reports the kernel will still write to its log (/proc/sys/kernel/hung_task_warnings; -1 is unlimited). At 0 the kernel stops reporting and stall_kernel_log_events_total{event=\"hung_task\"} stops counting.",
		prometheus.GaugeValue)
	hungTaskTimeoutDesc = NewMetric("kernel_hung_task_timeout_seconds",
		"Time a task must be blocked in uninterruptible sleep before the hung-task detector reports it (/proc/sys/kernel/hung_task_timeout_secs); 0 disables the detector.",
		prometheus.GaugeValue)
)

func init() {
	Register("hungtask", true, func(cfg Config) (Collector, error) {
		return &hungTaskCollector{paths: cfg.Paths, problems: cfg.Problems}, nil
	})
}

type hungTaskCollector struct {
	paths    Paths
	problems *Problems
}

// Update sends what the kernel has of the three files; a kernel built
// without CONFIG_DETECT_HUNG_TASK has none of them (ErrNoData).
func (c *hungTaskCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	sent := 0
	fsys, err := procfs.NewFS(c.paths.Procfs)
	if err != nil {
		return fmt.Errorf("procfs at %s: %w", c.paths.Procfs, err)
	}
	hung, err := fsys.KernelHung()
	switch {
	case err == nil && hung.HungTaskDetectCount != nil:
		hungTaskDetectedDesc.Send(ch, float64(*hung.HungTaskDetectCount))
		sent++
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		c.problems.Add("hung_task_detect_count", 1, err)
	}
	for _, f := range []struct {
		name string
		m    Metric
	}{{"hung_task_warnings", hungTaskWarningsDesc}, {"hung_task_timeout_secs", hungTaskTimeoutDesc}} {
		v, err := hungTaskReadInt(c.paths.Proc("sys", "kernel", f.name))
		switch {
		case err == nil:
			f.m.Send(ch, float64(v))
			sent++
		case !errors.Is(err, fs.ErrNotExist):
			c.problems.Add(f.name, 1, err)
		}
	}
	if sent == 0 {
		return ErrNoData
	}
	return ctx.Err()
}

// hungTaskReadInt reads a /proc/sys file holding one signed decimal integer.
func hungTaskReadInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
