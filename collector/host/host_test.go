package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The helpers every test of this package shares.

// parseSettings parses a command line with the host collectors' flags and
// validates it, as the start of the exporter does.
func parseSettings(args ...string) (settings, error) {
	app := kingpin.New("test", "")
	f := registerFlags(app)
	if _, err := app.Parse(args); err != nil {
		return settings{}, err
	}
	return f.validate()
}

// testSettings is parseSettings for a command line that must be valid.
func testSettings(t testing.TB, args ...string) settings {
	t.Helper()
	s, err := parseSettings(args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testConfig is the configuration collector.Build gives collector name
// over the given procfs and sysfs (sysfs "" is one that does not exist).
// Logs are recorded into logs at debug level; a nil logs discards them.
func testConfig(t testing.TB, name, proc, sys string, logs *collectortest.Logs) collector.Config {
	t.Helper()
	cfg := collectortest.Config(name, logs)
	if sys == "" {
		sys = filepath.Join(t.TempDir(), "no-sysfs")
	}
	cfg.Paths = collector.Paths{Procfs: proc, Sysfs: sys, Rootfs: "/"}
	fs, err := procfs.NewFS(proc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ProcFS = fs
	return cfg
}

// build runs a constructor of this package with the default flags and
// testConfig.
func build[C collector.Collector](t testing.TB, newC func(collector.Config, settings) C, name, proc, sys string) C {
	t.Helper()
	return newC(testConfig(t, name, proc, sys, nil), testSettings(t))
}

// writeFiles writes files (path relative to dir → content) into dir,
// creating directories, and returns dir.
func writeFiles(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readFixture reads a file under fixtures/.
func readFixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("fixtures", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scrape runs one Update of c.
func scrape(t testing.TB, c collector.Collector) collectortest.Result {
	t.Helper()
	return collectortest.Scrape(t, c, 10*time.Second)
}

// reportCPU adds cpu-ns/op since start and, for an operation done once
// per period, the share of one core it costs.
func reportCPU(b *testing.B, start time.Duration, period time.Duration) {
	per := float64(collectortest.ProcessCPU()-start) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/op")
	if period > 0 {
		b.ReportMetric(100*per/float64(period), "%core@"+period.String())
	}
}
