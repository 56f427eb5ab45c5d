// Package dns is the opt-in "dns" collector (--collector.dns): it counts
// the DNS lookups that leave or reach this host, how they fare, and which
// processes make them — the reverse-lookup storm of incident 4, where a
// consumer's per-message PTR lookup halved its throughput and was found only
// with tcpdump.
//
// Capture (capture.go, filter.go): an AF_PACKET socket with a classic BPF
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
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

var (
	interfaceFlag = kingpin.Flag("dns.interface",
		"Capture DNS on this interface only; by default on all interfaces of the exporter's network namespace.").Default("").String()
	timeoutFlag = kingpin.Flag("dns.timeout",
		"A query with no response after this long counts as timed out (glibc and the JDK wait 5 s per try).").Default("5s").Duration()
	maxPendingFlag = kingpin.Flag("dns.max-pending",
		fmt.Sprintf("Queries tracked while waiting for a response; each costs %d bytes, allocated as used.", pendingEntrySize)).Default("16384").Int()
	maxTCPFlowsFlag = kingpin.Flag("dns.max-tcp-flows",
		fmt.Sprintf("DNS-over-TCP connection directions followed at once; each costs about %d bytes.", tcpFlowSize)).Default("1024").Int()
	maxResolversFlag = kingpin.Flag("dns.max-resolvers",
		"Resolver addresses with their own resolver label, in the order first queried; later ones are \"other\".").Default("8").Int()
	maxProcessesFlag = kingpin.Flag("dns.max-processes",
		"(Process name, cgroup) pairs with their own stall_dns_process_lookups_total series; the rest are \"other\".").Default("20").Int()
	attributionFlag = kingpin.Flag("dns.attribution",
		"Per-process attribution: auto (ebpf, else proc), ebpf (cgroup sock_addr hooks; needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN before 5.8, and cgroup v2), proc (sample /proc; a lower bound), none.").
		Default("auto").Enum("auto", "ebpf", "proc", "none")
	cgroupRootFlag = kingpin.Flag("dns.cgroup-root",
		"cgroup v2 directory the eBPF programs attach to; by default the cgroup2 mount found in /proc/self/mountinfo (in a container, mount the host's and name it here).").Default("").String()
	procIntervalFlag = kingpin.Flag("dns.proc-interval",
		"Interval of the /proc sampler in proc attribution mode (each sample reads /proc/net/{udp,tcp}{,6}, and every process's fds when a socket to port 53 is open).").Default("1s").Duration()
	socketBufferFlag = kingpin.Flag("dns.socket-buffer",
		"Receive buffer of the capture socket in bytes (SO_RCVBUFFORCE, else SO_RCVBUF capped by net.core.rmem_max); packets beyond it are dropped and counted.").Default("4194304").Int()
)

func init() {
	collector.Register("dns",
		"DNS lookups, latency, failures and the processes making them, from port-53 packets (AF_PACKET) and eBPF or /proc",
		false, func(cfg collector.Config) (collector.Collector, error) {
			return New(Options{
				Interface:    *interfaceFlag,
				Timeout:      *timeoutFlag,
				MaxPending:   *maxPendingFlag,
				MaxTCPFlows:  *maxTCPFlowsFlag,
				MaxResolvers: *maxResolversFlag,
				MaxProcesses: *maxProcessesFlag,
				Attribution:  *attributionFlag,
				CgroupRoot:   *cgroupRootFlag,
				ProcInterval: *procIntervalFlag,
				SocketBuffer: *socketBufferFlag,
				Paths:        cfg.Paths,
				Logger:       cfg.Logger,
				Problems:     cfg.Problems,
			})
		})
}

// Options configure the collector; the flags of the same names fill them.
type Options struct {
	Interface    string
	Timeout      time.Duration
	MaxPending   int
	MaxTCPFlows  int
	MaxResolvers int
	MaxProcesses int
	Attribution  string // auto, ebpf, proc, none
	CgroupRoot   string
	ProcInterval time.Duration
	SocketBuffer int
	Paths        collector.Paths
	Logger       *slog.Logger
	Problems     *collector.Problems

	// open opens the capture socket; tests open it in another network
	// namespace. Default: openCapture(Interface, SocketBuffer).
	open func() (*captureSocket, error)
	// procNet is where proc mode reads net/{udp,tcp}{,6}; default
	// Paths.Procfs (the exporter's own network namespace).
	procNet string
}

const (
	minBackoff   = time.Second
	maxBackoff   = time.Minute
	expiryPeriod = 100 * time.Millisecond // timeouts are counted within this of --dns.timeout
	ebpfDrain    = 5 * time.Second        // map entries of exited processes are freed at least this often
	processIdle  = 10 * time.Minute
)

// Collector is the dns collector. The capture goroutine (Run) owns the
// tracker's tables; scrapes read atomics.
type Collector struct {
	o        Options
	logger   *slog.Logger
	tr       *tracker
	duration *prometheus.HistogramVec

	up          atomic.Bool
	capMu       sync.Mutex
	sock        *captureSocket
	closedStats [2]uint64 // passed, drops of sockets already closed

	attrMu   sync.Mutex
	attr     attribution // nil in mode none
	procs    *processTable
	drainErr bool // the last drain failed: log transitions only
}

// attribution is a per-process lookup counter: eBPF or /proc sampling.
type attribution interface {
	mode() string
	drain(*processTable) error
	Close() error
}

var modes = []string{"ebpf", "proc", "none"}

// New builds the collector. It fails only on invalid options; a host
// without the needed capabilities, eBPF or cgroup v2 gets a collector that
// says so in its log (once) and in stall_dns_capture_up and
// stall_dns_attribution_mode.
func New(o Options) (*Collector, error) {
	switch {
	case o.Timeout <= 0:
		return nil, errors.New("--dns.timeout must be positive")
	case o.MaxPending < 1 || o.MaxTCPFlows < 1 || o.MaxResolvers < 1 || o.MaxProcesses < 1:
		return nil, errors.New("--dns.max-pending, --dns.max-tcp-flows, --dns.max-resolvers and --dns.max-processes must be at least 1")
	case o.ProcInterval <= 0:
		return nil, errors.New("--dns.proc-interval must be positive")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Problems == nil {
		o.Problems = collector.NewProblems("dns", o.Logger)
	}
	if o.Paths.Procfs == "" {
		o.Paths.Procfs = "/proc"
	}
	if o.open == nil {
		o.open = func() (*captureSocket, error) { return openCapture(o.Interface, o.SocketBuffer) }
	}
	c := &Collector{o: o, logger: o.Logger, duration: newDurationVec(), procs: newProcessTable(o.MaxProcesses, processIdle)}
	c.tr = newTracker(trackerOptions{
		MaxPending:   o.MaxPending,
		MaxTCPFlows:  o.MaxTCPFlows,
		MaxResolvers: o.MaxResolvers,
		TimeoutNS:    int64(o.Timeout),
		Problems:     o.Problems,
		Duration:     c.duration,
	})
	c.attr = c.startAttribution()
	return c, nil
}

// startAttribution sets up the configured mode, falling back as the mode
// allows; each failure is logged once with its reason.
func (c *Collector) startAttribution() attribution {
	mode := c.o.Attribution
	if mode == "auto" || mode == "ebpf" {
		a, err := c.startEBPF()
		if err == nil {
			return a
		}
		if mode == "ebpf" {
			c.logger.Error("eBPF attribution unavailable; stall_dns_process_lookups_total is not exported (--dns.attribution=ebpf)", "err", err)
			return nil
		}
		c.logger.Warn("eBPF attribution unavailable; falling back to /proc sampling, which sees only a fraction of short lookups (docs/dns.md)", "err", err)
	}
	if mode == "auto" || mode == "proc" {
		netPath := c.o.procNet
		if netPath == "" {
			netPath = c.o.Paths.Procfs
		}
		a, err := newProcAttribution(c.o.Paths.Procfs, netPath)
		if err == nil {
			return a
		}
		c.logger.Error("/proc attribution unavailable; stall_dns_process_lookups_total is not exported", "err", err)
	}
	return nil
}

func (c *Collector) startEBPF() (attribution, error) {
	root := c.o.CgroupRoot
	if root == "" {
		mp, within, err := findCgroup2Root(c.o.Paths.Proc("self", "mountinfo"))
		if err != nil {
			return nil, err
		}
		if within != "/" {
			c.logger.Warn("the cgroup2 mount is a subtree of the hierarchy (a container's cgroup namespace): only processes under it are attributed; mount the host's cgroup2 and pass --dns.cgroup-root", "mount", mp, "root", within)
		}
		root = mp
	}
	a, err := newEBPFAttribution(root, c.o.Paths.Proc)
	if err != nil {
		return nil, err
	}
	if a.typeErr != nil {
		c.logger.Warn("eBPF attribution attached, but not the egress program: stall_dns_process_queries_total (query types per process) is not exported", "cgroup", root, "err", a.typeErr)
	} else {
		c.logger.Info("eBPF attribution attached", "cgroup", root)
	}
	if a.cgroupErr != nil {
		c.logger.Warn("the kernel does not give the eBPF programs the caller's cgroup id (before 5.7): the cgroup label is read from /proc for processes still running, and is \"unknown\" for those that have exited", "err", a.cgroupErr)
	}
	return a, nil
}

// Run captures until ctx is done, reopening the socket with backoff after
// a failure, and drains the attribution in the background.
func (c *Collector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.attributionLoop(ctx)
	}()
	c.captureLoop(ctx)
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
		every = c.o.ProcInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.attrMu.Lock()
			if err := a.Close(); err != nil {
				c.logger.Warn("detaching the eBPF programs", "err", err)
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
	err := c.attr.drain(c.procs)
	switch {
	case err != nil && !c.drainErr:
		c.logger.Warn("reading per-process DNS counts failed; repeats at debug level", "mode", c.attr.mode(), "err", err)
	case err != nil:
		c.logger.Debug("reading per-process DNS counts failed", "mode", c.attr.mode(), "err", err)
	case c.drainErr:
		c.logger.Info("reading per-process DNS counts recovered", "mode", c.attr.mode())
	}
	c.drainErr = err != nil
}

func (c *Collector) captureLoop(ctx context.Context) {
	backoff := minBackoff
	failing := false
	for ctx.Err() == nil {
		sock, err := c.o.open()
		if err != nil {
			if !failing {
				c.logger.Warn("DNS capture unavailable; retrying with backoff, repeats at debug level", "err", err)
			} else {
				c.logger.Debug("DNS capture still unavailable", "err", err, "retry_in", backoff)
			}
			failing = true
			if !collector.Sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if failing {
			c.logger.Info("DNS capture open")
		}
		backoff = minBackoff // it opened: a later failure (an interface that went and came back) starts afresh
		c.capMu.Lock()
		c.sock = sock
		c.capMu.Unlock()
		c.up.Store(true)
		stop := context.AfterFunc(ctx, func() { sock.Close() })
		err = c.readLoop(sock)
		stop()
		sock.Close()
		c.up.Store(false)
		c.capMu.Lock()
		passed, drops := sock.stats()
		c.closedStats[0] += passed
		c.closedStats[1] += drops
		c.sock = nil
		c.capMu.Unlock()
		if ctx.Err() != nil {
			return
		}
		c.logger.Warn("DNS capture stopped; reopening with backoff", "err", err, "retry_in", backoff)
		failing = true
		if !collector.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// readLoop reads and counts packets until the socket fails or is closed,
// counting timeouts every expiryPeriod even when no packet arrives.
func (c *Collector) readLoop(sock *captureSocket) error {
	var deadline time.Time
	lastExpiry := time.Now()
	for {
		now := time.Now()
		if deadline.Sub(now) < expiryPeriod {
			deadline = now.Add(2 * expiryPeriod)
			if err := sock.setDeadline(deadline); err != nil {
				return err
			}
		}
		b, ts, err := sock.next()
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if err == nil {
			c.safeHandle(b, ts)
		}
		if now := time.Now(); now.Sub(lastExpiry) >= expiryPeriod {
			c.tr.expire(now.UnixNano())
			lastExpiry = now
		}
	}
}

// safeHandle counts one packet; a panic (a bug, never expected) skips the
// packet and is counted and logged once instead of ending the exporter.
func (c *Collector) safeHandle(b []byte, ts int64) {
	defer func() {
		if r := recover(); r != nil {
			c.o.Problems.Add("dns_panic", 1, fmt.Errorf("handling a captured packet panicked: %v", r))
		}
	}()
	c.tr.handle(b, ts)
}

// captureStats returns packets passed by the kernel filter and dropped by
// the kernel, over every socket opened so far.
func (c *Collector) captureStats() (passed, drops uint64) {
	c.capMu.Lock()
	defer c.capMu.Unlock()
	passed, drops = c.closedStats[0], c.closedStats[1]
	if c.sock != nil {
		p, d := c.sock.stats()
		passed += p
		drops += d
	}
	return passed, drops
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
	c.duration.Collect(ch)

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
	for _, m := range modes {
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
