package proclabel

import (
	"bytes"
	"os"
	"strings"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/jvm"
)

// MaxMainLen bounds the main label.
const MaxMainLen = 64

// Main reads what a JVM runs (jvm.ShortName) from its cmdline file (a path
// such as /proc/<pid>/cmdline), at most MaxMainLen bytes; "" for a process
// that is not a JVM or a file that cannot be read. Read it once per
// process: reading another process's cmdline takes its mmap lock, which a
// process stalled in reclaim may hold.
func Main(cmdline string) string {
	b, err := os.ReadFile(cmdline)
	if err != nil {
		return ""
	}
	return collector.LabelValue(jvm.ShortName(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")), MaxMainLen)
}

// Comm reads a process's name from its comm file (a path such as
// /proc/<pid>/comm); live is false when the file cannot be read (the process
// is gone).
func Comm(path string) (name string, live bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSuffix(string(b), "\n"), true
}

// CommBytes is a NUL-padded TASK_COMM_LEN comm, as bpf_get_current_comm()
// records it, as a string.
func CommBytes(b []byte) string {
	name, _, _ := bytes.Cut(b, []byte{0})
	return string(name)
}
