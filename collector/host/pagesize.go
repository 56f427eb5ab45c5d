package host

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"
)

var pageSizeFlag = kingpin.Flag("vmstat.page-size",
	"Kernel page size in bytes used to convert /proc/vmstat and /proc/zoneinfo page counts; 0 means the running kernel's (getpagesize). Set it only to read fixtures of another architecture.").
	Default("0").Uint64()

// checkPageSize rejects a --vmstat.page-size that no kernel uses: it must be
// 0 (the running kernel's) or a power of two from 4 KiB to 1 MiB.
func checkPageSize() error {
	if *pageSizeFlag == 0 {
		return nil
	}
	p := *pageSizeFlag
	if p < 4096 || p > 1<<20 || p&(p-1) != 0 {
		return fmt.Errorf("--vmstat.page-size=%d: want 0 or a power of two from 4096 to 1048576", p)
	}
	return nil
}

// PageSize is the size in bytes of the pages that /proc/vmstat and
// /proc/zoneinfo count: the running kernel's page size (4 KiB on x86-64,
// often 64 KiB on arm64 and ppc64le), never an assumed 4096.
func PageSize() uint64 {
	if *pageSizeFlag > 0 {
		return *pageSizeFlag
	}
	return uint64(os.Getpagesize())
}
