package dashboards

import (
	"os"
	"testing"

	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// TestMain runs the tests from dashboards/, where the files they check live.
func TestMain(m *testing.M) {
	e2etest.Chdir("dashboards")
	os.Exit(m.Run())
}
