package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
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
		return newHungTaskCollector(cfg.Paths, cfg.Problems), nil
	})
}

func newHungTaskCollector(paths Paths, problems *Problems) *hungTaskCollector {
	c := &hungTaskCollector{problems: problems}
	for i, f := range hungTaskFiles {
		c.files[i] = NewProcFile(paths.Proc("sys", "kernel", f.name))
	}
	return c
}

// hungTaskFiles are the detector's files under /proc/sys/kernel.
var hungTaskFiles = [...]struct {
	name string
	m    Metric
}{
	{"hung_task_detect_count", hungTaskDetectedDesc},
	{"hung_task_warnings", hungTaskWarningsDesc},
	{"hung_task_timeout_secs", hungTaskTimeoutDesc},
}

type hungTaskCollector struct {
	problems *Problems

	mu    sync.Mutex // concurrent scrapes share the files and buffer
	files [len(hungTaskFiles)]*ProcFile
	buf   []byte
}

// Update sends what the kernel has of the three files; a kernel built
// without CONFIG_DETECT_HUNG_TASK has none of them (ErrNoData).
func (c *hungTaskCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent := 0
	for i, f := range hungTaskFiles {
		data, err := c.files[i].Read(c.buf)
		c.buf = data[:0]
		var v int64
		if err == nil {
			v, err = parseSysctlInt(data)
		}
		switch {
		case err == nil:
			f.m.Send(ch, float64(v))
			sent++
		case !errors.Is(err, fs.ErrNotExist):
			c.problems.Add(f.name, 1, fmt.Errorf("/proc/sys/kernel/%s: %w", f.name, err))
		}
	}
	if sent == 0 {
		return ErrNoData
	}
	return ctx.Err()
}

// parseSysctlInt parses a /proc/sys file holding one signed decimal
// integer and a newline.
func parseSysctlInt(b []byte) (int64, error) {
	b = bytes.TrimSpace(b)
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	u, ok := parseUint(b)
	if !ok || u > 1<<63 || !neg && u == 1<<63 {
		return 0, fmt.Errorf("not an integer: %q", truncate(b))
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}
