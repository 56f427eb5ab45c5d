package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
)

func init() {
	register("pressure", "Time tasks were stalled on CPU, memory, I/O and IRQs (PSI), from /proc/pressure", newPressureCollector)
}

var pressureStalled = collector.NewMetric("pressure_stalled_seconds_total",
	"Time some (scope=some) or all non-idle (scope=full) tasks were stalled on the resource (/proc/pressure/<resource> total=), in seconds.",
	prometheus.CounterValue, "resource", "scope")

// psiResources are the /proc/pressure files; irq exists from 6.1 with
// CONFIG_IRQ_TIME_ACCOUNTING.
var psiResources = [...]string{"cpu", "io", "memory", "irq"}

// pressureCollector reads /proc/pressure/* with procfs, once per scrape (the
// sampler does not read them, so they are off the hot path).
type pressureCollector struct {
	fs       procfs.FS
	problems *collector.Problems
}

func newPressureCollector(cfg collector.Config, _ settings) *pressureCollector {
	return &pressureCollector{fs: cfg.ProcFS, problems: cfg.Problems}
}

// psiUnavailable reports errors that mean "this kernel has no PSI": the file
// is missing (before 4.20, CONFIG_PSI=n) or PSI is disabled at boot
// (psi=0 makes reads fail with EOPNOTSUPP).
func psiUnavailable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP)
}

// Update exports the some/full totals of every resource the kernel has. A
// malformed file (procfs rejects a some or full line it cannot scan) drops
// that resource, counts in stall_collector_parse_errors_total and fails the
// scrape; the other resources are still sent. A read error other than "no
// PSI" fails the scrape without being counted as bad input.
func (c *pressureCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	found := 0
	var errs []error
	for _, res := range psiResources {
		st, err := c.fs.PSIStatsForResource(res)
		if err != nil {
			switch {
			case errors.Is(err, procfs.ErrFileRead) && psiUnavailable(err):
			case errors.Is(err, procfs.ErrFileRead):
				errs = append(errs, err)
			default: // procfs wraps every read error in ErrFileRead; the rest is the content
				c.problems.Add("pressure_"+res, 1, err)
				errs = append(errs, fmt.Errorf("/proc/pressure/%s: %w", res, err))
			}
			continue
		}
		found++
		if st.Some != nil {
			pressureStalled.Send(ch, float64(st.Some.Total)/1e6, res, "some")
		}
		if st.Full != nil {
			pressureStalled.Send(ch, float64(st.Full.Total)/1e6, res, "full")
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if found == 0 {
		return fmt.Errorf("%w: no /proc/pressure files", collector.ErrNoData)
	}
	return nil
}
