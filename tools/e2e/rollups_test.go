package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// capacityRollups returns the outputs of alerts/capacity.yml's rules, by
// name, with their expressions.
func capacityRollups(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("alerts/capacity.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Record] = r.Expr
		}
	}
	return out
}

// rollupExemption says why a dashboard query reading the capacity roll-ups
// (rollups: output → expression) may answer nothing after the seconds of
// data of this run, or "" when it must answer. Each reason is a shape of
// query that needs hours of data or an event no healthy machine has in a
// few seconds; tools/dashboards/fleet's TestRollupsFromRawSeries plants
// those events in two days of the exporter's series and requires an answer
// from every one of these queries.
func rollupExemption(expr string, rollups map[string]string) string {
	e, err := exprParser.ParseExpr(expr)
	if err != nil {
		return "" // check reports it
	}
	readsRollup, reason := false, ""
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if rule, ok := rollups[n.Name]; ok {
				readsRollup = true
				if reason == "" && hasSubquery(rule) {
					reason = "its roll-up takes the peak of a subquery at 1 m steps: it needs minutes of data"
				}
			}
		case *parser.SubqueryExpr:
			if n.Step >= time.Hour && reason == "" {
				reason = "a subquery at hour steps: it needs hours of data"
			}
		case *parser.BinaryExpr:
			switch {
			case reason != "":
			case n.Op.IsComparisonOperator() && !n.ReturnBool && (constant(n.LHS) || constant(n.RHS)):
				reason = "a threshold (or a rising trend) that a healthy machine does not reach in seconds"
			case n.Op == parser.LUNLESS:
				reason = "compares each host with most of the fleet: one host differs from no one"
			}
		}
		return nil
	})
	if !readsRollup {
		return ""
	}
	return reason
}

var exprParser = parser.NewParser(parser.Options{})

// constant reports whether e is arithmetic on numbers only (256 * 2^20).
func constant(e parser.Expr) bool {
	switch e := e.(type) {
	case *parser.NumberLiteral:
		return true
	case *parser.ParenExpr:
		return constant(e.Expr)
	case *parser.UnaryExpr:
		return constant(e.Expr)
	case *parser.BinaryExpr:
		return constant(e.LHS) && constant(e.RHS)
	}
	return false
}

func hasSubquery(expr string) bool {
	e, err := exprParser.ParseExpr(expr)
	if err != nil {
		return false
	}
	found := false
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		_, ok := n.(*parser.SubqueryExpr)
		found = found || ok
		return nil
	})
	return found
}
