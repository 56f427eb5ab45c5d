package host

import (
	"github.com/stall-exporter/stall_exporter/collector"

	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func hungTaskProc(t *testing.T, files map[string]string) collector.Paths {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sys", "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, "sys", "kernel", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return collector.Paths{Procfs: dir}
}

func newTestHungTask(t *testing.T, paths collector.Paths, problems *collector.Problems) *hungTaskCollector {
	t.Helper()
	if problems == nil {
		problems = collector.NewProblems("hungtask", slog.New(slog.DiscardHandler))
	}
	cfg := testConfig(t, "hungtask", paths.Procfs, "", nil)
	cfg.Problems = problems
	return newHungTaskCollector(cfg, testSettings(t))
}

func TestHungTask(t *testing.T) {
	c := newTestHungTask(t, hungTaskProc(t, map[string]string{
		"hung_task_detect_count": "17\n",
		"hung_task_warnings":     "0\n", // the kernel has stopped reporting
		"hung_task_timeout_secs": "240\n",
	}), nil)
	mfs := samplerGather(t, c)
	if got := samplerCounter(mfs, "stall_kernel_hung_task_detected_total"); got != 17 {
		t.Errorf("detected = %v, want 17", got)
	}
	if got := kmsgGauge(mfs, "stall_kernel_hung_task_warnings_remaining"); got != 0 {
		t.Errorf("warnings remaining = %v, want 0", got)
	}
	if got := kmsgGauge(mfs, "stall_kernel_hung_task_timeout_seconds"); got != 240 {
		t.Errorf("timeout = %v, want 240", got)
	}
}

func TestHungTaskOlderKernel(t *testing.T) {
	// Before 6.11 there is no detect count; warnings -1 is unlimited.
	c := newTestHungTask(t, hungTaskProc(t, map[string]string{"hung_task_warnings": "-1\n", "hung_task_timeout_secs": "120\n"}), nil)
	mfs := samplerGather(t, c)
	if _, ok := mfs["stall_kernel_hung_task_detected_total"]; ok {
		t.Error("detect count exported by a kernel without the file")
	}
	if got := kmsgGauge(mfs, "stall_kernel_hung_task_warnings_remaining"); got != -1 {
		t.Errorf("warnings remaining = %v, want -1", got)
	}
	if c.problems.Count() != 0 {
		t.Errorf("a missing file was counted as a problem")
	}
}

func TestHungTaskAbsentAndMalformed(t *testing.T) {
	// CONFIG_DETECT_HUNG_TASK=n: none of the files.
	c := newTestHungTask(t, hungTaskProc(t, nil), nil)
	if err := c.Update(context.Background(), nil); !errors.Is(err, collector.ErrNoData) {
		t.Errorf("Update without the files = %v, want ErrNoData", err)
	}
	c = newTestHungTask(t, hungTaskProc(t, map[string]string{"hung_task_detect_count": "many\n", "hung_task_warnings": "10\n", "hung_task_timeout_secs": "x"}), c.problems)
	mfs := samplerGather(t, c)
	if got := kmsgGauge(mfs, "stall_kernel_hung_task_warnings_remaining"); got != 10 {
		t.Errorf("warnings remaining = %v, want 10 next to malformed files", got)
	}
	if got := c.problems.Count(); got != 2 {
		t.Errorf("problems = %d, want 2", got)
	}

	// A file that cannot be read (here a directory in its place) fails the
	// scrape without counting as bad input; the other files are sent.
	paths := hungTaskProc(t, map[string]string{"hung_task_warnings": "10\n", "hung_task_timeout_secs": "120\n"})
	if err := os.Mkdir(filepath.Join(paths.Procfs, "sys", "kernel", "hung_task_detect_count"), 0o755); err != nil {
		t.Fatal(err)
	}
	c = newTestHungTask(t, paths, nil)
	ch := make(chan prometheus.Metric, 8)
	err := c.Update(context.Background(), ch)
	if err == nil || errors.Is(err, collector.ErrNoData) {
		t.Errorf("unreadable detect count: %v, want a failure", err)
	}
	if len(ch) != 2 || c.problems.Count() != 0 {
		t.Errorf("%d values sent and %d problems counted, want 2 and 0", len(ch), c.problems.Count())
	}
}

func TestHungTaskRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/hung_task_timeout_secs"); err != nil {
		t.Skip("kernel without the hung task detector")
	}
	c := newTestHungTask(t, collector.Paths{Procfs: "/proc"}, nil)
	mfs := samplerGather(t, c)
	if _, ok := mfs["stall_kernel_hung_task_timeout_seconds"]; !ok {
		t.Error("no timeout exported from this machine's /proc")
	}
	if c.problems.Count() != 0 {
		t.Errorf("problems reading this machine's /proc")
	}
}
