package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// kmsgFakeItem is one thing a kmsgFakeSource hands out: a record, an error
// (EPIPE, EIO …), or a sync marker, which is closed when the reader asks for
// the item after it — that is, once every item before it has been handled.
type kmsgFakeItem struct {
	rec  []byte
	err  error
	sync chan struct{}
}

// kmsgFakeSource behaves like an open /dev/kmsg: one record per Read,
// EINVAL when the buffer is too small (the record stays next), blocking
// when there is nothing to read, and Close ends a blocked Read.
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
	for {
		if f.pending == nil {
			select {
			case it := <-f.items:
				f.pending = &it
			case <-f.closed:
				return 0, os.ErrClosed
			}
		}
		it := f.pending
		switch {
		case it.sync != nil:
			close(it.sync)
			f.pending = nil
			continue
		case it.err != nil:
			f.pending = nil
			return 0, it.err
		case len(p) < len(it.rec):
			return 0, syscall.EINVAL
		}
		f.pending = nil
		return copy(p, it.rec), nil
	}
}

func (f *kmsgFakeSource) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

// barrier queues a sync marker and waits until the reader has handled
// everything queued before it.
func (f *kmsgFakeSource) barrier(t *testing.T) {
	t.Helper()
	c := make(chan struct{})
	f.items <- kmsgFakeItem{sync: c}
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatal("the kmsg reader did not drain its source within 30 s: it stalled")
	}
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

// kmsgFixturePaths has the block devices the fixtures name, laid out as in
// sysfs: /sys/class/block/<name> links to …/<disk>/<name> for a partition.
var kmsgFixturePaths = collector.Paths{Sysfs: "fixtures/kmsg/sys"}

// kmsgDefaultFilter is the diskstats device filter with its default flags.
func kmsgDefaultFilter(t testing.TB) *DeviceFilter {
	return newDeviceFilter(kmsgFixturePaths, testSettings(t).devices)
}

// kmsgRig runs a kmsg collector on fake sources handed out by its opener.
type kmsgRig struct {
	k       *kmsgCollector
	sources chan *kmsgFakeSource // the opener takes the next one
	openErr chan error           // or fails with the next error, when one is queued
	sleeps  []time.Duration
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
}

func newKmsgRig(t *testing.T, fromBoot bool, first *kmsgFakeSource, logger *slog.Logger) *kmsgRig {
	t.Helper()
	r := &kmsgRig{sources: make(chan *kmsgFakeSource, 8), openErr: make(chan error, 8), done: make(chan struct{})}
	if first != nil {
		r.sources <- first
	}
	opener := func(fromStart bool) (kmsgSource, error) {
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
	r.k = newKmsgCollector(kmsgOptions{
		Path: "/dev/kmsg", Open: opener, FromBoot: fromBoot, Logger: logger,
		Paths: kmsgFixturePaths, Devices: kmsgDefaultFilter(t),
		Sleep: func(ctx context.Context, d time.Duration) bool {
			r.mu.Lock()
			r.sleeps = append(r.sleeps, d)
			r.mu.Unlock()
			return ctx.Err() == nil
		},
	})
	return r
}

func (r *kmsgRig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.k.Run(ctx); close(r.done) }()
}

func (r *kmsgRig) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}
}

// kmsgCounts renders the collector's counters as in the fixtures'
// "Expected:" lines.
func kmsgCounts(t *testing.T, k *kmsgCollector) string {
	t.Helper()
	mfs := samplerGather(t, k)
	ev := map[string]float64{}
	for _, m := range mfs["stall_kernel_log_events_total"].GetMetric() {
		ev[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	var b strings.Builder
	for e := kmsgEvent(1); e < kmsgEventCount; e++ {
		fmt.Fprintf(&b, "%s %v, ", e, ev[e.String()])
	}
	fmt.Fprintf(&b, "lost %v", samplerCounter(mfs, "stall_kernel_log_records_lost_total"))
	orders := map[string]float64{}
	for _, m := range mfs["stall_kernel_page_allocation_failures_total"].GetMetric() {
		orders[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if len(orders) != kmsgOrderLabels {
		t.Errorf("stall_kernel_page_allocation_failures_total has %d series, want %d (every order label, 0 or not)", len(orders), kmsgOrderLabels)
	}
	b.WriteString(kmsgOrderCounts(func(label string) float64 { return orders[label] }))
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

func kmsgGauge(mfs map[string]*dto.MetricFamily, name string) float64 {
	ms := mfs[name].GetMetric()
	if len(ms) != 1 {
		return -1
	}
	return ms[0].GetGauge().GetValue()
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
			src := newKmsgFakeSource(len(items) + 1)
			for _, it := range items {
				src.items <- it
			}
			r := newKmsgRig(t, true, src, nil)
			r.start()
			src.barrier(t)
			if got := kmsgCounts(t, r.k); got != want {
				t.Errorf("counts:\n got %s\nwant %s", got, want)
			}
			if n := r.k.problems.Count(); n != 0 {
				t.Errorf("%d records failed to parse", n)
			}
			r.stop(t)
		})
	}
}

func TestKmsgParseRecord(t *testing.T) {
	for _, c := range []struct {
		in                  string
		fac, lvl, seq, usec uint64
		flags, msg          string
	}{
		{"6,339,5140900,-;NET: Registered protocol family 10\n", 0, 6, 339, 5140900, "-", "NET: Registered protocol family 10"},
		{"30,340,5690716,-;udevd[80]: starting version 181\n", 3, 6, 340, 5690716, "-", "udevd[80]: starting version 181"},
		{"3,1534,99,-;end_request: I/O error, dev sdb, sector 1\n SUBSYSTEM=block\n DEVICE=b8:16\n", 0, 3, 1534, 99, "-", "end_request: I/O error, dev sdb, sector 1"},
		{"4,7,8,c;frag", 0, 4, 7, 8, "c", "frag"},
		{"4,7,8,-,caller=T2911;msg;with;semicolons\n", 0, 4, 7, 8, "-", "msg;with;semicolons"},
		{"4,18446744073709551615,0,-;", 0, 4, 1<<64 - 1, 0, "-", ""},
	} {
		r, err := parseKmsgRecord([]byte(c.in))
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if r.Facility != c.fac || r.Level != c.lvl || r.Seq != c.seq || r.Usec != c.usec || string(r.Flags) != c.flags || string(r.Message) != c.msg {
			t.Errorf("%q: got fac %d lvl %d seq %d usec %d flags %q msg %q", c.in, r.Facility, r.Level, r.Seq, r.Usec, r.Flags, r.Message)
		}
	}
	for in, want := range map[string]error{
		"":                                     errKmsgNoSemicolon,
		"no header at all":                     errKmsgNoSemicolon,
		" SUBSYSTEM=block\n;x":                 errKmsgNoSemicolon,
		"6,339;short header":                   errKmsgFields,
		"x,1,2,-;bad prio":                     errKmsgPrio,
		"6,-1,2,-;bad seq":                     errKmsgSeq,
		"6,1,99999999999999999999999,-;bad ts": errKmsgTimestamp,
	} {
		if _, err := parseKmsgRecord([]byte(in)); err != want {
			t.Errorf("%q: err %v, want %v", in, err, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		parseKmsgRecord([]byte("4,7,8,-,caller=T2911;INFO: task java:1 blocked for more than 120 seconds.\n"))
	}); n != 0 {
		t.Errorf("parsing a record allocates %v times, want 0", n)
	}
}

// kmsgClassifyAll classifies messages in order, as the reader does, with
// the default device filter over the fixture sysfs.
func kmsgClassifyAll(t testing.TB, msgs ...string) []kmsgEvent {
	d := kmsgDevices{paths: kmsgFixturePaths, filter: kmsgDefaultFilter(t)}
	c := kmsgClassifier{excluded: d.excluded}
	var got []kmsgEvent
	for _, m := range msgs {
		e, _ := c.event([]byte(m))
		got = append(got, e)
	}
	return got
}

// TestKmsgClassify: one message each, with no OOM announcement before it.
func TestKmsgClassify(t *testing.T) {
	for msg, want := range map[string]kmsgEvent{
		"java: page allocation failure. order:1, mode:0x20":                                        kmsgPageAllocationFailure, // 2.6.32
		"java: page allocation failure: order:1, mode:0x20":                                        kmsgPageAllocationFailure,
		"java: page allocation failure: order:0, mode:0x820(GFP_ATOMIC), nodemask=(null),cpuset=/": kmsgPageAllocationFailure,
		"page allocation failure":                                                                  kmsgNoEvent,
		"java: page allocation stalls for 10012ms, order:0":                                        kmsgNoEvent,
		"INFO: task java:2911 blocked for more than 120 seconds.":                                  kmsgHungTask,
		"INFO: task kworker/u8:2:1234 blocked for more than 1234 seconds.":                         kmsgHungTask,
		"INFO: task java:2911 is blocked on a mutex likely owned by task kworker/u8:2:1234.":       kmsgNoEvent,
		"rcu: INFO: rcu_sched self-detected stall on CPU":                                          kmsgNoEvent,
		"BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:1234]":                               kmsgSoftLockup,
		"watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [java:2911]":                            kmsgSoftLockup,
		"NMI watchdog: Watchdog detected hard LOCKUP on cpu 2":                                     kmsgNoEvent,

		// OOM kills, 5.1+: the kill carries its reason.
		"Out of memory: Killed process 2911 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:8kB oom_score_adj:0": kmsgOOMKill,
		"Out of memory (oom_kill_allocating_task): Killed process 2911 (java) total-vm:1kB":                                                        kmsgOOMKill,
		"Memory cgroup out of memory: Killed process 3050 (redis-server) total-vm:1kB":                                                             kmsgOOMKillCgroup,
		"Memory cgroup out of memory: OOM victim 3050 (redis-server) is already exiting. Skip killing the task":                                    kmsgNoEvent,
		// Up to 5.0: announcements are not counted; a bare kill with no
		// announcement before it is global.
		"Out of memory: Kill process 2911 (java) score 912 or sacrifice child":                       kmsgNoEvent,
		"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child": kmsgNoEvent,
		"Out of memory: kill process 2911 (java) score 1834567 or a child":                           kmsgNoEvent, // 2.6.32
		"Killed process 2911 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB":                        kmsgOOMKill,
		"Killed process 2911 (java)": kmsgOOMKill, // 2.6.32
		"Killed process 2911, UID 500, (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB":                  kmsgOOMKill, // RHEL 6
		"Killed process 2911 (java), UID 1000, total-vm:1kB, anon-rss:1kB, file-rss:0kB":                 kmsgOOMKill, // RHEL 7
		"Kill process 2912 (java) sharing same memory":                                                   kmsgNoEvent,
		"Would have killed process 2911 (java). But continuing instead.":                                 kmsgNoEvent, // RHEL 6
		"oom_reaper: reaped process 2911 (java), now anon-rss:0kB":                                       kmsgNoEvent,
		"Out of memory and no killable processes...":                                                     kmsgNoEvent,
		"Out of memory: compulsory panic_on_oom is enabled":                                              kmsgNoEvent,
		"Tasks in /system.slice/redis-server.service are going to be killed due to memory.oom.group set": kmsgNoEvent,
		"audit: Killed process list: none":                                                               kmsgNoEvent,

		// I/O errors: whole disks from the block layer, the device (a
		// partition or a disk) from the buffer cache; default filter.
		"end_request: I/O error, dev sdb, sector 1953525000":                                     kmsgIOError,
		"blk_update_request: I/O error, dev sdb, sector 2048 op 0x1:(WRITE) flags 0x800":         kmsgIOError,
		"print_req_error: critical medium error, dev sdb, sector 1953525000":                     kmsgIOError,
		"I/O error, dev sda, sector 2048 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2":    kmsgIOError,
		"critical target error, dev dm-0, sector 0 op 0x1:(WRITE) flags 0x0 phys_seg 1":          kmsgIOError,
		"blk_update_request: operation not supported error, dev nvme0n1, sector 0 op 0x0:(READ)": kmsgIOError,
		"I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2":           kmsgIOErrorExcluded,
		"print_req_error: I/O error, dev sr0, sector 0":                                          kmsgIOErrorExcluded,
		"blk_update_request: I/O error, dev loop3, sector 0 op 0x0:(READ) flags 0x80700":         kmsgIOErrorExcluded,
		"blk_update_request: I/O error, dev ?, sector 0":                                         kmsgIOError, // no disk: counted where it alerts
		"Buffer I/O error on device sdb1, logical block 244190625":                               kmsgIOError,
		"Buffer I/O error on dev sdb1, logical block 0, async page read":                         kmsgIOError,
		"Buffer I/O error on dev nvme0n1p2, logical block 131072, lost async page write":         kmsgIOError,
		"Buffer I/O error on dev dm-0, logical block 3670000, async page read":                   kmsgIOError,
		"Buffer I/O error on device fd0, logical block 0":                                        kmsgIOErrorExcluded,
		"Buffer I/O error on dev sr0, logical block 0, async page read":                          kmsgIOErrorExcluded,
		"Buffer I/O error on dev loop0p1, logical block 0, async page read":                      kmsgIOErrorExcluded, // partition of loop0
		"Buffer I/O error on dev loop3, logical block 0, async page read":                        kmsgIOErrorExcluded,
		"Buffer I/O error on dev":                               kmsgIOError,
		"Buffer I/O error on dev ../../../etc, logical block 0": kmsgIOError,
		"lost page write due to I/O error on sdb1":              kmsgNoEvent,
	} {
		if got := kmsgClassifyAll(t, msg)[0]; got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}

	// The reader's path allocates nothing once a device is decided.
	d := kmsgDevices{paths: kmsgFixturePaths, filter: kmsgDefaultFilter(t)}
	c := kmsgClassifier{excluded: d.excluded}
	msgs := [][]byte{
		[]byte("Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child"),
		[]byte("Killed process 3050 (redis-server) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"),
		[]byte("Out of memory: Killed process 2911 (java) total-vm:1kB"),
		[]byte("Buffer I/O error on dev nvme0n1p2, logical block 131072, lost async page write"),
		[]byte("I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2"),
		[]byte("e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None"),
		[]byte("swapper/3: page allocation failure: order:3, mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null),cpuset=/,mems_allowed=0"),
		[]byte("kworker/0:1: page allocation failure: order:13, mode:0x484020(GFP_ATOMIC|__GFP_COMP), nodemask=(null)"),
	}
	for _, m := range msgs {
		c.event(m)
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, m := range msgs {
			c.event(m)
		}
	}); n != 0 {
		t.Errorf("classifying allocates %v times per round, want 0", n)
	}
}

// TestKmsgAllocOrder: the order of a page allocation failure report, in
// the shapes kernels from 2.6 to 6.x print (process names, modes and
// orders as in public reports; the message texts of each version).
func TestKmsgAllocOrder(t *testing.T) {
	const (
		other    = kmsgOrderOther
		unparsed = kmsgOrderUnparsed
	)
	for _, c := range []struct {
		kernel, msg string
		want        kmsgOrder
	}{
		{"2.6.9", "kswapd0: page allocation failure. order:3, mode:0xd0", 3},
		{"2.6.32", "swapper: page allocation failure. order:1, mode:0x20", 1},
		{"2.6.32", "java: page allocation failure. order:0, mode:0x20", 0},
		{"2.6.32", "node_exporter: page allocation failure. order:5, mode:0xd0", 5},
		{"3.3", "z_wr_iss/2: page allocation failure: order:0, mode:0x20", 0},
		{"3.10", "swapper/21: page allocation failure: order:0, mode:0x20", 0},
		{"3.10 fragment", "kswapd0: page allocation failure: order:1", 1}, // ", mode:0x20" follows as a '+' record
		{"3.18", "dmwb_writeback_: page allocation failure: order:8, mode:0x204010", 8},
		{"4.9", "java: page allocation failure: order:0, mode:0x2084120(GFP_ATOMIC|__GFP_COLD|__GFP_COMP)", 0},
		{"4.9", "AiApp: page allocation failure: order:10, mode:0x2084020(GFP_ATOMIC|__GFP_COMP)", 10},
		// 4.9: the comm, the text and the mode are separate fragments;
		// another CPU's output can end up between and after them.
		{"4.9 fragment", "page allocation failure: order:0", 0},
		{"4.9 interleaved", "page allocation failure: order:0 0000000000000000", 0},
		{"4.12", "cc1plus: page allocation failure: order:0, mode:0x1082020(GFP_ATOMIC|__GFP_MEMALLOC), nodemask=(null)", 0},
		{"4.19", "swapper/5: page allocation failure: order:3, mode:0x484020(GFP_ATOMIC|__GFP_COMP), nodemask=(null)", 3},
		{"5.4", "kworker/u16:3: page allocation failure: order:4, mode:0x40dc0(GFP_KERNEL|__GFP_COMP|__GFP_ZERO), nodemask=(null),cpuset=/,mems_allowed=0", 4},
		{"5.15", "swapper/3: page allocation failure: order:2, mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null),cpuset=/,mems_allowed=0", 2},
		{"6.8", "irq/5-600c0004.: page allocation failure: order:0, mode:0x820(GFP_ATOMIC), nodemask=(null)", 0},
		{"6.8", "swapper/5: page allocation failure: order:9, mode:0x40820(GFP_ATOMIC|__GFP_COMP), nodemask=0-1,cpuset=/,mems_allowed=0-1", 9},
		// Above the x86 maximum: arm64 with 16 or 64 KiB pages.
		{"arm64 16K", "kworker/2:1: page allocation failure: order:11, mode:0x40820(GFP_ATOMIC|__GFP_COMP), nodemask=(null)", other},
		{"arm64 64K", "kworker/2:1: page allocation failure: order:13, mode:0x40820(GFP_ATOMIC|__GFP_COMP), nodemask=(null)", other},
		// Not what a kernel prints.
		{"", "x: page allocation failure: order:99999999999999999999999999, mode:0x20", other},
		{"", "x: page allocation failure: order:, mode:0x20", unparsed},
		{"", "x: page allocation failure: order:-1, mode:0x20", unparsed},
		{"", "x: page allocation failure: mode:0x20", unparsed},
		{"", "x: page allocation failure:", unparsed},
		{"", "x: page allocation failure. order 3", unparsed},
	} {
		var cl kmsgClassifier
		e, got := cl.event([]byte(c.msg))
		if e != kmsgPageAllocationFailure || got != c.want {
			t.Errorf("%s %q: %s order %d, want page_allocation_failure order %d", c.kernel, c.msg, e, got, c.want)
		}
	}
	for o, want := range map[kmsgOrder]string{0: "0", 7: "7", 10: "10", other: "other", unparsed: "other"} {
		if got := kmsgOrderNames[o.label()]; got != want {
			t.Errorf("order %d has label %q, want %q", o, got, want)
		}
	}
}

// TestKmsgAllocOrderUnparsed: a report without its order is counted as a
// page allocation failure of order "other", and as bad input; the reports
// around it count by their order.
func TestKmsgAllocOrderUnparsed(t *testing.T) {
	src := newKmsgFakeSource(4)
	src.items <- kmsgFakeItem{rec: []byte("4,1,1,-;java: page allocation failure: order:3, mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null)\n")}
	src.items <- kmsgFakeItem{rec: []byte("4,2,1,-;java: page allocation failure: mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null)\n")}
	src.items <- kmsgFakeItem{rec: []byte("4,3,1,-;java: page allocation failure: order:0, mode:0xa20(GFP_ATOMIC), nodemask=(null)\n")}
	r := newKmsgRig(t, false, src, nil)
	r.start()
	src.barrier(t)
	want := "page_allocation_failure 3, hung_task 0, oom_kill 0, oom_kill_cgroup 0, io_error 0, io_error_excluded 0, soft_lockup 0, lost 0; orders 0:1 3:1 other:1"
	if got := kmsgCounts(t, r.k); got != want {
		t.Errorf("counts:\n got %s\nwant %s", got, want)
	}
	if got := r.k.problems.Count(); got != 1 {
		t.Errorf("problems = %d, want 1 (the report without an order)", got)
	}
	r.stop(t)
}

// TestKmsgClassifyOOMSequences: up to 5.0 the bare "Killed process" record
// is classified by the reason of the announcement before it, for every
// process one announcement kills; 5.1+ records carry their own reason.
func TestKmsgClassifyOOMSequences(t *testing.T) {
	const (
		none   = kmsgNoEvent
		global = kmsgOOMKill
		cgroup = kmsgOOMKillCgroup
	)
	for _, c := range []struct {
		name string
		msgs []string
		want []kmsgEvent
	}{
		{"2.6.32 global then memcg", []string{
			"java invoked oom-killer: gfp_mask=0x201da, order=0, oom_adj=0",
			"Out of memory: kill process 2911 (java) score 1834567 or a child",
			"Killed process 2911 (java)",
			"Memory cgroup out of memory: kill process 3050 (redis-server) score 998 or a child",
			"Killed process 3051 (redis-server)",
		}, []kmsgEvent{none, none, global, none, cgroup}},
		{"2.6.32 MPOL_BIND", []string{
			"No available memory (MPOL_BIND): kill process 4100 (java) score 0 or a child",
			"Killed process 4100 (java)",
		}, []kmsgEvent{none, global}},
		{"3.10 memcg then oom_kill_allocating_task", []string{
			"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Killed process 3050 (redis-server), UID 114, total-vm:2097152kB, anon-rss:1048576kB, file-rss:0kB, shmem-rss:0kB",
			"Kill process 3052 (redis-server) sharing same memory",
			"Out of memory (oom_kill_allocating_task): Kill process 4100 (java) score 0 or sacrifice child",
			"Killed process 4100 (java), UID 1000, total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
		}, []kmsgEvent{none, cgroup, none, none, global}},
		{"4.19 memory.oom.group, memcg", []string{
			"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Killed process 3050 (redis-server) total-vm:2097152kB, anon-rss:1048576kB, file-rss:0kB, shmem-rss:0kB",
			"Tasks in /system.slice/redis-server.service are going to be killed due to memory.oom.group set",
			"Killed process 3052 (redis-sentinel) total-vm:52000kB, anon-rss:3000kB, file-rss:0kB, shmem-rss:0kB",
			"Killed process 3071 (redis-rdb-bgsav) total-vm:2097152kB, anon-rss:900000kB, file-rss:0kB, shmem-rss:0kB",
			"Out of memory: Kill process 2911 (java) score 912 or sacrifice child",
			"Killed process 2911 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
		}, []kmsgEvent{none, cgroup, none, cgroup, cgroup, none, global}},
		{"4.19 memory.oom.group, global", []string{
			"Out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Killed process 3050 (redis-server) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
			"Tasks in /system.slice/redis-server.service are going to be killed due to memory.oom.group set",
			"Killed process 3052 (redis-sentinel) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
		}, []kmsgEvent{none, global, none, global}},
		{"5.x after a 4.x-style announcement", []string{
			"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Out of memory: Killed process 2911 (java) total-vm:1kB",
			"Memory cgroup out of memory: Killed process 3060 (java) total-vm:1kB",
			"Tasks in /kubepods/pod1 are going to be killed due to memory.oom.group set",
			"Memory cgroup out of memory: Killed process 3061 (sidecar) total-vm:1kB",
		}, []kmsgEvent{none, global, cgroup, none, cgroup}},
	} {
		if got := kmsgClassifyAll(t, c.msgs...); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestKmsgOOMReasonAcrossReopenAndLoss: the reason of an announcement read
// before a reopen classifies the kill read after it; records lost between
// an announcement and a kill (a sequence gap) make the kill global, the
// kind that pages, since the announcement that belonged to it may be lost.
func TestKmsgOOMReasonAcrossReopenAndLoss(t *testing.T) {
	rec := func(seq int, msg string) kmsgFakeItem {
		return kmsgFakeItem{rec: []byte(fmt.Sprintf("3,%d,1,-;%s\n", seq, msg))}
	}
	const (
		memcg  = "Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child"
		killed = "Killed process 3050 (redis-server) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
	)
	first := newKmsgFakeSource(8)
	first.items <- rec(10, memcg)
	first.items <- kmsgFakeItem{err: syscall.EIO} // the reader reopens
	r := newKmsgRig(t, false, first, nil)
	second := newKmsgFakeSource(8)
	for _, it := range []kmsgFakeItem{
		rec(9, killed), rec(10, memcg), // replayed from the oldest record: already handled, skipped
		rec(11, killed), // the kill of the announcement read before the reopen
		rec(12, memcg),
		{err: syscall.EPIPE}, rec(20, killed), // 13–19 overwritten: whose kill this is, is lost
	} {
		second.items <- it
	}
	r.sources <- second
	r.start()
	second.barrier(t)
	if got, want := kmsgCounts(t, r.k), "page_allocation_failure 0, hung_task 0, oom_kill 1, oom_kill_cgroup 1, io_error 0, io_error_excluded 0, soft_lockup 0, lost 7; orders none"; got != want {
		t.Errorf("counts:\n got %s\nwant %s", got, want)
	}
	r.stop(t)
}

// TestKmsgIODevices: the disk of the device an I/O error names, by sysfs
// (partition file and link), else by the common partition names, else the
// name; and the device filter's include and exclude flags applied to it.
func TestKmsgIODevices(t *testing.T) {
	for _, c := range []struct {
		sysfs string
		name  string
		disk  string
	}{
		{"fixtures/kmsg/sys", "sda", "sda"},
		{"fixtures/kmsg/sys", "sda1", "sda"},
		{"fixtures/kmsg/sys", "nvme0n1p2", "nvme0n1"},
		{"fixtures/kmsg/sys", "loop0p1", "loop0"},
		{"fixtures/kmsg/sys", "dm-3", "dm-3"},               // not a partition, though it ends in a digit
		{"fixtures/linux-4.19/sys", "nvme0n1p2", "nvme0n1"}, // a partition file without sysfs' links: by name
		{"fixtures/linux-6.8/sys", "vda1", "vda"},
		{"no-such-sysfs", "sdb1", "sdb"},
		{"no-such-sysfs", "mmcblk0p1", "mmcblk0"},
		{"no-such-sysfs", "md127", "md127"},
		{"no-such-sysfs", "cciss/c0d0p1", "cciss/c0d0"},
		{"no-such-sysfs", "sata1p2", "sata1"}, // Synology DSM
	} {
		if got := diskOf(collector.Paths{Sysfs: c.sysfs}, c.name); got != c.disk {
			t.Errorf("%s: diskOf(%s) = %s, want %s", c.sysfs, c.name, got, c.disk)
		}
	}

	// This machine's sysfs: every disk is its own disk, every partition
	// maps to another device sysfs knows (a CI runner has partitions; this
	// development VM's kernel parses no partition tables).
	sysDevs, err := os.ReadDir("/sys/class/block")
	if err != nil || len(sysDevs) == 0 {
		t.Fatalf("no block devices in this machine's /sys/class/block (%v)", err)
	}
	for _, e := range sysDevs {
		name := strings.ReplaceAll(e.Name(), "!", "/")
		disk := diskOf(collector.Paths{Sysfs: "/sys"}, name)
		_, perr := os.Stat(filepath.Join("/sys/class/block", e.Name(), "partition"))
		switch {
		case perr != nil && disk != name:
			t.Errorf("/sys: disk %s maps to %s", name, disk)
		case perr == nil && disk == name:
			t.Errorf("/sys: partition %s maps to itself", name)
		case perr == nil:
			if _, err := os.Stat(filepath.Join("/sys/class/block", strings.ReplaceAll(disk, "/", "!"), "partition")); err == nil {
				t.Errorf("/sys: partition %s maps to %s, another partition", name, disk)
			}
			t.Logf("/sys: partition %s is on %s", name, disk)
		}
	}

	d := kmsgDevices{paths: kmsgFixturePaths, filter: newDeviceFilter(kmsgFixturePaths, testSettings(t, `--diskstats.device-include=nvme\d+n\d+`).devices)}
	for _, c := range []struct {
		name      string
		partition bool
		excluded  bool
	}{
		{"nvme0n1", false, false},
		{"nvme0n1p2", true, false}, // its disk is included
		{"sda", false, true},
		{"sda1", true, true},
		{"loop3", false, true},
	} {
		for range 2 { // the second answer comes from the cache
			if got := d.excluded([]byte(c.name), c.partition); got != c.excluded {
				t.Errorf("--diskstats.device-include=nvme\\d+n\\d+: excluded(%s) = %v, want %v", c.name, got, c.excluded)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { d.excluded([]byte("nvme0n1p2"), true) }); n != 0 {
		t.Errorf("a cached device decision allocates %v times, want 0", n)
	}
}

// TestKmsgFlood pushes 100,000 records through the reader — a flood like
// the one after which node-problem-detector's reader stopped — with
// overwritten stretches (EPIPE and sequence gaps) and scrapes running
// concurrently, then asserts the exact counts and that the reader is still
// alive and counting afterwards.
func TestKmsgFlood(t *testing.T) {
	const total = 100_000
	src := newKmsgFakeSource(4096)
	r := newKmsgRig(t, false, src, nil)
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

	var scrapes atomic.Int64
	scrapeCtx, stopScrapes := context.WithCancel(context.Background())
	scraped := make(chan struct{})
	go func() { // scrapes while the flood runs; each must return at once
		defer close(scraped)
		for scrapeCtx.Err() == nil {
			kmsgScrapeOnce(r.k)
			scrapes.Add(1)
		}
	}()

	seq := uint64(5000)
	var buf []byte
	for i := 0; i < total; i++ {
		if i > 0 && i%10_000 == 0 { // the kernel overwrote 25 records
			src.items <- kmsgFakeItem{err: syscall.EPIPE}
			seq += 25
			wantLost += 25
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
	src.barrier(t)
	stopScrapes()
	<-scraped

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
	mfs := samplerGather(t, r.k)
	if got := samplerCounter(mfs, "stall_kernel_log_records_total"); got != total {
		t.Errorf("records = %v, want %d", got, total)
	}
	if got := kmsgGauge(mfs, "stall_kernel_log_reader_up"); got != 1 {
		t.Errorf("reader_up = %v after the flood, want 1", got)
	}
	if scrapes.Load() == 0 {
		t.Error("no scrape completed during the flood")
	}
	// Still alive: one more hung task is counted.
	src.items <- kmsgFakeItem{rec: []byte(fmt.Sprintf("3,%d,1,-;%s\n", seq, msgs[kmsgHungTask]))}
	src.barrier(t)
	if got := r.k.events[kmsgHungTask].Load(); got != want[kmsgHungTask]+1 {
		t.Errorf("hung_task after the flood = %d, want %d", got, want[kmsgHungTask]+1)
	}
	r.stop(t)
	t.Logf("%d scrapes during the flood", scrapes.Load())
}

// kmsgScrapeOnce runs one Update and drains it, as the exporter does.
func kmsgScrapeOnce(k *kmsgCollector) {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		k.Update(context.Background(), ch)
		close(ch)
	}()
	for range ch {
	}
}

func TestKmsgReopenAfterErrors(t *testing.T) {
	rec := func(seq int, msg string) kmsgFakeItem {
		return kmsgFakeItem{rec: []byte(fmt.Sprintf("3,%d,1,-;%s\n", seq, msg))}
	}
	hung := "INFO: task java:2911 blocked for more than 120 seconds."
	first := newKmsgFakeSource(16)
	first.items <- rec(10, hung)
	first.items <- rec(11, "noise")
	first.items <- kmsgFakeItem{err: syscall.EIO}
	r := newKmsgRig(t, false, first, nil)
	// Two failed reopens, then a source that replays from the oldest record
	// (seq 8) with 12–13 overwritten meanwhile.
	r.openErr <- syscall.EIO
	r.openErr <- syscall.EIO
	second := newKmsgFakeSource(16)
	for _, it := range []kmsgFakeItem{rec(8, hung), rec(9, hung), rec(10, hung), rec(11, "noise"), rec(14, hung)} {
		second.items <- it
	}
	r.sources <- second
	r.start()
	second.barrier(t)
	if got := r.k.events[kmsgHungTask].Load(); got != 2 {
		t.Errorf("hung tasks = %d, want 2 (seq 10 once, seq 14)", got)
	}
	if got := r.k.lost.Load(); got != 2 {
		t.Errorf("lost = %d, want 2 (seq 12, 13)", got)
	}
	if !r.k.up.Load() {
		t.Error("reader_up is 0 after a successful reopen")
	}
	r.mu.Lock()
	// 1 s after the read error (records had been read), then 2 s and 4 s
	// after the failed reopens.
	if got := fmt.Sprint(r.sleeps); got != "[1s 2s 4s]" {
		t.Errorf("backoff sleeps %s, want [1s 2s 4s]", got)
	}
	r.mu.Unlock()
	r.stop(t)
	if r.k.up.Load() {
		t.Error("reader_up is 1 after Run returned")
	}
}

func TestKmsgBackoffCaps(t *testing.T) {
	r := newKmsgRig(t, false, nil, nil) // the first open fails with EIO: retried
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	r.k.opts.Sleep = func(_ context.Context, d time.Duration) bool {
		r.sleeps = append(r.sleeps, d)
		n++
		if n == 9 {
			cancel()
			return false
		}
		return true
	}
	r.k.Run(ctx)
	if got := fmt.Sprint(r.sleeps); got != "[1s 2s 4s 8s 16s 32s 1m0s 1m0s 1m0s]" {
		t.Errorf("backoff %s", got)
	}
	mfs := samplerGather(t, r.k)
	if got := kmsgGauge(mfs, "stall_kernel_log_reader_up"); got != 0 {
		t.Errorf("reader_up = %v while it cannot open, want 0", got)
	}
}

// kmsgLogCounter counts log records at warn level and above.
type kmsgLogCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (h *kmsgLogCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *kmsgLogCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		h.msgs = append(h.msgs, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *kmsgLogCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *kmsgLogCounter) WithGroup(string) slog.Handler      { return h }

// TestKmsgNoPermission: without permission or device at start, the
// collector exports only stall_kernel_log_reader_up 0 and warns once; it
// retries with backoff, so granting CAP_SYSLOG later works without a
// restart (issue 11: it never retried), and reader_up follows.
func TestKmsgNoPermission(t *testing.T) {
	for _, err := range []error{os.ErrPermission, syscall.EPERM, os.ErrNotExist} {
		logs := &kmsgLogCounter{}
		var mu sync.Mutex
		granted := false
		src := newKmsgFakeSource(4)
		var sleeps []time.Duration
		k := newKmsgCollector(kmsgOptions{Path: "/dev/kmsg", Open: func(bool) (kmsgSource, error) {
			mu.Lock()
			defer mu.Unlock()
			if !granted {
				return nil, &os.PathError{Op: "open", Path: "/dev/kmsg", Err: err}
			}
			return src, nil
		}, Logger: slog.New(logs), Sleep: func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			sleeps = append(sleeps, d)
			if len(sleeps) == 3 {
				granted = true // e.g. the DaemonSet gained CAP_SYSLOG
			}
			mu.Unlock()
			return ctx.Err() == nil
		}})
		ch := make(chan prometheus.Metric, 16)
		if uerr := k.Update(context.Background(), ch); uerr != nil {
			t.Errorf("%v: Update = %v, want nil", err, uerr)
		}
		// Only stall_kernel_log_reader_up 0: the blind spot is visible.
		if len(ch) != 1 {
			t.Fatalf("%v: %d metrics sent without a reader, want reader_up only", err, len(ch))
		}
		var pb dto.Metric
		m := <-ch
		if werr := m.Write(&pb); werr != nil || pb.GetGauge().GetValue() != 0 || !strings.Contains(m.Desc().String(), "stall_kernel_log_reader_up") {
			t.Errorf("%v: sent %v (%v), want stall_kernel_log_reader_up 0", err, m.Desc(), werr)
		}

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { k.Run(ctx); close(done) }()
		src.items <- kmsgFakeItem{rec: []byte("3,1,1,-;INFO: task java:1 blocked for more than 120 seconds.\n")}
		deadline := time.Now().Add(10 * time.Second)
		for k.records.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		mfs := samplerGather(t, k)
		if got := kmsgGauge(mfs, "stall_kernel_log_reader_up"); got != 1 {
			t.Errorf("%v: reader_up = %v after the permission was granted, want 1", err, got)
		}
		if got := samplerCounter(mfs, "stall_kernel_log_records_total"); got != 1 {
			t.Errorf("%v: records = %v after the permission was granted, want 1", err, got)
		}
		cancel()
		<-done
		mu.Lock()
		if got := fmt.Sprint(sleeps); got != "[1s 2s 4s]" {
			t.Errorf("%v: retries after %s, want [1s 2s 4s]", err, got)
		}
		mu.Unlock()
		if len(logs.msgs) != 1 {
			t.Errorf("%v: %d warnings logged, want exactly 1 (the retries at debug level): %q", err, len(logs.msgs), logs.msgs)
		}
	}
}

func TestKmsgLargeRecord(t *testing.T) {
	src := newKmsgFakeSource(4)
	big := "3,1,1,-;INFO: task java:1 blocked for more than 120 seconds." + strings.Repeat("x", 40<<10) + "\n"
	src.items <- kmsgFakeItem{rec: []byte(big)}
	r := newKmsgRig(t, false, src, nil)
	r.start()
	src.barrier(t)
	if got := r.k.events[kmsgHungTask].Load(); got != 1 {
		t.Errorf("a 40 KiB record was not counted (%d)", got)
	}
	if len(r.k.buf) < len(big) {
		t.Errorf("buffer %d bytes, record %d", len(r.k.buf), len(big))
	}
	r.stop(t)
}

func TestKmsgBadRecordsCounted(t *testing.T) {
	src := newKmsgFakeSource(4)
	src.items <- kmsgFakeItem{rec: []byte("garbage without header\n")}
	src.items <- kmsgFakeItem{rec: []byte("3,2,1,-;INFO: task java:1 blocked for more than 120 seconds.\n")}
	r := newKmsgRig(t, false, src, nil)
	r.start()
	src.barrier(t)
	if got := r.k.problems.Count(); got != 1 {
		t.Errorf("problems = %d, want 1", got)
	}
	if got := r.k.events[kmsgHungTask].Load(); got != 1 {
		t.Errorf("the good record after a bad one was not counted")
	}
	r.stop(t)
}

// TestKmsgRealDevice reads this machine's /dev/kmsg, positioned at the end
// and from boot: it writes a record (as root) and waits until the reader
// returns it with a user-space facility. At the end, the reader must not
// have read the old records first; from boot, it must. Cancelling ctx must
// end the blocked read.
func TestKmsgRealDevice(t *testing.T) {
	for _, fromBoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("from-boot=%v", fromBoot), func(t *testing.T) {
			w, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
			if err != nil {
				t.Skip("cannot write /dev/kmsg:", err)
			}
			defer w.Close()
			nonce := fmt.Sprintf("stall_exporter test %d", time.Now().UnixNano())
			type seen struct {
				r      kmsgRecord
				before int // records read before ours
			}
			got := make(chan seen, 1)
			counted := 0 // touched only by the reader goroutine
			k := newKmsgCollector(kmsgOptions{Path: "/dev/kmsg", Open: openDevKmsg("/dev/kmsg"), FromBoot: fromBoot,
				OnRecord: func(r kmsgRecord) {
					if bytes.Contains(r.Message, []byte(nonce)) {
						r.Message = bytes.Clone(r.Message)
						got <- seen{r, counted}
						return
					}
					counted++
				}})
			if !k.opened.Load() {
				t.Skip("cannot read /dev/kmsg")
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { k.Run(ctx); close(done) }()
			// An innocuous text: other tools watching this machine's kernel
			// log must not take the test for a real event. That user-space
			// records never count is checked on the fixtures (a fake hung
			// task with facility 1).
			if _, err := fmt.Fprintf(w, "<4>%s: reader check, please ignore\n", nonce); err != nil {
				t.Fatal(err)
			}
			var before int
			select {
			case s := <-got:
				r := s.r
				before = s.before
				if r.Facility == 0 {
					t.Errorf("a record written by user space has the kernel facility: %+v", r)
				}
				if r.Level != 4 {
					t.Errorf("level %d, want 4", r.Level)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the record written to /dev/kmsg was not read within 10 s")
			}
			switch {
			case fromBoot && before == 0:
				t.Error("from boot, no older record was read before ours")
			case !fromBoot && before > 10: // a few concurrent kernel messages are possible
				t.Errorf("at the end of the buffer, %d older records were read first", before)
			}
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after cancel: Close did not end the blocked read")
			}
		})
	}
}

func TestKmsgFromBootStartsAtOldest(t *testing.T) {
	var asked []bool
	open := func(fromStart bool) (kmsgSource, error) {
		asked = append(asked, fromStart)
		return newKmsgFakeSource(1), nil
	}
	newKmsgCollector(kmsgOptions{Open: open, FromBoot: true})
	newKmsgCollector(kmsgOptions{Open: open, FromBoot: false})
	if fmt.Sprint(asked) != "[true false]" {
		t.Errorf("opened with fromStart %v, want [true false]", asked)
	}
}

var kmsgHeaderRe = regexp.MustCompile(`^\d+,\d+,\d+,[^;]*;`)

// FuzzKmsgRecord: the parser never panics, accepts exactly the records whose
// header has the documented shape, and never returns a message with a
// newline; classification is total, an OOM event needs a "Killed process"
// record, an I/O event an " error", an excluded one a device name that is
// safe in a sysfs path, and only an announcement changes the reason a later
// bare kill gets.
func FuzzKmsgRecord(f *testing.F) {
	files, _ := filepath.Glob("fixtures/kmsg/*.kmsg")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && l[0] != '#' && l[0] != ' ' {
				f.Add([]byte(l + "\n SUBSYSTEM=block\n"))
			}
		}
	}
	f.Add([]byte("4,1,2,-,caller=T1;x"))
	f.Add([]byte(";"))
	f.Add([]byte("3,1,1,-;Buffer I/O error on dev ../../x, logical block 0"))
	f.Add([]byte("3,1,1,-;OOM[2]: Memory cgroup out of memory: Kill process 1 (x) score 1 or sacrifice child"))
	f.Add([]byte("4,1,1,-;x: page allocation failure: order:10, mode:0x2084020(GFP_ATOMIC|__GFP_COMP)"))
	f.Add([]byte("4,1,1,-;x: page allocation failure. order:13, mode:0x20"))
	f.Add([]byte("4,1,1,c;page allocation failure: order:"))
	f.Add([]byte("4,1,1,-;x: page allocation failure: order:99999999999999999999999, mode:0x20"))
	devices := kmsgDevices{paths: kmsgFixturePaths, filter: kmsgDefaultFilter(f)}
	bare := []byte("Killed process 1 (x)")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseKmsgRecord(b)
		if err != nil {
			return
		}
		if bytes.IndexByte(r.Message, '\n') >= 0 {
			t.Fatalf("message holds a newline: %q", r.Message)
		}
		if !kmsgHeaderRe.Match(b) {
			t.Fatalf("accepted a record without a valid header: %q", b)
		}
		if r.Level > 7 {
			t.Fatalf("level %d", r.Level)
		}
		m := parseKmsgMessage(r.Message)
		if m.Device != nil && kmsgDeviceName(m.Device) == nil {
			t.Fatalf("device %q is not a device name: %q", m.Device, r.Message)
		}
		c := kmsgClassifier{excluded: devices.excluded}
		e, order := c.event(r.Message)
		switch {
		case e >= kmsgEventCount:
			t.Fatalf("event %d out of range", e)
		case e != kmsgPageAllocationFailure && order != 0:
			t.Fatalf("%s with order %d: %q", e, order, r.Message)
		case order > kmsgOrderUnparsed:
			t.Fatalf("order %d out of range: %q", order, r.Message)
		case order != kmsgOrderUnparsed && e == kmsgPageAllocationFailure && !bytes.Contains(r.Message, kmsgAllocOrderField):
			t.Fatalf("order %d from a report without \" order:\": %q", order, r.Message)
		case (e == kmsgOOMKill || e == kmsgOOMKillCgroup) && !bytes.Contains(r.Message, kmsgKilledProcess):
			t.Fatalf("%s without a kill: %q", e, r.Message)
		case (e == kmsgIOError || e == kmsgIOErrorExcluded) && !bytes.Contains(r.Message, []byte(" error")):
			t.Fatalf("%s without an error: %q", e, r.Message)
		case e == kmsgIOErrorExcluded && m.Device == nil:
			t.Fatalf("excluded without a device: %q", r.Message)
		}
		want := kmsgOOMKill // nothing announced yet
		if m.Kind == kmsgOOMAnnouncement {
			want = m.Event
		}
		if got, _ := c.event(bare); got != want {
			t.Fatalf("a bare kill after %q is %s, want %s", r.Message, got, want)
		}
	})
}

func BenchmarkKmsgHandle(b *testing.B) {
	k := newKmsgCollector(kmsgOptions{Open: func(bool) (kmsgSource, error) { return newKmsgFakeSource(1), nil },
		Paths: kmsgFixturePaths, Devices: kmsgDefaultFilter(b)})
	recs := [][]byte{
		[]byte("6,1,5140900,-;e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None\n SUBSYSTEM=net\n DEVICE=n2\n"),
		[]byte("3,2,5140901,-,caller=T55;INFO: task jbd2/sdb1-8:412 blocked for more than 122 seconds.\n"),
		[]byte("4,3,5140902,-;CPU: 2 PID: 2911 Comm: java Not tainted 5.15.0-91-generic #101-Ubuntu\n"),
		[]byte("3,4,5140903,-;blk_update_request: I/O error, dev sdb, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0\n"),
	}
	b.ReportAllocs()
	seq := uint64(0)
	cpu := samplerCPUStart()
	for b.Loop() {
		k.haveSeq = false // every record is "new"
		k.handle(recs[seq%4])
		seq++
	}
	cpu.report(b, 0)
}

// BenchmarkKmsgReadDevice measures the kernel's side: reading every record
// of this machine's /dev/kmsg buffer with one read(2) each (non-blocking, so
// the run ends at the newest record), parsed and counted as the reader does.
func BenchmarkKmsgReadDevice(b *testing.B) {
	k := newKmsgCollector(kmsgOptions{Open: func(bool) (kmsgSource, error) { return newKmsgFakeSource(1), nil }})
	buf := make([]byte, kmsgBufSize)
	records := 0
	cpu := samplerCPUStart()
	for b.Loop() {
		fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			b.Skip("cannot open /dev/kmsg:", err)
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
	cpu.report(b, 0)
	if records > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(records), "ns/record")
		b.ReportMetric(float64(records)/float64(b.N), "records/op")
	}
}

func TestKmsgSurvivesPanic(t *testing.T) {
	src := newKmsgFakeSource(4)
	src.items <- kmsgFakeItem{rec: []byte("3,1,1,-;boom\n")}
	src.items <- kmsgFakeItem{rec: []byte("3,2,1,-;INFO: task java:1 blocked for more than 120 seconds.\n")}
	r := newKmsgRig(t, false, src, nil)
	r.k.opts.OnRecord = func(rec kmsgRecord) {
		if string(rec.Message) == "boom" {
			panic("injected")
		}
	}
	r.start()
	src.barrier(t)
	if got := r.k.problems.Count(); got != 1 {
		t.Errorf("problems = %d, want 1", got)
	}
	if got := r.k.events[kmsgHungTask].Load(); got != 1 {
		t.Errorf("the record after a panic was not counted")
	}
	if !r.k.up.Load() {
		t.Error("the reader stopped after a panic")
	}
	r.stop(t)
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
	logs := &kmsgLogCounter{}
	src := &kmsgWriteOnlySource{}
	var opens atomic.Int64
	var sleeps atomic.Int64
	k := newKmsgCollector(kmsgOptions{Path: "/dev/kmsg", Logger: slog.New(logs),
		Open: func(bool) (kmsgSource, error) { opens.Add(1); return src, nil },
		Sleep: func(ctx context.Context, d time.Duration) bool {
			sleeps.Add(1)
			return ctx.Err() == nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs.mu.Lock()
		n := len(logs.msgs)
		logs.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a retry that must not come
	ch := make(chan prometheus.Metric, 16)
	if err := k.Update(context.Background(), ch); err != nil {
		t.Errorf("Update = %v", err)
	}
	if len(ch) != 1 {
		t.Errorf("%d metrics sent, want stall_kernel_log_reader_up only", len(ch))
	} else {
		var pb dto.Metric
		m := <-ch
		if err := m.Write(&pb); err != nil || pb.GetGauge().GetValue() != 0 || !strings.Contains(m.Desc().String(), "stall_kernel_log_reader_up") {
			t.Errorf("sent %v = %v (%v), want stall_kernel_log_reader_up 0", m.Desc(), pb.GetGauge().GetValue(), err)
		}
	}
	cancel()
	<-done
	logs.mu.Lock()
	if len(logs.msgs) != 1 || !strings.Contains(logs.msgs[0], "cannot be read (Linux < 3.5)") {
		t.Errorf("warnings %q, want exactly one saying the kernel's /dev/kmsg cannot be read", logs.msgs)
	}
	logs.mu.Unlock()
	if opens.Load() != 1 || sleeps.Load() != 0 {
		t.Errorf("%d opens and %d backoff sleeps, want 1 and 0: the kernel will not change until a reboot", opens.Load(), sleeps.Load())
	}
	// Six reads double the 16 KiB buffer to 1 MiB, as for a large record;
	// the seventh, at 1 MiB, gives up.
	if got := src.reads.Load(); got != 7 {
		t.Errorf("%d reads, want 7", got)
	}
}
