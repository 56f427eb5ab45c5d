package host

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// hungTaskAt builds the collector over a procfs holding the given
// /proc/sys/kernel files.
func hungTaskAt(t *testing.T, files map[string]string) (*hungTaskCollector, string) {
	t.Helper()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "sys", "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		writeFiles(t, proc, map[string]string{"sys/kernel/" + name: content})
	}
	return build(t, newHungTaskCollector, "hungtask", proc, ""), proc
}

func TestHungTask(t *testing.T) {
	c, _ := hungTaskAt(t, map[string]string{
		"hung_task_detect_count": "17\n",
		"hung_task_warnings":     "0\n", // the kernel has stopped reporting
		"hung_task_timeout_secs": "240\n",
	})
	r := scrape(t, c)
	for name, want := range map[string]float64{
		"stall_kernel_hung_task_detected_total":     17,
		"stall_kernel_hung_task_warnings_remaining": 0,
		"stall_kernel_hung_task_timeout_seconds":    240,
	} {
		if got := r.Must(t, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestHungTaskOlderKernel(t *testing.T) {
	// Before 6.11 there is no detect count; warnings -1 is unlimited.
	c, _ := hungTaskAt(t, map[string]string{"hung_task_warnings": "-1\n", "hung_task_timeout_secs": "120\n"})
	r := scrape(t, c)
	if _, ok := r.Get("stall_kernel_hung_task_detected_total"); ok {
		t.Error("detect count exported by a kernel without the file")
	}
	if got := r.Must(t, "stall_kernel_hung_task_warnings_remaining"); got != -1 {
		t.Errorf("warnings remaining = %v, want -1", got)
	}
	if c.problems.Count() != 0 {
		t.Errorf("a missing file was counted as a problem")
	}
}

func TestHungTaskAbsentAndMalformed(t *testing.T) {
	// CONFIG_DETECT_HUNG_TASK=n: none of the files.
	c, _ := hungTaskAt(t, nil)
	if r := scrape(t, c); !errors.Is(r.Err, collector.ErrNoData) {
		t.Errorf("Update without the files = %v, want ErrNoData", r.Err)
	}
	c, _ = hungTaskAt(t, map[string]string{"hung_task_detect_count": "many\n", "hung_task_warnings": "10\n", "hung_task_timeout_secs": "x"})
	if got := scrape(t, c).Must(t, "stall_kernel_hung_task_warnings_remaining"); got != 10 {
		t.Errorf("warnings remaining = %v, want 10 next to malformed files", got)
	}
	if got := c.problems.Count(); got != 2 {
		t.Errorf("problems = %d, want 2", got)
	}

	// A file that cannot be read (here a directory in its place) fails the
	// scrape without counting as bad input; the other files are sent.
	c, proc := hungTaskAt(t, map[string]string{"hung_task_warnings": "10\n", "hung_task_timeout_secs": "120\n"})
	if err := os.Mkdir(filepath.Join(proc, "sys", "kernel", "hung_task_detect_count"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := scrape(t, c)
	if r.Err == nil || errors.Is(r.Err, collector.ErrNoData) {
		t.Errorf("unreadable detect count: %v, want a failure", r.Err)
	}
	if len(r.Metrics) != 2 || c.problems.Count() != 0 {
		t.Errorf("%d values sent and %d problems counted, want 2 and 0", len(r.Metrics), c.problems.Count())
	}
}

// TestHungTaskRealProc reads this machine's hung-task files. A kernel
// without the detector fails under make test and skips under a plain go
// test, as TestPressureRealProc does for PSI and for the same reason: the
// kernels make test is meant for build it in (Debian's, Ubuntu's, Fedora's
// and RHEL's), and the collector's no-data answer is covered on fixtures.
func TestHungTaskRealProc(t *testing.T) {
	_, err := os.Stat("/proc/sys/kernel/hung_task_timeout_secs")
	collectortest.Require(t, "the kernel's hung task detector (CONFIG_DETECT_HUNG_TASK)", err)
	c := build(t, newHungTaskCollector, "hungtask", "/proc", "/sys")
	if _, ok := scrape(t, c).Get("stall_kernel_hung_task_timeout_seconds"); !ok {
		t.Error("no timeout exported from this machine's /proc")
	}
	if c.problems.Count() != 0 {
		t.Errorf("problems reading this machine's /proc")
	}
}
