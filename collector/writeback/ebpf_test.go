package writeback

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestPauseSourceAttaches loads and attaches the program on this machine's
// kernel, with the event's format read from its tracefs (here, where none
// is mounted, from a private one), and the collector reports the source up
// with nothing paused: only the "other" series, at 0.
func TestPauseSourceAttaches(t *testing.T) {
	collectortest.RequireRoot(t, "loading eBPF programs and opening a tracepoint need CAP_BPF and CAP_PERFMON")
	o, err := registerTestFlags(t, "--writeback.max-processes=3")
	if err != nil {
		t.Fatal(err)
	}
	logs := &collectortest.Logs{}
	cfg := testConfig(t, logs)
	c := newCollector(o, cfg)
	defer c.Close()
	if c.pause == nil {
		t.Fatalf("pause source off: %s", logs)
	}
	if logs.Count("info", "counting dirty-throttle pauses per process") != 1 {
		t.Errorf("no start line: %s", logs)
	}
	r := collectortest.Scrape(t, c, 5*time.Second)
	if v := r.Must(t, "stall_dirty_throttle_pause_source_up"); v != 1 {
		t.Errorf("source up %v", v)
	}
	if v := r.Must(t, "stall_dirty_throttle_pauses_total", "comm", "other"); v != 0 {
		t.Errorf("other's pauses %v on an idle start", v)
	}
}

// TestPauseProgram runs the program's instructions in the kernel with
// BPF_PROG_TEST_RUN, which tracepoint programs do not support: loaded as
// a raw tracepoint program, whose context is an array of u64 the test
// gives, with pause at offset 8. It guards what is counted (sleeps only:
// pause <= 0 is a call that did not sleep), under which key (this
// process, its cgroup, its comm), what a full map does (the overflow
// slot, reported as "other"), and what a drain does with an entry of a
// process that has exited (named by its recorded comm, then deleted).
func TestPauseProgram(t *testing.T) {
	collectortest.RequireRoot(t, "loading eBPF programs needs CAP_BPF")
	cm, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: pauseKeySize, ValueSize: pauseValueSize, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	overflow, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: overflowValueSize, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer overflow.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.RawTracepoint,
		Instructions: pauseProgram(pauseLayout{pauseOff: 8, pauseSize: 8}, cm, overflow, true),
		License:      "Dual MIT/GPL",
	})
	collectortest.Require(t, "BPF_PROG_TEST_RUN of raw tracepoint programs (5.10+)", err)
	defer prog.Close()
	run := func(pause int64) {
		t.Helper()
		ctx := make([]byte, 16)
		binary.NativeEndian.PutUint64(ctx[8:], uint64(pause))
		if _, err := prog.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
			collectortest.Require(t, "BPF_PROG_TEST_RUN of raw tracepoint programs (5.10+)", err)
		}
	}

	// A process that has exited holds one of the two entries.
	ghost := pauseKey{Tgid: 1 << 30, Cgroup: 1 << 40} // no such cgroup: "unknown"
	gv := pauseValue{PauseMS: 40, Pauses: 2}
	copy(gv.Comm[:], "ghost")
	if err := cm.Put(ghost, gv); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int64{12, 0, -200, 8} {
		run(p)
	}
	var (
		k pauseKey
		v pauseValue
	)
	self := pauseKey{}
	for it := cm.Iterate(); it.Next(&k, &v); {
		if k != ghost {
			self = k
			if v.PauseMS != 20 || v.Pauses != 2 || proclabel.CommBytes(v.Comm[:]) == "" {
				t.Errorf("this process's entry %+v: want 20 ms in 2 sleeps and a comm", v)
			}
		}
	}
	if self.Tgid != uint32(os.Getpid()) || self.Cgroup == 0 {
		t.Fatalf("key %+v: want this process (%d) and a cgroup id", self, os.Getpid())
	}

	// The map is full: a third key goes to the overflow slot.
	if err := cm.Delete(self); err != nil {
		t.Fatal(err)
	}
	if err := cm.Put(pauseKey{Tgid: 1<<30 + 1}, pauseValue{}); err != nil {
		t.Fatal(err)
	}
	run(30)
	var ovf overflowValue
	if err := overflow.Lookup(uint32(0), &ovf); err != nil || ovf != (overflowValue{30, 1}) {
		t.Fatalf("overflow %+v %v: want 30 ms in 1 sleep", ovf, err)
	}
	if err := cm.Delete(pauseKey{Tgid: 1<<30 + 1}); err != nil {
		t.Fatal(err)
	}
	run(5)

	// A drain: this process under its comm and cgroup, the exited one
	// under its recorded comm (then deleted), the overflow as "other".
	root, _, err := proclabel.FindCgroup2Root("/proc/self/mountinfo")
	if err != nil {
		t.Logf("no cgroup2 mount (%v): the cgroup of the ids is named from /proc", err)
	}
	s := &pauseSource{counts: cm, overflow: overflow, event: -1, procPath: procPath, seen: map[pauseKey]seenPause{}, cgroups: proclabel.NewCgroupNames(root, procPath)}
	tab := proclabel.NewTable[counts](5, time.Minute)
	if n, err := s.drain(tab); err != nil || n != 4 {
		t.Fatalf("drain: %d sleeps, %v; want 4 (1 of this process, 2 of the exited one, 1 in the overflow slot)", n, err)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	cg, _ := proclabel.ProcCgroup("/proc/self/cgroup")
	me := proclabel.Key{Comm: strings.TrimSpace(string(comm)), Cgroup: proclabel.Cgroup(cg)}
	if c, ok := tab.Lookup(me); !ok || c.pauses != 1 || c.pauseMS != 5 {
		t.Errorf("this process %v: %+v %v, want 5 ms in 1 sleep", me, c, ok)
	}
	if c, ok := tab.Lookup(proclabel.Key{Comm: "ghost", Cgroup: proclabel.Unknown}); !ok || c.pauses != 2 || c.pauseMS != 40 {
		t.Errorf("the exited process: %+v %v, want 40 ms in 2 sleeps", c, ok)
	}
	if o := tab.Other(); o.pauses != 1 || o.pauseMS != 30 {
		t.Errorf("other %+v: want the overflow's 30 ms in 1 sleep", o)
	}
	if err := cm.Lookup(ghost, &v); err == nil {
		t.Error("the exited process's entry is still in the map")
	}
	// A second drain adds only what is new.
	run(7)
	if n, err := s.drain(tab); err != nil || n != 1 {
		t.Fatalf("second drain: %d sleeps, %v; want 1", n, err)
	}
	if c, _ := tab.Lookup(me); c == nil || c.pauses != 2 || c.pauseMS != 12 {
		t.Errorf("after a second drain: %+v, want 12 ms in 2 sleeps", c)
	}
}

func procPath(elem ...string) string { return "/proc/" + strings.Join(elem, "/") }
