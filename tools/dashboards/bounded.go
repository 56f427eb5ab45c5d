package dashboards

import (
	"slices"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
)

// topValue stands for the Top N variable when a query is parsed here.
const topValue = 4242

// BoundedByHost reports whether the expression's result has at most $top series per
// group of what it aggregates by, rather than one per host.
func BoundedByHost(e parser.Expr) bool {
	switch n := e.(type) {
	case *parser.NumberLiteral, *parser.StringLiteral:
		return true
	case *parser.ParenExpr:
		return BoundedByHost(n.Expr)
	case *parser.StepInvariantExpr:
		return BoundedByHost(n.Expr)
	case *parser.SubqueryExpr:
		return BoundedByHost(n.Expr)
	case *parser.MatrixSelector, *parser.VectorSelector:
		return false
	case *parser.AggregateExpr:
		if n.Op == parser.TOPK || n.Op == parser.BOTTOMK {
			p, ok := n.Param.(*parser.NumberLiteral)
			return ok && p.Val == topValue
		}
		if n.Without {
			return slices.Contains(n.Grouping, "instance")
		}
		return !slices.Contains(n.Grouping, "instance")
	case *parser.Call:
		if len(n.Args) == 0 {
			return true // time(), vector() of a scalar
		}
		for _, a := range n.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				return BoundedByHost(a)
			}
		}
		return true
	case *parser.BinaryExpr:
		l, r := BoundedByHost(n.LHS), BoundedByHost(n.RHS)
		switch {
		case n.LHS.Type() == parser.ValueTypeScalar:
			return r
		case n.RHS.Type() == parser.ValueTypeScalar:
			return l
		case n.Op == parser.LOR:
			return l && r
		case n.Op == parser.LUNLESS:
			return l
		default: // and, arithmetic, comparisons: only the series that match both sides
			return l || r
		}
	}
	return false
}

// rankedQuery wraps a graph's query in topk($top, …) when it would draw one
// series per host: at 1,000 hosts a graph of the whole fleet shows the
// $top worst at each moment instead of 1,000 lines.
func rankedQuery(t *prometheus.DataqueryBuilder) *prometheus.DataqueryBuilder {
	built, err := t.Build()
	if err != nil {
		return t
	}
	var expr string
	switch d := built.(type) {
	case prometheus.Dataquery:
		expr = d.Expr
	case *prometheus.Dataquery:
		expr = d.Expr
	}
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(forParsing(expr))
	if err != nil || BoundedByHost(parsed) {
		return t
	}
	return t.Expr("topk($top, " + expr + ")")
}

// forParsing substitutes Grafana's variables with values PromQL parses:
// a duration for the intervals, the marker for $top, a string otherwise.
func forParsing(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		switch name := sub[1] + sub[2] + sub[3]; {
		case name == "top":
			return "4242"
		case name == "__range_s":
			return "1"
		case strings.HasPrefix(name, "__"):
			return "1m"
		default:
			return "x"
		}
	})
}
