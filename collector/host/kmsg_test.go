package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// kmsgFakeItem is one thing a kmsgFakeSource hands out: a record or an
// error (EPIPE, EIO …).
type kmsgFakeItem struct {
	rec []byte
	err error
}

// kmsgFakeSource behaves like an open /dev/kmsg: one record per Read,
// EINVAL when the buffer is too small (the record stays next), blocking
// when there is nothing to read, and Close ends a blocked Read. Made in a
// synctest bubble, a reader blocked on it is durably blocked, so
// synctest.Wait returns once it has handled everything queued.
type kmsgFakeSource struct {
	items     chan kmsgFakeItem
	closed    chan struct{}
	closeOnce sync.Once
	pending   *kmsgFakeItem
}

func newKmsgFakeSource(capacity int) *kmsgFakeSource {
	return &kmsgFakeSource{items: make(chan kmsgFakeItem, capacity), closed: make(chan struct{})}
}

func (f *kmsgFakeSource) Read(p []byte) (int, error) {
	if f.pending == nil {
		select {
		case it := <-f.items:
			f.pending = &it
		case <-f.closed:
			return 0, os.ErrClosed
		}
	}
	it := f.pending
	if it.err == nil && len(p) < len(it.rec) {
		return 0, syscall.EINVAL
	}
	f.pending = nil
	if it.err != nil {
		return 0, it.err
	}
	return copy(p, it.rec), nil
}

func (f *kmsgFakeSource) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

// kmsgReadFixture splits a fixture file into items: a record is a line
// that does not start with a space plus the continuation lines after it.
func kmsgReadFixture(t *testing.T, name string) (items []kmsgFakeItem, expected string) {
	t.Helper()
	f, err := os.Open(filepath.Join("fixtures", "kmsg", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# Expected: "):
			expected = strings.TrimPrefix(line, "# Expected: ")
		case line == "#EPIPE":
			items = append(items, kmsgFakeItem{err: syscall.EPIPE})
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, " "):
			last := &items[len(items)-1]
			last.rec = append(last.rec, line+"\n"...)
		default:
			items = append(items, kmsgFakeItem{rec: []byte(line + "\n")})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return items, expected
}

// kmsgRig runs a kmsg collector, in a synctest bubble, on fake sources
// handed out by its opener.
type kmsgRig struct {
	k       *kmsgCollector
	sources chan *kmsgFakeSource // the opener takes the next one
	openErr chan error           // or fails with the next error, when one is queued
	began   time.Time
	opens   []time.Duration // when each open was tried, since the rig was made
	logs    collectortest.Logs
	cancel  context.CancelFunc
	done    chan struct{}
}

// newKmsgRig builds the collector, which opens the first source at once:
// first, or the first queued error (errs), or EIO when neither is given.
func newKmsgRig(t *testing.T, fromBoot bool, first *kmsgFakeSource, errs ...error) *kmsgRig {
	t.Helper()
	r := &kmsgRig{sources: make(chan *kmsgFakeSource, 8), openErr: make(chan error, 8), done: make(chan struct{}), began: time.Now()}
	if first != nil {
		r.sources <- first
	}
	for _, err := range errs {
		r.openErr <- err
	}
	cfg := collectortest.Config("kmsg", &r.logs)
	r.k = newKmsgCollector(r.open, fromBoot, kmsgDefaultFilter(t), cfg.Logger, cfg.Problems)
	return r
}

func (r *kmsgRig) open(bool) (kmsgSource, error) {
	r.opens = append(r.opens, time.Since(r.began))
	select {
	case err := <-r.openErr:
		return nil, err
	default:
	}
	select {
	case s := <-r.sources:
		return s, nil
	default:
		return nil, syscall.EIO
	}
}

func (r *kmsgRig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.k.Run(ctx); close(r.done) }()
}

// stop cancels Run and waits for it (in a bubble, a Run that does not
// return is a deadlock that fails the test).
func (r *kmsgRig) stop() {
	r.cancel()
	<-r.done
}

// warnings counts the warnings logged so far.
func (r *kmsgRig) warnings() int { return r.logs.Count("warn") }

// kmsgCounts renders the collector's counters as in the fixtures'
// "Expected:" lines.
// It stays a reader of a Result, not a collectortest.Compare: this compact
// form is the fixtures' format, where a Compare want spells out 20 series.
func kmsgCounts(t *testing.T, k *kmsgCollector) string {
	t.Helper()
	r := scrape(t, k)
	var b strings.Builder
	for e := kmsgEvent(1); e < kmsgEventCount; e++ {
		fmt.Fprintf(&b, "%s %v, ", e, r.Must(t, "stall_kernel_log_events_total", "event", e.String()))
	}
	fmt.Fprintf(&b, "lost %v", r.Must(t, "stall_kernel_log_records_lost_total"))
	orders := 0
	for _, m := range r.Metrics {
		if m.Name == "stall_kernel_page_allocation_failures_total" {
			orders++
		}
	}
	if orders != kmsgOrderLabels {
		t.Errorf("stall_kernel_page_allocation_failures_total has %d series, want %d (every order label, 0 or not)", orders, kmsgOrderLabels)
	}
	b.WriteString(kmsgOrderCounts(func(label string) float64 {
		return r.Must(t, "stall_kernel_page_allocation_failures_total", "order", label)
	}))
	return b.String()
}

// kmsgOrderCounts renders the non-zero page allocation failures by order,
// as in the fixtures' "Expected:" lines: "; orders 0:1 3:2 other:1", or
// "; orders none".
func kmsgOrderCounts(count func(label string) float64) string {
	var b strings.Builder
	b.WriteString("; orders")
	for _, label := range kmsgOrderNames {
		if n := count(label); n != 0 {
			fmt.Fprintf(&b, " %s:%v", label, n)
		}
	}
	if b.Len() == len("; orders") {
		b.WriteString(" none")
	}
	return b.String()
}

// onlyReaderDown checks that a scrape sends stall_kernel_log_reader_up 0
// and nothing else: the blind spot is visible, no counter pretends.
func onlyReaderDown(t *testing.T, k *kmsgCollector) {
	t.Helper()
	r := scrape(t, k)
	if r.Err != nil || len(r.Metrics) != 1 || r.Must(t, "stall_kernel_log_reader_up") != 0 {
		t.Errorf("scrape: %v\n%s\nwant stall_kernel_log_reader_up 0 only", r.Err, r.Dump())
	}
}

func TestKmsgFixtures(t *testing.T) {
	files, err := filepath.Glob("fixtures/kmsg/*.kmsg")
	if err != nil || len(files) < 4 {
		t.Fatalf("want fixtures of 3.x, 4.x, 5.x and 6.x kernels, found %v (%v)", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			items, want := kmsgReadFixture(t, filepath.Base(file))
			if want == "" {
				t.Fatal("fixture has no '# Expected:' line")
			}
			synctest.Test(t, func(t *testing.T) {
				src := newKmsgFakeSource(len(items))
				for _, it := range items {
					src.items <- it
				}
				r := newKmsgRig(t, true, src)
				r.start()
				synctest.Wait()
				if got := kmsgCounts(t, r.k); got != want {
					t.Errorf("counts:\n got %s\nwant %s", got, want)
				}
				if n := r.k.problems.Count(); n != 0 {
					t.Errorf("%d records failed to parse", n)
				}
				r.stop()
			})
		})
	}
}

// kmsgRecords queues records (seq, message) on src.
func kmsgRecords(src *kmsgFakeSource, recs ...string) {
	for _, r := range recs {
		src.items <- kmsgFakeItem{rec: []byte(r + "\n")}
	}
}

// TestKmsgAllocOrderUnparsed: a report without its order is counted as a
// page allocation failure of order "other", and as bad input; the reports
// around it count by their order.
func TestKmsgAllocOrderUnparsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newKmsgFakeSource(4)
		kmsgRecords(src,
			"4,1,1,-;java: page allocation failure: order:3, mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null)",
			"4,2,1,-;java: page allocation failure: mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null)",
			"4,3,1,-;java: page allocation failure: order:0, mode:0xa20(GFP_ATOMIC), nodemask=(null)")
		r := newKmsgRig(t, false, src)
		r.start()
		synctest.Wait()
		want := "page_allocation_failure 3, hung_task 0, oom_kill 0, oom_kill_cgroup 0, io_error 0, io_error_excluded 0, soft_lockup 0, lost 0; orders 0:1 3:1 other:1"
		if got := kmsgCounts(t, r.k); got != want {
			t.Errorf("counts:\n got %s\nwant %s", got, want)
		}
		if got := r.k.problems.Count(); got != 1 {
			t.Errorf("problems = %d, want 1 (the report without an order)", got)
		}
		r.stop()
	})
}

// kmsgRec is a kernel-facility record.
func kmsgRec(seq int, msg string) kmsgFakeItem {
	return kmsgFakeItem{rec: []byte(fmt.Sprintf("3,%d,1,-;%s\n", seq, msg))}
}

// TestKmsgOOMReasonAcrossReopenAndLoss: the reason of an announcement read
// before a reopen classifies the kill read after it; records lost between
// an announcement and a kill (a sequence gap) make the kill global, the
// kind that pages, since the announcement that belonged to it may be lost.
func TestKmsgOOMReasonAcrossReopenAndLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			memcg  = "Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child"
			killed = "Killed process 3050 (redis-server) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
		)
		first := newKmsgFakeSource(8)
		first.items <- kmsgRec(10, memcg)
		first.items <- kmsgFakeItem{err: syscall.EIO} // the reader reopens
		r := newKmsgRig(t, false, first)
		second := newKmsgFakeSource(8)
		for _, it := range []kmsgFakeItem{
			kmsgRec(9, killed), kmsgRec(10, memcg), // replayed from the oldest record: already handled, skipped
			kmsgRec(11, killed), // the kill of the announcement read before the reopen
			kmsgRec(12, memcg),
			{err: syscall.EPIPE}, kmsgRec(20, killed), // 13–19 overwritten: whose kill this is, is lost
		} {
			second.items <- it
		}
		r.sources <- second
		r.start()
		collectortest.Advance(kmsgBackoff.Min)
		synctest.Wait()
		if got, want := kmsgCounts(t, r.k), "page_allocation_failure 0, hung_task 0, oom_kill 1, oom_kill_cgroup 1, io_error 0, io_error_excluded 0, soft_lockup 0, lost 7; orders none"; got != want {
			t.Errorf("counts:\n got %s\nwant %s", got, want)
		}
		r.stop()
	})
}

// TestKmsgFlood pushes 100,000 records through the reader — a flood like
// the one after which node-problem-detector's reader stopped — with
// overwritten stretches (EPIPE and sequence gaps) and scrapes running while
// the reader works, then asserts the exact counts and that the reader is
// still alive and counting afterwards.
func TestKmsgFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const total = 100_000
		src := newKmsgFakeSource(4096)
		r := newKmsgRig(t, false, src)
		r.start()
		msgs := [kmsgEventCount]string{
			kmsgPageAllocationFailure: "java: page allocation failure: order:0, mode:0x820(GFP_ATOMIC), nodemask=(null),cpuset=/,mems_allowed=0",
			kmsgHungTask:              "INFO: task java:2911 blocked for more than 120 seconds.",
			kmsgOOMKill:               "Out of memory: Killed process 2911 (java) total-vm:12345678kB, anon-rss:7890123kB, file-rss:0kB",
			kmsgOOMKillCgroup:         "Memory cgroup out of memory: Killed process 3050 (redis-server) total-vm:2097152kB, anon-rss:1048576kB, file-rss:0kB",
			kmsgIOError:               "Buffer I/O error on dev nvme0n1p2, logical block 131072, lost async page write",
			kmsgIOErrorExcluded:       "blk_update_request: I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
			kmsgSoftLockup:            "watchdog: BUG: soft lockup - CPU#2 stuck for 26s! [kworker/2:0:2345]",
		}
		var want [kmsgEventCount]uint64
		var wantLost uint64
		seq := uint64(5000)
		var buf []byte
		scrapes := 0
		for i := 0; i < total; i++ {
			if i > 0 && i%10_000 == 0 { // the kernel overwrote 25 records
				src.items <- kmsgFakeItem{err: syscall.EPIPE}
				seq += 25
				wantLost += 25
			}
			if i%1000 == 0 { // a scrape while the reader drains the queue
				if r := scrape(t, r.k); r.Err != nil || len(r.Metrics) == 0 {
					t.Fatalf("scrape during the flood: %v, %d series", r.Err, len(r.Metrics))
				}
				scrapes++
			}
			e := kmsgEvent(0)
			msg := "e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex"
			if i%3 == 0 {
				e = kmsgEvent(1 + (i/3)%int(kmsgEventCount-1))
				msg = msgs[e]
				want[e]++
			}
			buf = strconv.AppendUint(buf[:0], 3, 10)
			buf = append(buf, ',')
			buf = strconv.AppendUint(buf, seq, 10)
			buf = append(buf, ",1234567,-;"...)
			buf = append(buf, msg...)
			buf = append(buf, '\n')
			src.items <- kmsgFakeItem{rec: bytes.Clone(buf)}
			seq++
		}
		synctest.Wait()

		var b strings.Builder
		for e := kmsgEvent(1); e < kmsgEventCount; e++ {
			fmt.Fprintf(&b, "%s %d, ", e, want[e])
		}
		fmt.Fprintf(&b, "lost %d", wantLost)
		b.WriteString(kmsgOrderCounts(func(label string) float64 { // every failure in the flood is order 0
			if label == "0" {
				return float64(want[kmsgPageAllocationFailure])
			}
			return 0
		}))
		if got := kmsgCounts(t, r.k); got != b.String() {
			t.Errorf("after the flood:\n got %s\nwant %s", got, b.String())
		}
		res := scrape(t, r.k)
		if got := res.Must(t, "stall_kernel_log_records_total"); got != total {
			t.Errorf("records = %v, want %d", got, total)
		}
		if got := res.Must(t, "stall_kernel_log_reader_up"); got != 1 {
			t.Errorf("reader_up = %v after the flood, want 1", got)
		}
		// Still alive: one more hung task is counted.
		src.items <- kmsgRec(int(seq), msgs[kmsgHungTask])
		synctest.Wait()
		if got := r.k.events[kmsgHungTask].Load(); got != want[kmsgHungTask]+1 {
			t.Errorf("hung_task after the flood = %d, want %d", got, want[kmsgHungTask]+1)
		}
		r.stop()
		t.Logf("%d scrapes during the flood", scrapes)
	})
}

// TestKmsgReopenAfterErrors: after a read error the reader reopens with
// backoff (1 s, then 2 s and 4 s after failed reopens), replays from the
// oldest record without counting a record twice, and counts the records
// overwritten meanwhile as lost.
func TestKmsgReopenAfterErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := "INFO: task java:2911 blocked for more than 120 seconds."
		first := newKmsgFakeSource(16)
		for _, it := range []kmsgFakeItem{kmsgRec(10, hung), kmsgRec(11, "noise"), {err: syscall.EIO}} {
			first.items <- it
		}
		r := newKmsgRig(t, false, first)
		// Two failed reopens, then a source that replays from the oldest
		// record (seq 8) with 12–13 overwritten meanwhile.
		r.openErr <- syscall.EIO
		r.openErr <- syscall.EIO
		second := newKmsgFakeSource(16)
		for _, it := range []kmsgFakeItem{kmsgRec(8, hung), kmsgRec(9, hung), kmsgRec(10, hung), kmsgRec(11, "noise"), kmsgRec(14, hung)} {
			second.items <- it
		}
		r.sources <- second
		r.start()
		collectortest.Advance(time.Minute)
		synctest.Wait()
		if got := r.k.events[kmsgHungTask].Load(); got != 2 {
			t.Errorf("hung tasks = %d, want 2 (seq 10 once, seq 14)", got)
		}
		if got := r.k.lost.Load(); got != 2 {
			t.Errorf("lost = %d, want 2 (seq 12, 13)", got)
		}
		if !r.k.up.Load() {
			t.Error("reader_up is 0 after a successful reopen")
		}
		// At start; 1 s after the read error (records had been read), then
		// 2 s and 4 s after the failed reopens.
		if got := fmt.Sprint(r.opens); got != "[0s 1s 3s 7s]" {
			t.Errorf("opens at %s, want [0s 1s 3s 7s]", got)
		}
		if n := r.warnings(); n != 1 {
			t.Errorf("%d warnings, want 1 (the read error; the failed reopens at debug level):\n%s", n, r.logs.String())
		}
		r.stop()
		if r.k.up.Load() {
			t.Error("reader_up is 1 after Run returned")
		}
	})
}

// TestKmsgBackoffCaps: reopens that keep failing are retried at doubling
// intervals up to once a minute, logged once, with reader_up 0.
func TestKmsgBackoffCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newKmsgRig(t, false, nil) // every open fails with EIO
		r.start()
		collectortest.Advance(250 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(r.opens); got != "[0s 0s 1s 3s 7s 15s 31s 1m3s 2m3s 3m3s 4m3s]" {
			t.Errorf("opens at %s", got)
		}
		onlyReaderDown(t, r.k)
		if n := r.warnings(); n != 1 {
			t.Errorf("%d warnings, want 1 (the retries at debug level):\n%s", n, r.logs.String())
		}
		r.stop()
	})
}

// TestKmsgNoPermission: without permission or device at start, the
// collector exports only stall_kernel_log_reader_up 0 and warns once,
// saying what to do; it retries with backoff, so granting CAP_SYSLOG later
// works without a restart (it used to never retry), and reader_up follows.
func TestKmsgNoPermission(t *testing.T) {
	for _, err := range []error{os.ErrPermission, syscall.EPERM, os.ErrNotExist} {
		synctest.Test(t, func(t *testing.T) {
			refused := &os.PathError{Op: "open", Path: "/dev/kmsg", Err: err}
			src := newKmsgFakeSource(4)
			// Refused at start and three times more; then the DaemonSet
			// gained CAP_SYSLOG.
			r := newKmsgRig(t, false, src, refused, refused, refused, refused)
			onlyReaderDown(t, r.k)
			r.start()
			src.items <- kmsgRec(1, "INFO: task java:1 blocked for more than 120 seconds.")
			collectortest.Advance(time.Minute)
			synctest.Wait()
			res := scrape(t, r.k)
			if got := res.Must(t, "stall_kernel_log_reader_up"); got != 1 {
				t.Errorf("%v: reader_up = %v after the permission was granted, want 1", err, got)
			}
			if got := res.Must(t, "stall_kernel_log_records_total"); got != 1 {
				t.Errorf("%v: records = %v after the permission was granted, want 1", err, got)
			}
			if got := fmt.Sprint(r.opens); got != "[0s 0s 1s 3s 7s]" {
				t.Errorf("%v: opens at %s, want [0s 0s 1s 3s 7s]", err, got)
			}
			if n := r.warnings(); n != 1 || r.logs.Count("warn", "CAP_SYSLOG") != 1 {
				t.Errorf("%v: %d warnings, want exactly 1 naming CAP_SYSLOG (the retries at debug level):\n%s", err, n, &r.logs)
			}
			if r.logs.Count("info", "kernel log events are counted from now on") != 1 {
				t.Errorf("%v: the first open is not logged:\n%s", err, &r.logs)
			}
			r.stop()
		})
	}
}

func TestKmsgLargeRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newKmsgFakeSource(4)
		big := "3,1,1,-;INFO: task java:1 blocked for more than 120 seconds." + strings.Repeat("x", 40<<10)
		kmsgRecords(src, big)
		r := newKmsgRig(t, false, src)
		r.start()
		synctest.Wait()
		if got := r.k.events[kmsgHungTask].Load(); got != 1 {
			t.Errorf("a 40 KiB record was not counted (%d)", got)
		}
		if len(r.k.buf) < len(big) {
			t.Errorf("buffer %d bytes, record %d", len(r.k.buf), len(big))
		}
		r.stop()
	})
}

func TestKmsgBadRecordsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newKmsgFakeSource(4)
		kmsgRecords(src, "garbage without header", "3,2,1,-;INFO: task java:1 blocked for more than 120 seconds.")
		r := newKmsgRig(t, false, src)
		r.start()
		synctest.Wait()
		if got := r.k.problems.Count(); got != 1 {
			t.Errorf("problems = %d, want 1", got)
		}
		if got := r.k.events[kmsgHungTask].Load(); got != 1 {
			t.Errorf("the good record after a bad one was not counted")
		}
		r.stop()
	})
}

// TestKmsgSurvivesPanic: a record whose handling panics (here the device
// filter stands in for a bug) is counted as a problem and skipped; the
// reader goes on.
func TestKmsgSurvivesPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newKmsgFakeSource(4)
		kmsgRecords(src, "3,1,1,-;blk_update_request: I/O error, dev sdb, sector 0",
			"3,2,1,-;INFO: task java:1 blocked for more than 120 seconds.")
		r := newKmsgRig(t, false, src)
		r.k.classify.excluded = func([]byte, bool) bool { panic("injected") }
		r.start()
		synctest.Wait()
		if got := r.k.problems.Count(); got != 1 {
			t.Errorf("problems = %d, want 1", got)
		}
		if got := r.k.events[kmsgHungTask].Load(); got != 1 {
			t.Errorf("the record after a panic was not counted")
		}
		if !r.k.up.Load() {
			t.Error("the reader stopped after a panic")
		}
		r.stop()
	})
}

// kmsgWriteOnlySource is /dev/kmsg before Linux 3.5: it opens, but the
// device has no read operation, so every read fails with EINVAL.
type kmsgWriteOnlySource struct{ reads atomic.Int64 }

func (s *kmsgWriteOnlySource) Read(p []byte) (int, error) {
	s.reads.Add(1)
	return 0, &os.PathError{Op: "read", Path: "/dev/kmsg", Err: syscall.EINVAL}
}
func (s *kmsgWriteOnlySource) Close() error { return nil }

// TestKmsgWriteOnlyDevice: on a kernel whose /dev/kmsg cannot be read the
// reader says so once, exports reader_up 0 and nothing else, and neither
// reopens nor retries (it used to retry with backoff for ever, growing its
// buffer to 1 MiB each time).
func TestKmsgWriteOnlyDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &kmsgWriteOnlySource{}
		logs := &collectortest.Logs{}
		cfg := collectortest.Config("kmsg", logs)
		opens := 0
		k := newKmsgCollector(func(bool) (kmsgSource, error) { opens++; return src, nil }, false, nil, cfg.Logger, cfg.Problems)
		done := make(chan struct{})
		go func() { k.Run(t.Context()); close(done) }()
		collectortest.Advance(time.Hour) // an hour for retries that must not come
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Error("Run goes on on a kernel whose /dev/kmsg cannot be read")
		}
		onlyReaderDown(t, k)
		if n := logs.Count("warn"); n != 1 || logs.Count("warn", "cannot be read (Linux < 3.5)") != 1 {
			t.Errorf("%d warnings, want exactly one saying the kernel's /dev/kmsg cannot be read:\n%s", n, logs)
		}
		if opens != 1 {
			t.Errorf("%d opens, want 1: the kernel will not change until a reboot", opens)
		}
		// Six reads double the 16 KiB buffer to 1 MiB, as for a large
		// record; the seventh, at 1 MiB, gives up.
		if got := src.reads.Load(); got != 7 {
			t.Errorf("%d reads, want 7", got)
		}
	})
}

// TestKmsgRealDevice reads this machine's /dev/kmsg, positioned at the end
// and from boot: it writes a record (as root) and reads until it comes
// back with a user-space facility. At the end, the older records must not
// come first; from boot, they must.
func TestKmsgRealDevice(t *testing.T) {
	for _, fromBoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("from-boot=%v", fromBoot), func(t *testing.T) {
			w := openKmsgWriter(t)
			src, err := openDevKmsg("/dev/kmsg")(fromBoot)
			if err != nil {
				collectortest.RequireRoot(t, "reading /dev/kmsg: "+err.Error())
				t.Fatal(err)
			}
			defer src.Close()
			nonce := writeKmsgNonce(t, w)
			// A read blocks while the buffer is empty: closing the source
			// after 10 s ends it.
			timeout := time.AfterFunc(10*time.Second, func() { src.Close() })
			defer timeout.Stop()
			buf := make([]byte, kmsgBufSize)
			before := 0
			for {
				n, err := src.Read(buf)
				if err != nil && !errors.Is(err, syscall.EPIPE) {
					t.Fatalf("the record written to /dev/kmsg was not read (within 10 s): %v", err)
				}
				r, perr := parseKmsgRecord(buf[:n])
				if err != nil || perr != nil {
					continue
				}
				if !bytes.Contains(r.Message, []byte(nonce)) {
					before++
					continue
				}
				if r.Facility == 0 || r.Level != 4 {
					t.Errorf("a record written by user space at level 4 has facility %d, level %d", r.Facility, r.Level)
				}
				break
			}
			switch {
			case fromBoot && before == 0:
				t.Error("from boot, no older record was read before ours")
			case !fromBoot && before > 10: // a few concurrent kernel messages are possible
				t.Errorf("at the end of the buffer, %d older records were read first", before)
			}
		})
	}
}

// TestKmsgRealDeviceRun runs the reader on this machine's /dev/kmsg: a
// record written to it is read and counted (without counting as a kernel
// event), and cancelling ctx ends the blocked read.
func TestKmsgRealDeviceRun(t *testing.T) {
	w := openKmsgWriter(t)
	cfg := collectortest.Config("kmsg", nil)
	k := newKmsgCollector(openDevKmsg("/dev/kmsg"), false, nil, cfg.Logger, cfg.Problems)
	if !k.opened.Load() {
		collectortest.RequireRoot(t, "reading /dev/kmsg")
		t.Fatal("cannot read /dev/kmsg")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	writeKmsgNonce(t, w)
	collectortest.WaitFor(t, 10*time.Second, "the reader to read the record written to /dev/kmsg", func() error {
		if k.records.Load() == 0 {
			return fmt.Errorf("no record read")
		}
		return nil
	})
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel: Close did not end the blocked read")
	}
}

// openKmsgWriter opens /dev/kmsg for writing (as root), closed at the end.
func openKmsgWriter(t *testing.T) *os.File {
	t.Helper()
	w, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		collectortest.RequireRoot(t, "writing /dev/kmsg: "+err.Error())
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// writeKmsgNonce writes a record with a text unique to this run and
// returns the text. It is innocuous: other tools watching this machine's
// kernel log must not take the test for a real event (that user-space
// records never count is checked on the fixtures: a fake hung task with
// facility 1).
func writeKmsgNonce(t *testing.T, w *os.File) string {
	t.Helper()
	nonce := fmt.Sprintf("stall_exporter test %d", time.Now().UnixNano())
	if _, err := fmt.Fprintf(w, "<4>%s: reader check, please ignore\n", nonce); err != nil {
		t.Fatal(err)
	}
	return nonce
}

func TestKmsgFromBootStartsAtOldest(t *testing.T) {
	var asked []bool
	open := func(fromStart bool) (kmsgSource, error) {
		asked = append(asked, fromStart)
		return newKmsgFakeSource(1), nil
	}
	cfg := collectortest.Config("kmsg", nil)
	newKmsgCollector(open, true, nil, cfg.Logger, cfg.Problems)
	newKmsgCollector(open, false, nil, cfg.Logger, cfg.Problems)
	if fmt.Sprint(asked) != "[true false]" {
		t.Errorf("opened with fromStart %v, want [true false]", asked)
	}
}

// newBenchKmsg is a collector whose reader the benchmark drives itself.
func newBenchKmsg(b *testing.B, devices *deviceFilter) *kmsgCollector {
	cfg := collectortest.Config("kmsg", nil)
	return newKmsgCollector(func(bool) (kmsgSource, error) { return newKmsgFakeSource(1), nil }, false, devices, cfg.Logger, cfg.Problems)
}

func BenchmarkKmsgHandle(b *testing.B) {
	k := newBenchKmsg(b, kmsgDefaultFilter(b))
	recs := [][]byte{
		[]byte("6,1,5140900,-;e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None\n SUBSYSTEM=net\n DEVICE=n2\n"),
		[]byte("3,2,5140901,-,caller=T55;INFO: task jbd2/sdb1-8:412 blocked for more than 122 seconds.\n"),
		[]byte("4,3,5140902,-;CPU: 2 PID: 2911 Comm: java Not tainted 5.15.0-91-generic #101-Ubuntu\n"),
		[]byte("3,4,5140903,-;blk_update_request: I/O error, dev sdb, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0\n"),
	}
	b.ReportAllocs()
	seq := uint64(0)
	cpu := collectortest.ProcessCPU()
	for b.Loop() {
		k.haveSeq = false // every record is "new"
		k.handle(recs[seq%4])
		seq++
	}
	reportCPU(b, cpu, 0)
}

// BenchmarkKmsgReadDevice measures the kernel's side: reading every record
// of this machine's /dev/kmsg buffer with one read(2) each (non-blocking, so
// the run ends at the newest record), parsed and counted as the reader does.
func BenchmarkKmsgReadDevice(b *testing.B) {
	k := newBenchKmsg(b, nil)
	buf := make([]byte, kmsgBufSize)
	records := 0
	cpu := collectortest.ProcessCPU()
	for b.Loop() {
		fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			collectortest.RequireRoot(b, "reading /dev/kmsg: "+err.Error())
			b.Fatal(err)
		}
		k.haveSeq = false
		for {
			n, err := syscall.Read(fd, buf)
			if err == syscall.EPIPE {
				continue
			}
			if err != nil || n <= 0 {
				break
			}
			k.handle(buf[:n])
			records++
		}
		syscall.Close(fd)
	}
	reportCPU(b, cpu, 0)
	if records > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(records), "ns/record")
		b.ReportMetric(float64(records)/float64(b.N), "records/op")
	}
}
