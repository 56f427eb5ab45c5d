// Package metricsdoc reads the metric contract in docs/metrics.md, so that tests of the code, the
// alert rules and the dashboards all check against one list.
package metricsdoc

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Family is one row of docs/metrics.md.
type Family struct {
	Name   string
	Type   string // counter, gauge, histogram, info
	Labels []string
}

// docRow matches a table row: | `name` | type | `label`, `label` | unit | source |
var docRow = regexp.MustCompile("^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| ([a-z]+) \\| ([^|]*) \\|")

// Read parses the metric tables of a docs/metrics.md file into name →
// family: the stall_ metrics the exporter serves. A name listed twice is
// an error.
func Read(path string) (map[string]Family, error) {
	return readRows(path, func(name string) bool { return strings.HasPrefix(name, "stall_") })
}

// Others parses the rows of docs/metrics.md that name series from
// Prometheus itself or from other exporters (every name outside stall_),
// which rules and dashboards may read next to the exporter's own.
func Others(path string) (map[string]Family, error) {
	return readRows(path, func(name string) bool { return !strings.HasPrefix(name, "stall_") })
}

func readRows(path string, keep func(name string) bool) (map[string]Family, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]Family{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := docRow.FindStringSubmatch(sc.Text())
		if m == nil || !keep(m[1]) {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			l = strings.Trim(strings.TrimSpace(l), "`")
			if l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		if _, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("%s lists %s twice", path, m[1])
		}
		out[m[1]] = Family{Name: m[1], Type: m[2], Labels: labels}
	}
	return out, sc.Err()
}

// Lookup returns the documented family a series name belongs to: the name
// itself, or for a histogram the family of its _bucket, _sum or _count
// series.
func Lookup(doc map[string]Family, series string) (Family, bool) {
	if f, ok := doc[series]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if f, ok := doc[base]; ok && f.Type == "histogram" {
				return f, true
			}
		}
	}
	return Family{}, false
}
