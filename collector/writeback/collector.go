package writeback

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

func init() {
	collector.Register("writeback",
		"Who is paused by dirty-page throttling and for how long (eBPF on writeback:balance_dirty_pages), and who dirties the page cache (/proc/<pid>/io, read only past the background threshold)",
		false, func(cfg collector.Config) (collector.Collector, error) {
			o, err := flags.validated()
			if err != nil {
				return nil, err
			}
			return newCollector(o, cfg), nil
		})
}

// processIdle is how long a process must have had nothing counted before
// a new one may take its series (proclabel.Table).
const processIdle = 10 * time.Minute

// counts are one series' values.
type counts struct {
	pauseMS, pauses uint64
	dirtied         uint64
}

// Collector is the writeback collector. Scrapes drain the program's map
// and read /proc under mu.
type Collector struct {
	cfg collector.Config

	mu        sync.Mutex
	pause     *pauseSource // nil when the program could not be loaded
	dirtiers  *dirtiers
	procs     *proclabel.Table[counts]
	drainLog  *collector.StateLog
	dirtyLog  *collector.StateLog
	warnedIO  bool
	closeOnce sync.Once
}

// newCollector builds the collector from validated options. Where the
// program cannot be loaded it says why in the log, once, and exports
// stall_dirty_throttle_pause_source_up 0; the dirtied bytes do not need it.
func newCollector(o options, cfg collector.Config) *Collector {
	c := &Collector{
		cfg:   cfg,
		procs: proclabel.NewTable[counts](o.maxProcesses, processIdle),
		dirtiers: &dirtiers{
			fs: cfg.ProcFS, vmstat: cfg.Paths.Proc("vmstat"), procPath: cfg.Paths.Proc, top: o.maxProcesses,
		},
		drainLog: collector.NewStateLog(cfg.Logger),
		dirtyLog: collector.NewStateLog(cfg.Logger),
	}
	s, err := startPause(o, cfg)
	if err != nil {
		cfg.Logger.Warn("dirty-throttle pauses are not counted per process (stall_dirty_throttle_pause_source_up 0); the per-cgroup dirty state, io.pressure and the host's throttled seconds remain (docs/writeback.md)", "err", err)
		return c
	}
	c.pause = s
	cfg.Logger.Info("counting dirty-throttle pauses per process", "tracepoint", "writeback:balance_dirty_pages", "id", s.layout.id, "fields", s.layout.generation)
	if s.layout.generation == unknownGeneration {
		cfg.Logger.Warn("the balance_dirty_pages event has neither the 6.15+ nor the older field names: only its pause field is read; check the counts against the tracepoint's own output", "fields", s.layout.generation)
	}
	if s.cgroupErr != nil {
		cfg.Logger.Warn("the kernel does not give the program the paused task's cgroup id: the cgroup label is read from /proc for processes still running, and is \"unknown\" for those that have exited", "err", s.cgroupErr)
	}
	return c
}

// startPause reads the event's layout and loads and attaches the program.
func startPause(o options, cfg collector.Config) (*pauseSource, error) {
	data, from, err := readEventFormat(cfg.Paths.Sys)
	if err != nil {
		return nil, err
	}
	f, err := parseFormat(string(data))
	if err != nil {
		return nil, errors.Join(errors.New("parsing the balance_dirty_pages format from "+from), err)
	}
	l, err := layoutOf(f)
	if err != nil {
		return nil, err
	}
	root := o.cgroupRoot
	if root == "" {
		// Without a cgroup2 mount, ids cannot be resolved: cgroups are
		// named from /proc/<pid>/cgroup, "unknown" for exited processes.
		root, _, _ = proclabel.FindCgroup2Root(cfg.Paths.Proc("self", "mountinfo"))
	}
	return newPauseSource(l, o.mapEntries, root, cfg.Paths.Proc)
}

// Update drains the program's counts and, past the host's background
// threshold or when tasks were paused since the last scrape, reads who
// dirtied what, then sends every process's series.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	up, paused := 0.0, false
	if c.pause != nil {
		up = 1
		sleeps, err := c.pause.drain(c.procs)
		paused = sleeps > 0
		if err != nil {
			c.drainLog.Failed("reading the dirty-throttle pauses failed", "read", err)
		} else {
			c.drainLog.OK("reading the dirty-throttle pauses recovered")
		}
	}
	pauseSourceUpDesc.Send(ch, up)
	active, unreadable, err := c.dirtiers.read(c.procs, paused)
	if err != nil {
		c.dirtyLog.Failed("reading who dirtied pages failed", "read", err)
	} else {
		c.dirtyLog.OK("reading who dirtied pages recovered")
	}
	if unreadable > 0 && !c.warnedIO {
		c.warnedIO = true
		c.cfg.Logger.Warn("some processes' /proc/<pid>/io could not be read (ptrace access mode read: another user's needs CAP_SYS_PTRACE, and CAP_DAC_READ_SEARCH when the exporter is not root; in a container, an AppArmor profile may refuse it): what they dirtied is not counted", "processes", unreadable)
	}
	v := 0.0
	if active {
		v = 1
	}
	dirtiersActiveDesc.Send(ch, v)
	c.procs.Each(func(k proclabel.Key, n *counts) {
		other := k == proclabel.OtherKey
		if n.pauses > 0 || other && c.pause != nil {
			pauseSecondsDesc.Send(ch, float64(n.pauseMS)/1000, k.Comm, k.Main, k.Cgroup)
			pausesDesc.Send(ch, float64(n.pauses), k.Comm, k.Main, k.Cgroup)
		}
		if n.dirtied > 0 || other {
			dirtiedDesc.Send(ch, float64(n.dirtied), k.Comm, k.Main, k.Cgroup)
		}
	})
	return ctx.Err()
}

// Run only detaches the program when the exporter stops.
func (c *Collector) Run(ctx context.Context) {
	<-ctx.Done()
	c.Close()
}

// Close detaches the program and frees its maps.
func (c *Collector) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.pause != nil {
			if err := c.pause.Close(); err != nil {
				c.cfg.Logger.Warn("detaching the eBPF program", "err", err)
			}
			c.pause = nil
		}
	})
}

var _ collector.Runner = (*Collector)(nil)
