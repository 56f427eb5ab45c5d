package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestProcSourceSnapshots: a scrape takes the sampler's last read while it
// is at most one interval old and reads the file itself otherwise; its own
// read is then the snapshot the next scrapes share; a failed read is not
// shared; no read is older than one returned before.
func TestProcSourceSnapshots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "vmstat")
		write := func(s string) { writeFiles(t, filepath.Dir(path), map[string]string{"vmstat": s}) }
		src := &procSource{path: path}
		read := func(what string, f func([]byte) ([]byte, error), want string) {
			t.Helper()
			got, err := f(nil)
			if err != nil || string(got) != want {
				t.Errorf("%s: %q, %v; want %q", what, got, err, want)
			}
		}
		write("1")
		read("without a sampler", src.Read, "1")
		done := src.sampledEvery(time.Second)
		read("the sampler's tick", src.ReadNow, "1")
		write("2")
		read("a scrape right after the tick", src.Read, "1")
		collectortest.Advance(time.Second)
		read("a scrape one interval after the tick", src.Read, "1")
		collectortest.Advance(time.Nanosecond)
		read("a scrape more than one interval after the tick", src.Read, "2")
		write("3")
		read("a scrape right after that scrape's own read", src.Read, "2")
		read("the next tick", src.ReadNow, "3")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if _, err := src.ReadNow(nil); err != nil {
			t.Fatalf("the file stays open: %v", err)
		}
		src.mu.Lock()
		src.f.Close() // as a read error does
		src.f = nil
		src.mu.Unlock()
		if _, err := src.ReadNow(nil); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("reopening a removed file: %v", err)
		}
		write("4")
		read("a scrape after a failed tick", src.Read, "4")
		done()
		write("5")
		read("a scrape after the sampler stopped", src.Read, "5")
	})
}

// TestProcSourceLargeFile: a file larger than the buffer is read whole; one
// larger than 16 MiB is refused.
func TestProcSourceLargeFile(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("nr_dirty 1\n", 10_000) // 110 KB
	writeFiles(t, dir, map[string]string{"big": big})
	if got, err := (&procSource{path: filepath.Join(dir, "big")}).ReadNow(nil); err != nil || string(got) != big {
		t.Errorf("a %d-byte file: %d bytes, %v", len(big), len(got), err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, procSourceMaxBytes+1); err != nil {
		t.Fatal(err)
	}
	if _, err := (&procSource{path: huge}).ReadNow(nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over 16 MiB: %v", err)
	}
}

// TestScrapesShareSamplerReads: with the sampler running, the diskstats and
// vmstat scrapes export what the sampler's last tick read, and their own
// reads once it stopped.
func TestScrapesShareSamplerReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		write := func(n uint64) {
			writeFiles(t, dir, map[string]string{
				"diskstats": diskLine(8, 0, "sda", n, n, n, n, n),
				"vmstat":    "nr_dirty " + strings.Repeat("1", int(n)) + "\n",
			})
		}
		disk := build(t, newDiskstatsCollector, "diskstats", dir, "")
		vm := build(t, newVMStatCollector, "vmstat", dir, "")
		pageSize := vm.pageSize
		check := func(what string, want uint64) {
			t.Helper()
			if got := scrape(t, disk).Must(t, "stall_disk_reads_completed_total", "device", "sda"); got != float64(want) {
				t.Errorf("%s: diskstats reads %v, want %d", what, got, want)
			}
			wantDirty := 0.0
			for range want {
				wantDirty = 10*wantDirty + 1
			}
			if got := scrape(t, vm).Must(t, "stall_vm_dirty_bytes"); got != wantDirty*pageSize {
				t.Errorf("%s: vmstat dirty bytes %v, want %v", what, got, wantDirty*pageSize)
			}
		}
		write(1)
		s := newTestSampler(t, dir)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		synctest.Wait()
		write(2)
		check("right after the sampler's first tick", 1)
		collectortest.Advance(time.Second)
		synctest.Wait()
		write(3)
		check("right after its second tick", 2)
		cancel()
		<-done
		check("with the sampler stopped", 3)
	})
}

// BenchmarkScrapeRead is a scrape's read of this machine's /proc/vmstat
// through its procSource: without a sampler (the kernel generates the file)
// and with a sampler whose last read is fresh (a copy of it).
func BenchmarkScrapeRead(b *testing.B) {
	for _, sampled := range []bool{false, true} {
		b.Run(fmt.Sprintf("sampler=%v", sampled), func(b *testing.B) {
			src := &procSource{path: "/proc/vmstat"}
			if sampled {
				defer src.sampledEvery(time.Hour)()
				if _, err := src.ReadNow(nil); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]byte, 0, 16<<10)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = src.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
