package proclabel

import (
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
