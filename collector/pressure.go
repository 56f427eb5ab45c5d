package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	Register("pressure", true, newPressureCollector)
}

var pressureStalled = NewMetric("pressure_stalled_seconds_total",
	"Time in which some (scope=some) or all non-idle (scope=full) tasks were stalled on the resource, from the total= field of /proc/pressure/<resource> (PSI, 4.20+; irq 6.1+), in seconds.",
	prometheus.CounterValue, "resource", "scope")

// psiResources are the /proc/pressure files; irq exists from 6.1 with
// CONFIG_IRQ_TIME_ACCOUNTING.
var psiResources = [...]string{"cpu", "io", "memory", "irq"}

// PSI is one /proc/pressure file: the total= stall time of its "some" and
// "full" lines, in microseconds.
type PSI struct {
	Some, Full       uint64
	HasSome, HasFull bool
}

// ParsePSI parses a /proc/pressure file: lines
// "some avg10=0.00 avg60=0.00 avg300=0.00 total=123" and the same for
// "full". Lines with another first word are skipped (a future kernel may
// add some). A some or full line of another shape is an error: the
// resource is not exported, as a half-read file could mix generations. It
// does not allocate unless a line is malformed.
func ParsePSI(data []byte) (PSI, error) {
	var p PSI
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		rest := line
		var total *uint64
		switch kind := samplerNextField(&rest); string(kind) {
		case "some":
			total, p.HasSome = &p.Some, true
		case "full":
			total, p.HasFull = &p.Full, true
		default:
			continue
		}
		for _, key := range [...]string{"avg10=", "avg60=", "avg300="} {
			v, ok := bytes.CutPrefix(samplerNextField(&rest), []byte(key))
			if !ok || !isDecimal(v) {
				return PSI{}, fmt.Errorf("pressure line %q: want %s<decimal>", truncate(line), key)
			}
		}
		v, ok := bytes.CutPrefix(samplerNextField(&rest), []byte("total="))
		if ok {
			*total, ok = parseUint(v)
		}
		if !ok || len(samplerNextField(&rest)) != 0 {
			return PSI{}, fmt.Errorf("pressure line %q: want total=<microseconds> last", truncate(line))
		}
	}
	return p, nil
}

// isDecimal reports whether b is digits with at most one '.' inside, as the
// kernel prints the PSI averages (LOAD_INT.LOAD_FRAC).
func isDecimal(b []byte) bool {
	dot := false
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(b)-1:
			dot = true
		default:
			return false
		}
	}
	return len(b) > 0
}

type pressureCollector struct {
	problems *Problems

	mu    sync.Mutex // concurrent scrapes share the files and buffer
	files [len(psiResources)]*ProcFile
	buf   []byte
}

func newPressureCollector(cfg Config) (Collector, error) {
	c := &pressureCollector{problems: cfg.Problems}
	for i, res := range psiResources {
		c.files[i] = NewProcFile(cfg.Paths.Proc("pressure", res))
	}
	return c, nil
}

// psiUnavailable reports errors that mean "this kernel has no PSI": the file
// is missing (before 4.20, CONFIG_PSI=n) or PSI is disabled at boot
// (psi=0 makes reads fail with EOPNOTSUPP).
func psiUnavailable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP)
}

func (c *pressureCollector) Update(_ context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := 0
	var errs []error
	for i, res := range psiResources {
		data, err := c.files[i].Read(c.buf)
		c.buf = data[:0]
		if err != nil {
			if !psiUnavailable(err) {
				errs = append(errs, err)
			}
			continue
		}
		found++
		st, err := ParsePSI(data)
		if err != nil {
			c.problems.Add("pressure_"+res, 1, err)
			errs = append(errs, fmt.Errorf("/proc/pressure/%s: %w", res, err))
			continue
		}
		if st.HasSome {
			pressureStalled.Send(ch, float64(st.Some)/1e6, res, "some")
		}
		if st.HasFull {
			pressureStalled.Send(ch, float64(st.Full)/1e6, res, "full")
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if found == 0 {
		return fmt.Errorf("%w: no /proc/pressure files", ErrNoData)
	}
	return nil
}
