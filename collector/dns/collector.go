// Package dns is the opt-in "dns" collector (--collector.dns): it counts
// the DNS lookups that leave or reach this host, how they fare, and which
// processes make them — the reverse-lookup storm of incident 4, where a
// consumer's per-message PTR lookup halved its throughput and was found only
// with tcpdump.
//
// Capture (ring.go, filter.go): an AF_PACKET socket with a classic BPF
// filter passing only UDP and TCP port 53. Parsing (parse.go, tcp.go): IP,
// UDP/TCP and the DNS header and first question, with
// golang.org/x/net/dns/dnsmessage. Matching (match.go, track.go): a bounded
// table of pending queries gives latency, timeouts, retransmissions, late
// and unmatched responses. Attribution (ebpf.go, procsample.go): eBPF
// cgroup sock_addr programs count lookups per process, with a /proc
// sampling fallback. See docs/dns.md.
package dns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

func init() {
	collector.Register("dns",
		"DNS lookups, latency, failures and the processes making them, from port-53 packets (AF_PACKET) and eBPF or /proc",
		false, func(cfg collector.Config) (collector.Collector, error) {
			o, err := flags.validated()
			if err != nil {
				return nil, err
			}
			return newCollector(o, cfg), nil
		})
}

const (
	expiryPeriod = 100 * time.Millisecond // timeouts are counted within this of --dns.timeout
	ebpfDrain    = 5 * time.Second        // map entries of exited processes are freed at least this often
	processIdle  = 10 * time.Minute
)

// captureBackoff is the wait between two attempts to open the capture.
var captureBackoff = collector.Backoff{Min: time.Second, Max: time.Minute}

// Collector is the dns collector. The capture goroutine (Run) owns the
// tracker's tables; scrapes read atomics.
type Collector struct {
	o   options
	cfg collector.Config
	tr  *tracker

	captureState *collector.StateLog
	drainState   *collector.StateLog

	up            atomic.Bool
	capMu         sync.Mutex
	src           packetSource
	passed, drops uint64 // over every capture opened so far, under capMu

	attrMu sync.Mutex
	attr   attribution // nil in mode none
	procs  *processTable
}

// packetSource is an open capture: the AF_PACKET ring, or a test's fake.
// Only the capture goroutine calls read and Close; stats is safe for
// concurrent use.
type packetSource interface {
	// read hands fn the packets that arrive until deadline: each one's
	// bytes from its IP header on (valid during the call) and its kernel
	// timestamp in Unix ns. It returns a time before which every captured
	// packet has been handed over, for counting timeouts, or why the
	// capture failed.
	read(deadline time.Time, fn func(pkt []byte, ts int64)) (seen time.Time, err error)
	// stats returns the packets that passed the kernel filter and, of
	// those, the ones the kernel dropped, since the last call.
	stats() (passed, drops uint64)
	Close() error
}

// attribution is a per-process lookup counter: eBPF or /proc sampling.
type attribution interface {
	mode() string
	drain(*processTable) error
	Close() error
}

// newCollector builds the collector from validated options. A host
// without the needed capabilities, eBPF or cgroup v2 gets a collector that
// says so in its log (once) and in stall_dns_capture_up and
// stall_dns_attribution_mode.
func newCollector(o options, cfg collector.Config) *Collector {
	if o.open == nil {
		o.open = func() (packetSource, error) { return openCapture(o.iface, o.socketBuffer) }
	}
	c := &Collector{
		o: o, cfg: cfg,
		procs:        newProcessTable(o.maxProcesses, processIdle),
		captureState: collector.NewStateLog(cfg.Logger),
		drainState:   collector.NewStateLog(cfg.Logger),
	}
	c.tr = newTracker(o, cfg.Problems)
	c.attr = c.startAttribution()
	return c
}

// startAttribution sets up the configured mode, falling back as the mode
// allows; each failure is logged once with its reason.
func (c *Collector) startAttribution() attribution {
	mode := c.o.attribution
	if mode == "auto" || mode == "ebpf" {
		a, err := c.startEBPF()
		if err == nil {
			return a
		}
		if mode == "ebpf" {
			c.cfg.Logger.Error("eBPF attribution unavailable; stall_dns_process_lookups_total is not exported (--dns.attribution=ebpf)", "err", err)
			return nil
		}
		c.cfg.Logger.Warn("eBPF attribution unavailable; falling back to /proc sampling, which sees only a fraction of short lookups (docs/dns.md)", "err", err)
	}
	if mode == "auto" || mode == "proc" {
		netFS := c.cfg.ProcFS
		if c.o.netFS != nil {
			netFS = *c.o.netFS
		}
		a, err := newProcAttribution(c.cfg.ProcFS, netFS, c.cfg.Paths.Proc)
		if err == nil {
			return a
		}
		c.cfg.Logger.Error("/proc attribution unavailable; stall_dns_process_lookups_total is not exported", "err", err)
	}
	return nil
}

func (c *Collector) startEBPF() (attribution, error) {
	root := c.o.cgroupRoot
	var private *os.File
	if root == "" {
		mp, within, err := proclabel.FindCgroup2Root(c.cfg.Paths.Proc("self", "mountinfo"))
		switch {
		case err != nil:
			f, path, perr := openCgroup2()
			if perr != nil {
				return nil, errors.Join(err, perr)
			}
			c.cfg.Logger.Info("no cgroup2 mount: the eBPF programs attach to the cgroup v2 hierarchy opened privately, mounted nowhere", "mountinfo", err)
			private, root = f, path
		case within != "/":
			c.cfg.Logger.Warn("the cgroup2 mount is a subtree of the hierarchy (a container's cgroup namespace): only processes under it are attributed; mount the host's cgroup2 and pass --dns.cgroup-root", "mount", mp, "root", within)
			root = mp
		default:
			root = mp
		}
	}
	a, err := newEBPFAttribution(root, private, c.cfg.Paths.Proc)
	if err != nil {
		return nil, err
	}
	if a.typeErr != nil {
		c.cfg.Logger.Warn("eBPF attribution attached, but not the egress program: stall_dns_process_queries_total (query types per process) is not exported", "cgroup", root, "err", a.typeErr)
	} else {
		c.cfg.Logger.Info("eBPF attribution attached", "cgroup", root)
	}
	if a.cgroupErr != nil {
		c.cfg.Logger.Warn("the kernel does not give the eBPF programs the caller's cgroup id (before 5.7): the cgroup label is read from /proc for processes still running, and is \"unknown\" for those that have exited", "err", a.cgroupErr)
	}
	return a, nil
}

// Run captures until ctx is done, reopening the capture with backoff after
// a failure, and drains the attribution in the background.
func (c *Collector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { c.attributionLoop(ctx) })
	collector.Retry(ctx, captureBackoff, c.captureState, "DNS capture", c.capture)
	wg.Wait()
}

func (c *Collector) attributionLoop(ctx context.Context) {
	c.attrMu.Lock()
	a := c.attr
	c.attrMu.Unlock()
	if a == nil {
		return
	}
	every := ebpfDrain
	if a.mode() == "proc" {
		every = c.o.procInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.attrMu.Lock()
			if err := a.Close(); err != nil {
				c.cfg.Logger.Warn("detaching the eBPF programs", "err", err)
			}
			c.attr = nil
			c.attrMu.Unlock()
			return
		case <-t.C:
			c.attrMu.Lock()
			c.drainLocked()
			c.attrMu.Unlock()
		}
	}
}

func (c *Collector) drainLocked() {
	if c.attr == nil {
		return
	}
	if err := c.attr.drain(c.procs); err != nil {
		c.drainState.Failed("reading per-process DNS counts failed", "read", err, "mode", c.attr.mode())
		return
	}
	c.drainState.OK("reading per-process DNS counts recovered", "mode", c.attr.mode())
}

// capture is one attempt of the capture loop: it opens the capture and
// counts its packets until it fails or ctx ends, counting timeouts every
// expiryPeriod even when no packet arrives.
func (c *Collector) capture(ctx context.Context, opened func()) error {
	src, err := c.o.open()
	if err != nil {
		return err
	}
	opened()
	c.capMu.Lock()
	c.src = src
	c.capMu.Unlock()
	c.up.Store(true)
	defer func() {
		c.up.Store(false)
		c.captureStats()
		c.capMu.Lock()
		c.src = nil
		c.capMu.Unlock()
		src.Close()
	}()
	var lastExpiry time.Time
	for ctx.Err() == nil {
		seen, err := src.read(time.Now().Add(expiryPeriod), c.safeHandle)
		if err != nil {
			return err
		}
		if seen.Sub(lastExpiry) >= expiryPeriod {
			c.tr.expire(seen.UnixNano())
			lastExpiry = seen
		}
	}
	return ctx.Err()
}

// safeHandle counts one packet; a panic (a bug, never expected) skips the
// packet and is counted and logged once instead of ending the exporter.
func (c *Collector) safeHandle(b []byte, ts int64) {
	defer func() {
		if r := recover(); r != nil {
			c.cfg.Problems.Add("dns_panic", 1, fmt.Errorf("handling a captured packet panicked: %v", r))
		}
	}()
	c.tr.handle(b, ts)
}

// captureStats returns packets passed by the kernel filter and dropped by
// the kernel, over every capture opened so far.
func (c *Collector) captureStats() (passed, drops uint64) {
	c.capMu.Lock()
	defer c.capMu.Unlock()
	if c.src != nil {
		p, d := c.src.stats()
		c.passed += p
		c.drops += d
	}
	return c.passed, c.drops
}

// Update sends the metrics. Labelled counters appear at their first
// event; the unlabelled ones are always sent.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	tr := c.tr
	up := 0.0
	if c.up.Load() {
		up = 1
	}
	captureUpDesc.Send(ch, up)
	_, drops := c.captureStats()
	dropsDesc.Send(ch, float64(drops))
	packetsDesc.Send(ch, float64(tr.packets.Load()))
	names := tr.resolvers()
	for i, name := range names {
		r := i
		if i == len(names)-1 {
			r = len(tr.queries) - 1 // "other"
		}
		for q := range numQTypes {
			sendNonZero(ch, queriesDesc, &tr.queries[r][q], qtypeNames[q], name)
		}
	}
	for q := range numQTypes {
		for rc := range numRCodes {
			sendNonZero(ch, responsesDesc, &tr.responses[q][rc], qtypeNames[q], rcodeNames[rc])
		}
		sendNonZero(ch, timeoutsDesc, &tr.timeouts[q], qtypeNames[q])
		sendNonZero(ch, truncatedDesc, &tr.truncated[q], qtypeNames[q])
		sendNonZero(ch, retransmitsDesc, &tr.retransmits[q], qtypeNames[q])
	}
	reverseDesc.Send(ch, float64(tr.reverse.Load()))
	lateDesc.Send(ch, float64(tr.late.Load()))
	unmatchedDesc.Send(ch, float64(tr.unmatched.Load()))
	overflowsDesc.Send(ch, float64(tr.overflows.Load()))
	pendingDesc.Send(ch, float64(tr.nPending.Load()))
	tcpUnsyncedDesc.Send(ch, float64(tr.tcpUnsynced.Load()))
	tr.durationVec.Collect(ch)

	c.attrMu.Lock()
	defer c.attrMu.Unlock()
	active := "none"
	if c.attr != nil {
		active = c.attr.mode()
		if active == "ebpf" {
			c.drainLocked() // fresh counts; the proc sampler keeps its own pace
		}
		c.procs.send(ch)
	}
	for _, m := range []string{"ebpf", "proc", "none"} {
		v := 0.0
		if m == active {
			v = 1
		}
		modeDesc.Send(ch, v, m)
	}
	return ctx.Err()
}

func sendNonZero(ch chan<- prometheus.Metric, m collector.Metric, v *atomic.Uint64, labels ...string) {
	if n := v.Load(); n > 0 {
		m.Send(ch, float64(n), labels...)
	}
}

var _ collector.Runner = (*Collector)(nil)
