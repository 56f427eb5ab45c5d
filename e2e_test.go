package main

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

var update = flag.Bool("update", false, "rewrite the golden files under collector/host/fixtures/*/metrics.golden")

// hostCollectors are the scrape-time collectors that read only files; the
// golden test runs exactly these, so background samplers and network
// collectors cannot make the output depend on timing.
var hostCollectors = map[string]bool{
	"vmstat": true, "sysctl": true, "zoneinfo": true, "meminfo": true, "pressure": true, "diskstats": true,
	"hungtask": true, "supervision": true,
}

// stable drops what legitimately varies between runs and scrapes: the
// exporter's own Go/process metrics, collector durations and the build
// info labels.
func stable(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		name := l
		if strings.HasPrefix(l, "# ") {
			f := strings.Fields(l)
			if len(f) >= 3 {
				name = f[2]
			}
		}
		switch {
		case l == "",
			strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"),
			strings.HasPrefix(name, "promhttp_"),
			strings.HasPrefix(name, "stall_scrape_collector_duration_seconds"),
			strings.HasPrefix(name, "stall_exporter_build_info"):
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n") + "\n"
}

// disableOthers is the --[no-]collector.<name> flags that enable exactly
// the hostCollectors.
func disableOthers() []string {
	var args []string
	for _, f := range kingpin.CommandLine.Model().Flags {
		n, ok := strings.CutPrefix(f.Name, "collector.")
		if !ok || !f.IsBoolFlag() {
			continue
		}
		if hostCollectors[n] {
			args = append(args, "--collector."+n)
		} else {
			args = append(args, "--no-collector."+n)
		}
	}
	return args
}

// TestGolden runs the binary on each kernel generation's fixtures and
// compares the whole /metrics output with collector/host/fixtures/<gen>/metrics.golden
// (regenerate with `make golden`). It also runs `promtool check metrics`.
func TestGolden(t *testing.T) {
	bin := e2etest.Build(t, ".")
	dirs, err := filepath.Glob("collector/host/fixtures/linux-*")
	if err != nil || len(dirs) < 3 {
		t.Fatalf("want at least three kernel generations of fixtures, found %v (%v)", dirs, err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			args := append(disableOthers(),
				"--path.procfs="+filepath.Join(dir, "proc"),
				"--path.sysfs="+filepath.Join(dir, "sys"),
				"--path.rootfs="+dir)
			if extra, err := os.ReadFile(filepath.Join(dir, "flags")); err == nil {
				args = append(args, strings.Fields(string(extra))...)
			}
			url := e2etest.StartExporter(t, bin, args...).URL
			full := e2etest.Scrape(t, url)
			collectortest.CheckMetrics(t, full)
			got := stable(full)
			golden := filepath.Join(dir, "metrics.golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run `make golden` to create it)", err)
			}
			if got != string(want) {
				t.Errorf("/metrics differs from %s (run `make golden` after checking the change):\n%s", golden, lineDiff(string(want), got))
			}
		})
	}
}

func lineDiff(want, got string) string {
	w, g := toSet(want), toSet(got)
	var out []string
	for l := range w {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range g {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func toSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			m[l] = true
		}
	}
	return m
}

// TestRealProc runs the binary on this machine's real /proc and /sys, as
// `make run` does, and checks the signals the README promises.
func TestRealProc(t *testing.T) {
	bin := e2etest.Build(t, ".")
	url := e2etest.StartExporter(t, bin, disableOthers()...).URL
	s := collectortest.Parse(t, e2etest.Scrape(t, url))
	for _, c := range []string{"vmstat", "meminfo", "diskstats", "sysctl"} {
		if s.Must(t, "stall_scrape_collector_success", "collector", c) != 1 {
			t.Errorf("collector %s failed on real /proc", c)
		}
	}
	th := s.Must(t, "stall_vm_dirty_threshold_bytes")
	bg := s.Must(t, "stall_vm_dirty_background_threshold_bytes")
	if th <= 0 || bg <= 0 || bg > th {
		t.Errorf("thresholds: dirty %v, background %v; want 0 < background <= dirty", th, bg)
	}
	if total := s.Must(t, "stall_memory_total_bytes"); th >= total {
		t.Errorf("dirty threshold %v not below MemTotal %v", th, total)
	}
	if r, ok := s.Get("stall_vm_dirty_throttle_ratio"); !ok || r < 0 {
		t.Errorf("throttle ratio %v (present %v)", r, ok)
	}
	ratio, _ := s.Get("stall_vm_sysctl", "name", "vm.dirty_ratio")
	bytes, _ := s.Get("stall_vm_sysctl", "name", "vm.dirty_bytes")
	if ratio+bytes == 0 {
		t.Error("neither vm.dirty_ratio nor vm.dirty_bytes exported")
	}
	if _, ok := s.Get("stall_disk_io_time_seconds_total"); !ok {
		t.Error("no block device exported from /proc/diskstats")
	}
	if _, err := os.Stat("/proc/pressure/memory"); err == nil {
		if _, ok := s.Get("stall_pressure_stalled_seconds_total", "resource", "memory", "scope", "some"); !ok {
			t.Error("/proc/pressure/memory exists but no PSI memory series")
		}
	}
}
