package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The kmsg collector counts kernel log events that precede or explain
// stalls (allocation failures, hung tasks, OOM kills, I/O errors, soft
// lockups) from /dev/kmsg, read by one background goroutine. See
// docs/sampler.md.

const (
	kmsgBufSize    = 16 << 10 // a record is at most 8 KiB (CONSOLE_EXT_LOG_MAX) on every kernel so far
	kmsgMaxBufSize = 1 << 20
)

// kmsgBackoff spaces the reopens of the kernel log: from 1 s to once a
// minute, so granting CAP_SYSLOG or mounting the device later takes effect
// without a restart.
var kmsgBackoff = collector.Backoff{Min: time.Second, Max: time.Minute}

var (
	kmsgEventsDesc = collector.NewMetric("kernel_log_events_total",
		"Kernel log records (/dev/kmsg, kernel facility) of each stall-related event since the exporter started; lower bounds, as the kernel rate-limits them.",
		prometheus.CounterValue, "event")
	kmsgAllocOrderDesc = collector.NewMetric("kernel_page_allocation_failures_total",
		"Kernel \"page allocation failure\" reports (/dev/kmsg) by the order of the failed allocation (2^order contiguous pages; other above 10) since the exporter started; lower bounds, as the kernel logs at most one report per 10 s on current kernels.",
		prometheus.CounterValue, "order")
	kmsgRecordsDesc = collector.NewMetric("kernel_log_records_total",
		"Kernel log records read from /dev/kmsg since the exporter started, of any facility and level.",
		prometheus.CounterValue)
	kmsgLostDesc = collector.NewMetric("kernel_log_records_lost_total",
		"Kernel log records overwritten in the ring buffer before they were read (gaps in the /dev/kmsg sequence numbers).",
		prometheus.CounterValue)
	kmsgUpDesc = collector.NewMetric("kernel_log_reader_up",
		"1 while the /dev/kmsg reader is open and reading, 0 while it cannot open or read it.",
		prometheus.GaugeValue)
)

func init() {
	register("kmsg", "Kernel log events (page allocation failures, hung tasks, OOM kills, I/O errors, soft lockups), from /dev/kmsg",
		func(cfg collector.Config, s settings) *kmsgCollector {
			path := cfg.Paths.Root("/dev/kmsg")
			return newKmsgCollector(openDevKmsg(path), s.kmsgFromBoot, deviceFilterFor(cfg.Paths, s.devices),
				cfg.Logger.With("path", path), cfg.Problems)
		})
}

// kmsgSource is one open /dev/kmsg: each Read returns one whole record, or
// EPIPE when the next record was overwritten (the following Read returns
// the oldest record still there), or EINVAL when p is too small for the
// record. Close must make a blocked Read return.
type kmsgSource interface {
	Read(p []byte) (int, error)
	Close() error
}

// kmsgOpener opens the kernel log; fromStart positions at the oldest
// record in the buffer, otherwise after the newest.
type kmsgOpener func(fromStart bool) (kmsgSource, error)

// openDevKmsg opens the real device. os.File puts /dev/kmsg (a pollable
// character device) in non-blocking mode on the runtime poller, so Close
// from another goroutine ends a blocked Read.
func openDevKmsg(path string) kmsgOpener {
	return func(fromStart bool) (kmsgSource, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		if !fromStart {
			if _, err := f.Seek(0, io.SeekEnd); err != nil {
				f.Close()
				return nil, err
			}
		}
		return f, nil
	}
}

// kmsgCollector is the "kmsg" collector. The reader goroutine (Run) owns
// the read state; Update only loads atomics, so a flood of records never
// slows a scrape and a slow scrape never slows the reader.
type kmsgCollector struct {
	open     kmsgOpener
	fromBoot bool // --kmsg.from-boot
	logger   *slog.Logger
	state    *collector.StateLog // open and read failures
	problems *collector.Problems

	src    kmsgSource  // opened at construction, handed to Run
	opened atomic.Bool // the kernel log was opened at least once: counters mean something

	buf      []byte
	lastSeq  uint64
	haveSeq  bool
	classify kmsgClassifier // survives reopens: a kill may be read after one, its announcement before

	up      atomic.Bool
	records atomic.Uint64
	lost    atomic.Uint64
	events  [kmsgEventCount]atomic.Uint64
	// orders splits events[kmsgPageAllocationFailure] by the order label:
	// order 0 (no free page at all) and higher orders (fragmentation) are
	// different troubles with different alerts.
	orders [kmsgOrderLabels]atomic.Uint64
}

// newKmsgCollector opens the kernel log at once, so a missing device or
// missing permission (dmesg_restrict without CAP_SYSLOG) is reported once at
// start. Run then retries with kmsgBackoff; until the first successful open
// the collector exports only stall_kernel_log_reader_up 0, so the blind spot
// is visible. devices decides which I/O errors are io_error_excluded; nil
// leaves out none.
func newKmsgCollector(open kmsgOpener, fromBoot bool, devices *deviceFilter, logger *slog.Logger, problems *collector.Problems) *kmsgCollector {
	k := &kmsgCollector{open: open, fromBoot: fromBoot, logger: logger, state: collector.NewStateLog(logger),
		problems: problems, buf: make([]byte, kmsgBufSize)}
	if devices != nil {
		k.classify.excluded = devices.excludesIOError
	}
	src, err := open(fromBoot)
	if err != nil {
		k.state.Failed("cannot read the kernel log, so kernel log events are not counted until it can "+
			"(needs CAP_SYSLOG when kernel.dmesg_restrict=1, and /dev/kmsg in the container); retrying with backoff up to once a minute",
			"open", err)
		return k
	}
	k.src = src
	k.opened.Store(true)
	k.up.Store(true)
	return k
}

// Run reads records until ctx is done, reopening after errors
// (collector.Retry). After a reopen it reads from the oldest record and
// skips those already counted, so nothing is counted twice and records lost
// meanwhile show up as a sequence gap. On a kernel whose /dev/kmsg cannot be
// read (errKmsgWriteOnly) it warns once and reads no more.
func (k *kmsgCollector) Run(ctx context.Context) {
	src := k.src
	k.src = nil
	collector.Retry(ctx, kmsgBackoff, k.state, "the kernel log reader", func(ctx context.Context, opened func()) error {
		if src == nil {
			var err error
			if src, err = k.open(k.haveSeq || k.fromBoot); err != nil {
				return err
			}
		}
		opened()
		if !k.opened.Swap(true) {
			k.logger.Info("kernel log reader opened; kernel log events are counted from now on")
		}
		k.up.Store(true)
		err := k.readAll(ctx, src)
		src = nil
		k.up.Store(false)
		if errors.Is(err, errKmsgWriteOnly) {
			k.opened.Store(false) // no counter means anything: export reader_up 0 only
			k.logger.Warn("this kernel's /dev/kmsg cannot be read (Linux < 3.5); kernel-log events are unavailable", "err", err)
			return fmt.Errorf("%w: %w", collector.ErrStop, err)
		}
		return err
	})
}

// errKmsgWriteOnly: /dev/kmsg opens but every read fails with EINVAL
// whatever the buffer size. Before Linux 3.5 the device only accepted
// writes (printk from user space); the record interface that reads came
// with 3.5 (commit e11fea92e13f). That does not change until a reboot, so
// the reader gives up instead of retrying.
var errKmsgWriteOnly = errors.New("this kernel's /dev/kmsg cannot be read (Linux < 3.5)")

// readAll reads records from src until an error other than EPIPE, or until
// ctx is done, and closes src.
func (k *kmsgCollector) readAll(ctx context.Context, src kmsgSource) error {
	stop := context.AfterFunc(ctx, func() { src.Close() })
	defer func() {
		if stop() { // ctx was not done: AfterFunc did not close src
			src.Close()
		}
	}()
	read := 0
	for {
		n, err := src.Read(k.buf)
		switch {
		case err == nil:
			read++
			k.safeHandle(k.buf[:n])
		case errors.Is(err, syscall.EPIPE):
			// Records were overwritten; the next Read returns the oldest
			// one left, and handle counts the sequence gap.
		case errors.Is(err, syscall.EINVAL) && len(k.buf) < kmsgMaxBufSize:
			k.buf = make([]byte, 2*len(k.buf)) // a record larger than the buffer
		case errors.Is(err, syscall.EINVAL) && read == 0:
			// No record is 1 MiB: a device that refuses every read even
			// then has no read operation at all (Linux < 3.5).
			return fmt.Errorf("%w: %w", errKmsgWriteOnly, err)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return err
		}
	}
}

// safeHandle handles one record; a panic skips the record and is counted
// and logged once as a problem.
func (k *kmsgCollector) safeHandle(b []byte) {
	defer k.problems.Recover("kmsg_panic", "handling a /dev/kmsg record")
	k.handle(b)
}

// handle counts one record.
func (k *kmsgCollector) handle(b []byte) {
	r, err := parseKmsgRecord(b)
	if err != nil {
		k.problems.Add("kmsg_record", 1, err)
		return
	}
	if k.haveSeq {
		if r.Seq <= k.lastSeq {
			return // already counted before a reopen
		}
		if gap := r.Seq - k.lastSeq - 1; gap > 0 {
			k.lost.Add(gap)
			k.classify.recordsLost()
		}
	}
	k.lastSeq, k.haveSeq = r.Seq, true
	k.records.Add(1)
	if r.Facility == 0 { // user space cannot log as the kernel facility
		e, order := k.classify.event(r.Message)
		if e != kmsgNoEvent {
			k.events[e].Add(1)
		}
		if e == kmsgPageAllocationFailure {
			k.orders[order.label()].Add(1)
			if order == kmsgOrderUnparsed {
				k.problems.Add("kmsg_alloc_order", 1, errKmsgAllocOrder)
			}
		}
	}
}

// Update sends the counters. Every event is sent, zero or not, so rates and
// increase() work from the first scrape.
func (k *kmsgCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if !k.opened.Load() {
		kmsgUpDesc.Send(ch, 0)
		return nil
	}
	up := 0.0
	if k.up.Load() {
		up = 1
	}
	kmsgUpDesc.Send(ch, up)
	kmsgRecordsDesc.Send(ch, float64(k.records.Load()))
	kmsgLostDesc.Send(ch, float64(k.lost.Load()))
	for e := kmsgEvent(1); e < kmsgEventCount; e++ {
		kmsgEventsDesc.Send(ch, float64(k.events[e].Load()), e.String())
	}
	for o, name := range kmsgOrderNames {
		kmsgAllocOrderDesc.Send(ch, float64(k.orders[o].Load()), name)
	}
	return ctx.Err()
}

var _ collector.Runner = (*kmsgCollector)(nil)
