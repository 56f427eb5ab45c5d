package collector

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func hungTaskProc(t *testing.T, files map[string]string) Paths {
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
	return Paths{Procfs: dir}
}

func TestHungTask(t *testing.T) {
	c := newHungTaskCollector(hungTaskProc(t, map[string]string{
		"hung_task_detect_count": "17\n",
		"hung_task_warnings":     "0\n", // the kernel has stopped reporting
		"hung_task_timeout_secs": "240\n",
	}), NewProblems("hungtask", slog.New(slog.DiscardHandler)))
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
	c := newHungTaskCollector(hungTaskProc(t, map[string]string{"hung_task_warnings": "-1\n", "hung_task_timeout_secs": "120\n"}), NewProblems("hungtask", slog.New(slog.DiscardHandler)))
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
	c := newHungTaskCollector(hungTaskProc(t, nil), NewProblems("hungtask", slog.New(slog.DiscardHandler)))
	if err := c.Update(context.Background(), nil); !errors.Is(err, ErrNoData) {
		t.Errorf("Update without the files = %v, want ErrNoData", err)
	}
	c = newHungTaskCollector(hungTaskProc(t, map[string]string{"hung_task_detect_count": "many\n", "hung_task_warnings": "10\n", "hung_task_timeout_secs": "x"}), c.problems)
	mfs := samplerGather(t, c)
	if got := kmsgGauge(mfs, "stall_kernel_hung_task_warnings_remaining"); got != 10 {
		t.Errorf("warnings remaining = %v, want 10 next to malformed files", got)
	}
	if got := c.problems.Count(); got != 2 {
		t.Errorf("problems = %d, want 2", got)
	}
}

func TestHungTaskRealProc(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/hung_task_timeout_secs"); err != nil {
		t.Skip("kernel without the hung task detector")
	}
	c := newHungTaskCollector(Paths{Procfs: "/proc"}, NewProblems("hungtask", slog.New(slog.DiscardHandler)))
	mfs := samplerGather(t, c)
	if _, ok := mfs["stall_kernel_hung_task_timeout_seconds"]; !ok {
		t.Error("no timeout exported from this machine's /proc")
	}
	if c.problems.Count() != 0 {
		t.Errorf("problems reading this machine's /proc")
	}
}
