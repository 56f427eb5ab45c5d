// Command chartpackage packages the Helm chart as `helm package` does, with helm's own Go API
// (helm.sh/helm/v4's action.Package, the code behind that command), into DIST/<name>-<chart
// version>.tgz, and prints the archive's path. scripts/release.sh runs it for `make release`:
//
//	cd tools && go run ./chartpackage CHART DIST
//
// SOURCE_DATE_EPOCH (Unix seconds) is required: every entry of the archive gets it as its mtime,
// as helm package does when the variable is set. The rest of helm's archive is already fixed
// (sorted entries, mode 0644, no owner, a gzip header without name or time), so two runs on one
// commit give the same bytes. The chart's symbolic links (alerts/, dashboards/, LICENSE) are
// followed: the archive holds the repository's files, less what the chart's .helmignore names.
package main

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"time"

	"helm.sh/helm/v4/pkg/action"
)

func main() {
	log.SetFlags(0)
	// helm's loader reports each symbolic link it follows at INFO; the chart's are intended.
	slog.SetLogLoggerLevel(slog.LevelWarn)
	if len(os.Args) != 3 {
		log.Fatal("usage: SOURCE_DATE_EPOCH=<seconds> chartpackage CHART DIST")
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		log.Fatal(err)
	}
	pkg := action.NewPackage()
	pkg.Destination = os.Args[2]
	pkg.SourceDateEpoch = &epoch
	archive, err := pkg.Run(os.Args[1], nil)
	if err != nil {
		log.Fatalf("packaging %s: %v", os.Args[1], err)
	}
	fmt.Println(archive)
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH. Unlike helm, which falls back to the files' own
// mtimes when it is unset, a missing value is an error: a release is never stamped with the
// checkout's time.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set")
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want Unix seconds", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}
