// Package selectors finds the metric names a PromQL expression reads, for the tests that check
// the alert rules and dashboards against docs/metrics.md (internal/metricsdoc).
package selectors

import (
	"fmt"
	"sort"

	"github.com/prometheus/prometheus/promql/parser"
)

var promql = parser.NewParser(parser.Options{})

// MetricNames parses a PromQL expression and returns, sorted and without
// repeats, the metric names its selectors read (from the name or a
// __name__="…" matcher). A selector without a fixed name is an error: a
// test could not check what it reads.
func MetricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var walkErr error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" && name == "" {
				if m.Type.String() != "=" {
					walkErr = fmt.Errorf("selector %s has no fixed metric name", vs)
				}
				name = m.Value
			}
		}
		if name == "" {
			walkErr = fmt.Errorf("selector %s has no metric name", vs)
		}
		seen[name] = true
		return nil
	})
	if walkErr != nil {
		return nil, walkErr
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}
