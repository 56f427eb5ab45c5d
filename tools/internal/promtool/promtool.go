// Package promtool finds the promtool of each Prometheus major version the tests run under:
// the rule replays (tools/alerts) and the shipped configuration's check (tools/e2e).
package promtool

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// Versions are the Prometheus major versions the tests run promtool under: 2 (Debian's, on
// PATH) and 3 (kube-prometheus-stack's).
var Versions = []int{2, 3}

// Env3 names the Prometheus 3 promtool: `make promtool3` builds it from the Go module proxy (no
// release download needed) and the Makefile exports its path in this variable.
const Env3 = "STALL_PROMTOOL3"

var versionLine = regexp.MustCompile(`promtool, version ([0-9]+)\.`)

// Require returns the path of the promtool of Prometheus major (2: promtool on PATH; 3: the
// one Env3 names), under the test policy: missing, or of another version, fails the test under
// make test and skips it elsewhere.
func Require(t *testing.T, major int) string {
	t.Helper()
	var path string
	if major == 3 {
		path = os.Getenv(Env3)
		var err error
		if path == "" {
			err = fmt.Errorf("%s is not set; `make promtool3` builds one and make test sets it", Env3)
		}
		collectortest.Require(t, "promtool 3", err)
	} else {
		path = collectortest.RequireTool(t, "promtool")
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err == nil {
		m := versionLine.FindSubmatch(out)
		if m == nil || string(m[1]) != strconv.Itoa(major) {
			err = fmt.Errorf("%s is not Prometheus %d's: %.80q", path, major, out)
		}
	}
	collectortest.Require(t, fmt.Sprintf("promtool %d", major), err)
	return path
}
