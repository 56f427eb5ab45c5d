package live

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// The writeback collector on the rig (issue 27): a writer in a cgroup of its own, throttled by
// balance_dirty_pages(), must find its pauses attributed to its comm and cgroup — no less than
// half the time its write(2) calls were blocked and no more than all of it — and a second cgroup
// holding an idle process must show nothing. The writer is this test process (as the shaper is):
// it joins the rig's writer cgroup, and on a cgroup v1 host a cgroup v2 group of its own too, for
// the label. It writes 64 KiB chunks at memory speed, each one's writeback started at once
// (shaper_test.go says why), so it reaches the throttle point (192 MiB) in about a second and is
// then paused to the loop device's 1 MiB/s for pausedFor.
const (
	pausedFor  = 20 * time.Second
	idleGroup  = "stall-exporter-live-idle"
	ownV2Group = "stall-exporter-live-writer" // the writer's cgroup v2 group on a v1-throttled host
	longWrite  = 5 * time.Millisecond         // a write(2) this long was paused: the copy takes microseconds
)

func TestThrottledWriterAttribution(t *testing.T) {
	throttledWriter(t, 0)
}

func throttledWriter(t *testing.T, memoryMax int64) {
	collectortest.RequireDisposable(t, "lowers vm.dirty_bytes host-wide for about a minute, creates a loop device "+
		"and a write throttle on it (a blkio rule, or a cgroup with io.max, for which "+cgroupEnv+"=v2 may unmount the blkio v1 hierarchy)")
	plan := requireRig(t)
	if memoryMax > 0 {
		var err error
		if plan.kind != "v2" {
			err = fmt.Errorf("the rig throttles through cgroup v1 here")
		} else if !hasController(filepath.Join(plan.root, "cgroup.subtree_control"), "memory") {
			err = fmt.Errorf("memory is not in %s/cgroup.subtree_control", plan.root)
		}
		collectortest.Require(t, "cgroup writeback: the rig on cgroup v2 with the memory controller enabled for the root's children (scripts/live-vm.sh with MEMORY_CGROUP=1)", err)
	}
	v2root := plan.root
	if plan.kind == "v1" {
		mounts, err := cgroupMounts()
		v2root = ""
		for _, m := range mounts {
			if m.fsType == "cgroup2" && v2root == "" {
				v2root = m.point
			}
		}
		if v2root == "" && err == nil {
			err = fmt.Errorf("no cgroup2 mount")
		}
		collectortest.Require(t, "a cgroup2 mount for the writer's and the idle process's cgroups", err)
	}

	r := setUpRig(t, plan)
	exp := e2etest.StartExporter(t, e2etest.Build(t, "."), "--collector.writeback", "--writeback.max-processes=100")

	// The idle cgroup: a process that sleeps through the test.
	idleDir := makeCgroup(t, filepath.Join(v2root, idleGroup))
	idle := exec.Command("sleep", "600")
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idle.Process.Kill(); idle.Wait() })
	if err := os.WriteFile(filepath.Join(idleDir, "cgroup.procs"), []byte(strconv.Itoa(idle.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	m := scrapeWriteback(t, exp.URL)
	if m.sourceUp != 1 {
		t.Fatalf("stall_dirty_throttle_pause_source_up %v before the load; exporter output:\n%s", m.sourceUp, exp.Output.String())
	}
	t.Logf("exporter: %s", firstLine(exp.Output.String(), "counting dirty-throttle pauses"))

	if memoryMax > 0 {
		if err := os.WriteFile(filepath.Join(r.state.Throttle.Group, "memory.max"), []byte(strconv.FormatInt(memoryMax, 10)), 0); err != nil {
			t.Fatal(err)
		}
	}
	leave, err := r.joinWriterGroup()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := leave(); err != nil {
			t.Errorf("writer cgroup: %v", err)
		}
	})
	if plan.kind == "v1" {
		back, err := joinCgroup(t, filepath.Join(v2root, ownV2Group), v2root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(back)
	}
	writerCgroup, ok := proclabel.ProcCgroup("/proc/self/cgroup")
	if !ok {
		t.Fatal("/proc/self/cgroup has no cgroup v2 line")
	}
	commB, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	writer := proclabel.Key{Comm: strings.TrimSpace(string(commB)), Cgroup: proclabel.Cgroup(writerCgroup)}
	idleLabel := proclabel.Cgroup("/" + idleGroup)

	// The ground truth: the kernel's own record of every hit, in a tracing instance of the test's
	// own (ftrace, which the program's verdict does not filter), and a counting perf event per CPU
	// on the event whose id the exporter logged (which it does, had the program returned 0).
	started := firstLine(exp.Output.String(), "counting dirty-throttle pauses")
	idm := regexp.MustCompile(` id=(\d+)`).FindStringSubmatch(started)
	if idm == nil {
		t.Fatalf("no event id in the exporter's start line %q", started)
	}
	id, _ := strconv.ParseUint(idm[1], 10, 64)
	trace := startTrace(t)
	hits := countTracepoint(t, id)

	cpu0, t0 := cpuSeconds(t, exp.Pid), time.Now()
	w := startWriter(r.dev)
	t.Cleanup(func() { w.halt() })
	collectortest.WaitFor(t, time.Minute, "a write(2) paused", func() error {
		if w.longWrites.Load() == 0 {
			return fmt.Errorf("no write asleep %s or more yet (%d MiB written)", longWrite, w.written.Load()>>20)
		}
		return nil
	})
	t.Logf("first pause after %d MiB", w.written.Load()>>20)
	// The first scrape that reads who dirties (past the host's background threshold, or with
	// pauses counted since the scrape before) takes each process's write_bytes. The exporter reads
	// /proc/vmstat through the sampler's last read, up to a second old: scrape until it reads.
	var (
		first           writebackScrape
		before1, after1 int64
	)
	collectortest.WaitFor(t, time.Minute, "a scrape that reads who dirties", func() error {
		before1 = w.written.Load()
		first = scrapeWriteback(t, exp.URL)
		after1 = w.written.Load()
		if first.scanActive != 1 {
			return fmt.Errorf("stall_process_dirtied_scan_active 0 after %d MiB written", after1>>20)
		}
		return nil
	})
	// No scrape while the writer is paused: the exporter's CPU here is the sampler's alone, the
	// program running in the paused writer's context.
	cpuQuiet0, hits0 := cpuSeconds(t, exp.Pid), len(trace.snapshot())
	time.Sleep(pausedFor)
	cpuQuiet1, hits1 := cpuSeconds(t, exp.Pid), len(trace.snapshot())
	t.Logf("%s without a scrape while the writer was paused: %d hits of the tracepoint, exporter CPU %.2f s",
		pausedFor, hits1-hits0, cpuQuiet1-cpuQuiet0)
	before2 := w.written.Load()
	last := scrapeWriteback(t, exp.URL)
	after2 := w.written.Load()
	if err := w.halt(); err != nil {
		t.Fatal(err)
	}
	load := time.Since(t0)
	host, err := readDirty()
	if err != nil {
		t.Fatal(err)
	}
	events := hits()
	traced := trace.stop()
	// The writer has stopped: this scrape and the trace cover the same sleeps.
	final := scrapeWriteback(t, exp.URL)
	cpu1 := cpuSeconds(t, exp.Pid)
	slept, blocked := time.Duration(w.slept.Load()), time.Duration(w.blocked.Load())

	var wantMS, wantSleeps, otherSleeps int64
	for _, e := range traced {
		switch {
		case e.pause <= 0:
		case e.pid == int(w.tid.Load()):
			wantMS += e.pause
			wantSleeps++
		default:
			otherSleeps++
		}
	}
	got := final.pause[writer]
	t.Logf("writer %v: %.3f s paused in %v sleeps; the trace: %d ms in %d sleeps (%d sleeps of other tasks); its write(2) calls slept %.3f s (%d of them %s or more) and took %.3f s; %d MiB written",
		writer, got.seconds, got.sleeps, wantMS, wantSleeps, otherSleeps, slept.Seconds(), w.longWrites.Load(), longWrite, blocked.Seconds(), w.written.Load()>>20)
	t.Logf("load %.1f s: %d hits of the tracepoint (%d traced, %.1f/s), %.1f sleeps/s; exporter CPU %.3f s over the load and its scrapes",
		load.Seconds(), events, len(traced), float64(events)/load.Seconds(), got.sleeps/load.Seconds(), cpu1-cpu0)
	for k, v := range final.pause {
		if k != writer {
			t.Logf("also paused: %v %.3f s in %v sleeps", k, v.seconds, v.sleeps)
		}
	}
	if wantSleeps == 0 {
		t.Fatal("the trace shows no sleep of the writer")
	}
	mib := func(pages int64) float64 { return float64(pages) * float64(os.Getpagesize()) / (1 << 20) }
	t.Logf("the host at the end of the load: %.1f MiB dirty + %.1f MiB writeback, background threshold %.0f MiB",
		mib(host.dirty), mib(host.writeback), mib(host.background))
	if memoryMax > 0 && host.dirty+host.writeback > host.background {
		t.Errorf("container case: the host's dirty and writeback pages (%d) passed its background threshold (%d): not the cgroup's own limit alone",
			host.dirty+host.writeback, host.background)
	}
	if int64(math.Round(got.seconds*1000)) != wantMS || int64(got.sleeps) != wantSleeps {
		t.Errorf("writer's pause %.3f s in %v sleeps: the trace has %d ms in %d sleeps", got.seconds, got.sleeps, wantMS, wantSleeps)
	}
	if events != uint64(len(traced)) {
		t.Errorf("perf counted %d hits, the trace %d: the program hides hits from perf", events, len(traced))
	}
	for k := range final.pause {
		if k.Cgroup == writer.Cgroup && k != writer {
			t.Errorf("pauses attributed to %v, in the writer's cgroup, which holds only the writer", k)
		}
		if k.Cgroup == idleLabel {
			t.Errorf("pauses attributed to %v, in the idle cgroup", k)
		}
	}
	for k := range last.dirtied {
		if k.Cgroup == idleLabel {
			t.Errorf("dirtied bytes attributed to %v, in the idle cgroup", k)
		}
	}
	// What the writer dirtied between the two scrapes: every chunk is new pages, dirtied once. A
	// large folio may be dirtied whole by the chunk that starts it: up to 2 MiB more.
	d := last.dirtied[writer] - first.dirtied[writer]
	lo, hi := float64(before2-after1), float64(after2-before1+2<<20)
	t.Logf("writer dirtied %.1f MiB between the two scrapes (wrote %.1f to %.1f MiB)", d/(1<<20), lo/(1<<20), float64(after2-before1)/(1<<20))
	if d < lo || d > hi {
		t.Errorf("writer dirtied %.0f bytes between the scrapes: want %.0f to %.0f", d, lo, hi)
	}
	if last.scanActive != 1 {
		t.Errorf("last scrape: stall_process_dirtied_scan_active %v", last.scanActive)
	}
	t.Logf("scrape of the writeback collector: %.1f ms past the threshold, %.1f ms before the load, %.1f ms after it", last.duration*1000, m.duration*1000, final.duration*1000)
}

// writer writes chunks to the rig's device until halted, from one OS thread, and measures how
// long each write(2) slept: its wall time less the thread's time on a CPU and waiting for one
// (/proc/thread-self/schedstat), so that a slow copy (an emulated CPU) is not taken for a pause.
type writer struct {
	written    atomic.Int64
	blocked    atomic.Int64 // ns in write(2)
	slept      atomic.Int64 // ns of those asleep
	longWrites atomic.Int64 // write(2) calls that slept longWrite or more
	tid        atomic.Int64 // the writing thread
	stop, done chan struct{}
	err        atomic.Pointer[error]
}

// threadSchedstat is this thread's time on a CPU and waiting on a run queue, in ns.
func threadSchedstat() (int64, error) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/thread-self/schedstat: %q", b)
	}
	run, err1 := strconv.ParseInt(f[0], 10, 64)
	wait, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/thread-self/schedstat: %q", b)
	}
	return run + wait, nil
}

func startWriter(dev *os.File) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// schedstat is the thread's. Unlocked before the goroutine ends: a thread that ends locked is
		// killed, and with it the Pdeathsig of a process it may have started (e2etest.Run).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		w.tid.Store(int64(unix.Gettid()))
		fail := func(err error) { w.err.Store(&err) }
		fd := int(dev.Fd())
		data := bytes.Repeat([]byte("stall_exporter writeback attribution "), chunk/37+1)[:chunk]
		for off := int64(0); ; off += chunk {
			select {
			case <-w.stop:
				return
			default:
			}
			if off+chunk > writeCap {
				fail(fmt.Errorf("the writer reached its cap of %d MiB", writeCap>>20))
				return
			}
			cpu0, err := threadSchedstat()
			if err != nil {
				fail(err)
				return
			}
			t0 := time.Now()
			if _, err := dev.WriteAt(data, off); err != nil {
				fail(err)
				return
			}
			took := time.Since(t0)
			cpu1, err := threadSchedstat()
			if err != nil {
				fail(err)
				return
			}
			slept := max(took-time.Duration(cpu1-cpu0), 0)
			w.blocked.Add(int64(took))
			w.slept.Add(int64(slept))
			if slept >= longWrite {
				w.longWrites.Add(1)
			}
			if err := unix.SyncFileRange(fd, off, chunk, unix.SYNC_FILE_RANGE_WRITE); err != nil {
				fail(fmt.Errorf("sync_file_range: %w", err))
				return
			}
			w.written.Store(off + chunk)
		}
	}()
	return w
}

// halt stops the writer (a paused write ends within its pause) once.
func (w *writer) halt() error {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the writer did not stop within 30 s")
	}
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

type pauseTotal struct{ seconds, sleeps float64 }

// writebackScrape is what one scrape shows of the writeback collector.
type writebackScrape struct {
	pause      map[proclabel.Key]pauseTotal
	dirtied    map[proclabel.Key]float64
	sourceUp   float64
	scanActive float64
	duration   float64
}

func scrapeWriteback(t *testing.T, url string) writebackScrape {
	t.Helper()
	s := writebackScrape{pause: map[proclabel.Key]pauseTotal{}, dirtied: map[proclabel.Key]float64{}}
	for _, line := range strings.Split(e2etest.Scrape(t, url), "\n") {
		name, labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		k := proclabel.Key{Comm: labels["comm"], Main: labels["main"], Cgroup: labels["cgroup"]}
		switch name {
		case "stall_dirty_throttle_pause_seconds_total":
			p := s.pause[k]
			p.seconds = value
			s.pause[k] = p
		case "stall_dirty_throttle_pauses_total":
			p := s.pause[k]
			p.sleeps = value
			s.pause[k] = p
		case "stall_process_dirtied_bytes_total":
			s.dirtied[k] = value
		case "stall_dirty_throttle_pause_source_up":
			s.sourceUp = value
		case "stall_process_dirtied_scan_active":
			s.scanActive = value
		case "stall_scrape_collector_duration_seconds":
			if labels["collector"] == "writeback" {
				s.duration = value
			}
		}
	}
	return s
}

// parseSample parses one exposition line `name{a="b",…} value`; label values here have no
// commas, quotes or braces of their own (process and cgroup names of this test).
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	head := line[:sp]
	labels = map[string]string{}
	if i := strings.IndexByte(head, '{'); i >= 0 {
		for kv := range strings.SplitSeq(strings.TrimSuffix(head[i+1:], "}"), ",") {
			k, val, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(val, `"`)
		}
		head = head[:i]
	}
	return head, labels, v, true
}

// makeCgroup creates an empty cgroup v2 group, removed at cleanup (after its processes are gone).
func makeCgroup(t *testing.T, dir string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := settle(func() error { return unix.Rmdir(dir) }); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return dir
}

// joinCgroup moves the test process into a cgroup v2 group of its own and returns the move back to
// the cgroup v2 group it was in.
func joinCgroup(t *testing.T, dir, root string) (back func(), err error) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	own, ok := proclabel.ProcCgroup("/proc/self/cgroup")
	if !ok {
		return nil, fmt.Errorf("/proc/self/cgroup has no cgroup v2 line: %s", b)
	}
	makeCgroup(t, dir)
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0); err != nil {
		return nil, err
	}
	return func() {
		if err := os.WriteFile(filepath.Join(root, own, "cgroup.procs"), pid, 0); err != nil {
			t.Errorf("moving back to %s: %v", own, err)
		}
	}, nil
}

// cpuSeconds is a process's user + system CPU time (/proc/<pid>/stat utime and stime, in clock
// ticks of 1/100 s).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

func firstLine(out, substr string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, substr) {
			return strings.TrimSpace(line)
		}
	}
	return "(no line with " + strconv.Quote(substr) + ")"
}

// countTracepoint counts the hits of tracepoint id on every CPU from now on; the returned function
// reads the total and closes the events.
func countTracepoint(t *testing.T, id uint64) func() uint64 {
	t.Helper()
	var fds []int
	for cpu := range runtime.NumCPU() {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id}
		attr.Size = uint32(unsafe.Sizeof(attr))
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			t.Fatalf("perf_event_open(tracepoint %d, cpu %d): %v", id, cpu, err)
		}
		fds = append(fds, fd)
	}
	closed := false
	closeAll := func() {
		if !closed {
			closed = true
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
	t.Cleanup(closeAll)
	return func() uint64 {
		var total uint64
		var b [8]byte
		for _, fd := range fds {
			if n, err := unix.Read(fd, b[:]); err != nil || n != 8 {
				t.Fatalf("reading a tracepoint count: %d bytes, %v", n, err)
			}
			total += binary.NativeEndian.Uint64(b[:])
		}
		closeAll()
		return total
	}
}

// traceName is the test's tracing instance (tracefs instances/), removed at the end; a run killed
// before leaves it, and the next run removes it first.
const traceName = "stall-exporter-live-writeback"

// tracing is a tracing instance recording writeback:balance_dirty_pages, reached through a tracefs
// mount of the test's own that no other process sees (fsmount).
type tracing struct {
	t    *testing.T
	mfd  int
	dir  string
	done bool
}

// tracedPause is one record of the event: the task's pid (the thread's) and its pause in ms.
type tracedPause struct {
	pid   int
	pause int64
}

func startTrace(t *testing.T) *tracing {
	t.Helper()
	fsfd, err := unix.Fsopen("tracefs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		t.Fatalf("fsopen tracefs: %v", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		t.Fatalf("fsconfig tracefs: %v", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("fsmount tracefs: %v", err)
	}
	tr := &tracing{t: t, mfd: mfd, dir: fmt.Sprintf("/proc/self/fd/%d/instances/%s", mfd, traceName)}
	_ = os.Remove(tr.dir) // left by a killed run
	if err := os.Mkdir(tr.dir, 0o755); err != nil {
		t.Fatalf("creating the tracing instance: %v", err)
	}
	t.Cleanup(func() {
		tr.stop()
		if err := os.Remove(tr.dir); err != nil {
			t.Errorf("removing the tracing instance: %v", err)
		}
		unix.Close(mfd)
	})
	for _, kv := range [][2]string{
		{"buffer_size_kb", "8192"},
		{"events/writeback/balance_dirty_pages/enable", "1"},
	} {
		if err := os.WriteFile(filepath.Join(tr.dir, kv[0]), []byte(kv[1]), 0); err != nil {
			t.Fatalf("tracing instance %s: %v", kv[0], err)
		}
	}
	return tr
}

// tracedLine matches a balance_dirty_pages record of the trace file:
// "   live.test-1234  [001] ..... 123.456: balance_dirty_pages: bdi 7:0: … pause=12 period=…".
var tracedLine = regexp.MustCompile(`-(\d+)\s+\[\d+\].*: balance_dirty_pages: .* pause=(-?\d+) `)

// stop stops recording and returns the records; a buffer that overflowed fails the test.
func (tr *tracing) stop() []tracedPause {
	if tr.done {
		return nil
	}
	tr.done = true
	if err := os.WriteFile(filepath.Join(tr.dir, "events/writeback/balance_dirty_pages/enable"), []byte("0"), 0); err != nil {
		tr.t.Errorf("stopping the trace: %v", err)
	}
	return tr.snapshot()
}

// snapshot returns the records so far.
func (tr *tracing) snapshot() []tracedPause {
	t := tr.t
	cpus, _ := filepath.Glob(filepath.Join(tr.dir, "per_cpu", "cpu*", "stats"))
	for _, f := range cpus {
		if stats, err := os.ReadFile(f); err == nil && !bytes.Contains(stats, []byte("overrun: 0\n")) {
			t.Errorf("the trace buffer overflowed (%s):\n%s", f, stats)
		}
	}
	b, err := os.ReadFile(filepath.Join(tr.dir, "trace"))
	if err != nil {
		t.Fatalf("reading the trace: %v", err)
	}
	var out []tracedPause
	for line := range strings.Lines(string(b)) {
		m := tracedLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		pause, _ := strconv.ParseInt(m[2], 10, 64)
		out = append(out, tracedPause{pid, pause})
	}
	return out
}
