package writeback

import (
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// registerTestFlags parses args as the exporter would and returns the
// validated options.
func registerTestFlags(t *testing.T, args ...string) (options, error) {
	t.Helper()
	app := kingpin.New("test", "")
	o := registerFlags(app)
	if _, err := app.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o.validated()
}

// testConfig is the collector's configuration on this machine's /proc and
// /sys, its logs recorded into logs (nil: discarded).
func testConfig(t testing.TB, logs *collectortest.Logs) collector.Config {
	t.Helper()
	cfg := collectortest.Config("writeback", logs)
	fs, err := procfs.NewFS(cfg.Paths.Procfs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ProcFS = fs
	return cfg
}
