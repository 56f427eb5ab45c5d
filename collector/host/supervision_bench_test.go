package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// BenchmarkSupervisionScan is one uncached scan of this machine's real
// /proc, as is and with extra idle processes (sleep) started for the
// measurement, plus a few candidates: two broker stand-ins and two
// unrelated JVMs. "warm" is the steady state (each process's identity
// known from the previous scan); "cold" forgets the identities first, as
// the first scan after start does. cpu-ns/op is the process's user+system
// CPU, which includes the kernel's side of generating the /proc files.
//
//	go test -run '^$' -bench SupervisionScan -benchtime 200x ./collector/host/
func BenchmarkSupervisionScan(b *testing.B) {
	for _, extra := range []int{0, 1000, 5000} {
		b.Run(fmt.Sprintf("extra=%d", extra), func(b *testing.B) {
			startIdleProcesses(b, extra)
			startBenchJVMs(b)
			c, _ := newTestSupervision(b, "/proc")
			if _, err := c.scan(context.Background()); err != nil {
				b.Fatal(err)
			}
			for _, mode := range []string{"warm", "cold"} {
				b.Run(mode, func(b *testing.B) {
					b.ReportAllocs()
					cpu := collectortest.ProcessCPU()
					var s *supervisionScan
					for b.Loop() {
						if mode == "cold" {
							c.known = map[int]knownProc{}
						}
						var err error
						if s, err = c.scan(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
					reportCPU(b, cpu, 0)
					b.ReportMetric(float64(s.scanned), "procs")
				})
			}
		})
	}
}

// BenchmarkSupervisionReadEveryStat is the design not taken: reading
// /proc/<pid>/stat (which carries comm, tty_nr and state in one file) for
// every process instead of /proc/<pid>/comm.
func BenchmarkSupervisionReadEveryStat(b *testing.B) {
	startIdleProcesses(b, 1000)
	c, _ := newTestSupervision(b, "/proc")
	b.ReportAllocs()
	cpu := collectortest.ProcessCPU()
	for b.Loop() {
		procs, err := c.fs.AllProcs()
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range procs {
			_, _ = p.Stat()
		}
	}
	reportCPU(b, cpu, 0)
}

// startIdleProcesses starts n sleep processes, killed when the benchmark
// ends.
func startIdleProcesses(b *testing.B, n int) {
	b.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Fatal(err)
	}
	cmds := make([]*exec.Cmd, 0, n)
	b.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for range n {
		c := exec.Command(sleep, "3600")
		if err := c.Start(); err != nil {
			b.Fatalf("starting idle process %d of %d: %v", len(cmds)+1, n, err)
		}
		cmds = append(cmds, c)
	}
}

// startBenchJVMs starts two broker stand-ins and two JVMs that are not
// watched (all this test binary behind a symlink named java).
func startBenchJVMs(b *testing.B) {
	b.Helper()
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	java := filepath.Join(dir, "java")
	if err := os.Symlink(self, java); err != nil {
		b.Fatal(err)
	}
	for i, class := range []string{"org.apache.rocketmq.broker.BrokerStartup", "org.apache.rocketmq.broker.BrokerStartup",
		"org.elasticsearch.bootstrap.Elasticsearch", "kafka.Kafka"} {
		c := exec.Command(java, standInPIDFlag+filepath.Join(dir, fmt.Sprint(i)), "-Xmx1g", "-cp", ".", class)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
		})
	}
}
