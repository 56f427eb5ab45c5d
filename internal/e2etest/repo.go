package e2etest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

const modulePath = "github.com/stall-exporter/stall_exporter"

// RepoRoot is the repository's top directory: the nearest directory at or above the working
// directory (where `go test` runs a package) whose go.mod declares the exporter's module. It panics
// outside the repository.
var RepoRoot = sync.OnceValue(func() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("e2etest: no go.mod of " + modulePath + " at or above the working directory")
		}
		dir = parent
	}
})

func declaresModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(rest) == modulePath
		}
	}
	return false
}

// Chdir makes dir, relative to the repository's top directory, the working directory: the
// tooling module's tests (tools/) call it from TestMain, to work on the files they check
// (alerts/*.yml, dashboards/*.json, deploy/, docs/) where the repository keeps them.
func Chdir(dir string) {
	if err := os.Chdir(filepath.Join(RepoRoot(), dir)); err != nil {
		panic(err)
	}
}
