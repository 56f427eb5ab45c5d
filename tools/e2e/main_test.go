package e2e

import (
	"os"
	"testing"

	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// TestMain runs the tests from the repository's top directory, where the files they check live.
func TestMain(m *testing.M) {
	e2etest.Chdir(".")
	os.Exit(m.Run())
}
