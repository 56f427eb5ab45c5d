package writeback

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// BenchmarkProgram is the program's cost per event of a sleeping call,
// as the kernel times it (BPF_PROG_TEST_RUN, loaded as a raw tracepoint
// program as in TestPauseProgram): the entry exists after the first run,
// so this is the common path — two helper calls for the key, a lookup and
// two atomic adds. docs/benchmarks.md quotes it.
func BenchmarkProgram(b *testing.B) {
	collectortest.RequireRoot(b, "loading eBPF programs needs CAP_BPF")
	cm, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: pauseKeySize, ValueSize: pauseValueSize, MaxEntries: pauseMapEntries})
	if err != nil {
		b.Fatal(err)
	}
	defer cm.Close()
	ovf, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: overflowValueSize, MaxEntries: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer ovf.Close()
	for _, tc := range []struct {
		name  string
		pause int64
	}{{"sleep", 12}, {"no-sleep", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
				Type:         ebpf.RawTracepoint,
				Instructions: pauseProgram(pauseLayout{pauseOff: 8, pauseSize: 8}, cm, ovf, true),
				License:      "Dual MIT/GPL",
			})
			collectortest.Require(b, "BPF_PROG_TEST_RUN of raw tracepoint programs (5.10+)", err)
			defer prog.Close()
			ctx := make([]byte, 16)
			binary.NativeEndian.PutUint64(ctx[8:], uint64(tc.pause))
			_, err = prog.Run(&ebpf.RunOptions{Context: ctx}) // creates the entry
			collectortest.Require(b, "BPF_PROG_TEST_RUN of raw tracepoint programs (5.10+)", err)
			// The kernel times each run while a BPF_ENABLE_STATS descriptor is
			// open (every program's, for the benchmark's few seconds).
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				b.Fatal(err)
			}
			defer stats.Close()
			info0, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := prog.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			info1, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			if n := info1.RunCount - info0.RunCount; n > 0 {
				b.ReportMetric(float64((info1.Runtime-info0.Runtime).Nanoseconds())/float64(n), "kernel-ns/event")
			}
		})
	}
}

// BenchmarkUpdate is a scrape's cost on this machine: idle (below the
// background threshold, an empty map: one read of /proc/vmstat and a
// drain of nothing) and past the threshold (every process's
// /proc/<pid>/io read, the top named).
func BenchmarkUpdate(b *testing.B) {
	for _, tc := range []struct {
		name  string
		dirty int
	}{{"idle", 10}, {"past-background", 5000}} {
		b.Run(tc.name, func(b *testing.B) {
			vm := filepath.Join(b.TempDir(), "vmstat")
			err := os.WriteFile(vm, []byte("nr_dirty "+strconv.Itoa(tc.dirty)+"\nnr_writeback 0\nnr_dirty_threshold 2000\nnr_dirty_background_threshold 1000\n"), 0o644)
			if err != nil {
				b.Fatal(err)
			}
			fs, err := procfs.NewFS("/proc")
			if err != nil {
				b.Fatal(err)
			}
			c := &Collector{
				cfg:      collectortest.Config("writeback", nil),
				procs:    proclabel.NewTable[counts](20, processIdle),
				dirtiers: &dirtiers{fs: fs, vmstat: vm, procPath: procPath, top: 20},
			}
			c.drainLog, c.dirtyLog = collector.NewStateLog(c.cfg.Logger), collector.NewStateLog(c.cfg.Logger)
			if os.Geteuid() == 0 {
				if s, err := startPause(options{maxProcesses: 20, mapEntries: pauseMapEntries}, testConfig(b, nil)); err == nil {
					c.pause = s
					defer s.Close()
				}
			}
			procs, err := fs.AllProcs()
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				collectortest.Scrape(b, c, 10*time.Second)
			}
			b.ReportMetric(float64(len(procs)), "processes")
		})
	}
}
