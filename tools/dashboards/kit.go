package dashboards

import (
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The conventions every dashboard follows (the dashboard-linter rules, which
// TestLint enforces on the generated JSON): a "datasource" variable every
// panel and query uses, job and instance variables (multi-value, "All" =
// .+) that every selector filters on, a hidden cluster variable for data
// sources that hold several clusters, $__rate_interval in every rate.

// sel stands for the job and instance matchers in a query written for q:
// `stall_vm_dirty_bytes{SEL}` or `stall_redis_up{SEL,addr=~"$target"}`.
const sel = "SEL"

const hostMatchers = `cluster=~"$cluster",job=~"$job",instance=~"$instance"`

// clusterVar is the fleet's cluster, as kube-prometheus-stack's dashboards
// offer it: multi-cluster setups (Thanos, Mimir, a central Prometheus) add
// `cluster` as an external or target label. Hidden, since most data sources
// hold one cluster; its "All" is .*, which also matches series without the
// label, so on a single-cluster data source every selector still matches.
// Pick one with ?var-cluster=NAME in the URL, or unhide it in a copy.
func clusterVar(hostMetric string) *dashboard.QueryVariableBuilder {
	return labelVar("cluster", "Cluster", "label_values("+hostMetric+", cluster)").
		Multi(false).
		AllValue(".*").
		Hide(dashboard.VariableHideHideVariable)
}

// datasource is the templated data source every panel and query uses.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Tag is carried by every dashboard; the dashboard links list the others by it.
const Tag = "stall_exporter"

// newBoard starts a dashboard with the shared settings, the datasource, job
// and instance variables (their values read from the series of
// hostMetric, so a dashboard offers only the hosts and /probe targets that
// export its subsystem), and any extra variables.
func newBoard(uid, title, description, hostMetric string, extra ...cog.Builder[dashboard.VariableModel]) *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{Tag}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Refresh("1m").
		Link(dashboard.NewDashboardLinkBuilder("stall_exporter").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{Tag}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus")).
		WithVariable(clusterVar(hostMetric)).
		WithVariable(labelVar("job", "Job", "label_values("+hostMetric+`{cluster=~"$cluster"}, job)`)).
		WithVariable(labelVar("instance", "Instance", "label_values("+hostMetric+`{cluster=~"$cluster",job=~"$job"}, instance)`)).
		WithVariable(customVar("top", "Top N", "10", "5", "10", "20", "50"))
	for _, v := range extra {
		b.WithVariable(v)
	}
	return b
}

// labelVar is a multi-value query variable whose "All" is the regexp .+,
// so `label=~"$name"` matches every value, including ones that appeared
// after the dashboard loaded.
func labelVar(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".+").
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

// subVar is a labelVar over the values of label among metric's series of
// the selected jobs and instances.
func subVar(name, label, metric, labelName string) *dashboard.QueryVariableBuilder {
	return labelVar(name, label, "label_values("+metric+"{"+hostMatchers+"}, "+labelName+")")
}

// q is a range query; SEL in expr becomes the job and instance matchers.
func q(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource).
		Expr(strings.ReplaceAll(expr, sel, hostMatchers)).
		LegendFormat(legend).
		Range()
}

// instant is an instant query for the bar gauges and tables that show the
// state now.
func instant(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource).
		Expr(strings.ReplaceAll(expr, sel, hostMatchers)).
		LegendFormat(legend).
		Instant()
}

// tableQuery is an instant query in table format (one row per series,
// one column per label).
func tableQuery(expr string) *prometheus.DataqueryBuilder {
	return instant(expr, "").Format(prometheus.PromQueryFormatTable)
}

// steps builds absolute thresholds: a base colour, then value/colour pairs.
func steps(base string, pairs ...any) *dashboard.ThresholdsConfigBuilder {
	s := []dashboard.Threshold{{Color: base}}
	for i := 0; i+1 < len(pairs); i += 2 {
		s = append(s, dashboard.Threshold{Value: cog.ToPtr(pairs[i].(float64)), Color: pairs[i+1].(string)})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(s)
}

// graph is a time series panel, 12 columns wide. A query that would draw
// one series per selected host is ranked with topk($top, …) (rankedQuery).
func graph(title, description, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Span(12).Height(8).
		FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true).
			Calcs([]string{"max", "lastNotNull"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for _, t := range queries {
		p.WithTarget(rankedQuery(t))
	}
	return p
}

// alongside is a limit or a companion drawn for the series the panel ranks:
// expr for the $top series of primary only (matched on the labels of on).
func alongside(expr, primary, on, legend string) *prometheus.DataqueryBuilder {
	return q(expr+" and on ("+on+") topk($top, "+primary+")", legend)
}

// withLine draws a red threshold line at value (the 1.0 throttle point, the
// 200 ms fast-failure wait) on a graph.
func withLine(p *timeseries.PanelBuilder, value float64) *timeseries.PanelBuilder {
	return p.Thresholds(steps("transparent", value, "red")).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
}

// dashed draws the series whose display name matches re as dashed lines
// without fill: the limits and thresholds a value is compared with.
func dashed(p *timeseries.PanelBuilder, re string) *timeseries.PanelBuilder {
	return p.OverrideByRegexp(re, []dashboard.DynamicConfigValue{
		{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
		{Id: "custom.fillOpacity", Value: 0},
	})
}

// bars shows a graph's series as bars: rare events counted per interval.
func bars(p *timeseries.PanelBuilder) *timeseries.PanelBuilder {
	return p.DrawStyle(common.GraphDrawStyleBars).FillOpacity(80)
}

// heat is a heatmap of a Prometheus histogram: expr must be
// `sum by (le) (rate(…_bucket{…}[$__rate_interval]))`. Grafana draws the
// buckets as they are (no re-bucketing); unit is the unit of le.
func heat(title, description, unit, expr string) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Span(12).Height(8).
		WithTarget(q(expr, "{{le}}").Format(prometheus.PromQueryFormatHeatmap)).
		Calculate(false).
		CellGap(1).
		Color(heatmap.NewHeatmapColorOptionsBuilder().
			Mode(heatmap.HeatmapColorModeScheme).
			Scheme("Oranges").
			Scale(heatmap.HeatmapColorScaleExponential).
			Exponent(0.5).
			Steps(64).
			Fill("dark-orange")).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit(unit)).
		CellValues(heatmap.NewCellValuesBuilder().Unit("ops")).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
		ShowLegend()
}

// worst is a bar gauge of an instant query written as
// sort_desc(topk($top, …)): the worst instances first, coloured by steps.
func worst(title, description, unit, expr, legend string, th *dashboard.ThresholdsConfigBuilder) *bargauge.PanelBuilder {
	return bargauge.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Min(0).
		Span(8).Height(8).
		Thresholds(th).
		WithTarget(instant(expr, legend)).
		DisplayMode(common.BarGaugeDisplayModeGradient).
		Orientation(common.VizOrientationHorizontal).
		ShowUnfilled(true).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
}

// count is a stat panel of one instant value, red from 1 up: targets that
// do not answer.
func count(title, description, expr string) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit("short").
		Span(6).Height(8).
		Thresholds(steps("green", 1.0, "red")).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		WithTarget(instant(expr, "")).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
}

// tablePanel is a table of instant table-format queries. A table has no
// axis; its unit applies to the value cells.
func tablePanel(title, description, unit string, queries ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	p := table.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Span(24).Height(8).
		Filterable(true).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{}))
	for _, t := range queries {
		p.WithTarget(t)
	}
	return p
}

// transform is a Grafana transformation with its options.
func transform(id string, options map[string]any) dashboard.DataTransformerConfig {
	return dashboard.DataTransformerConfig{Id: id, Options: options}
}

// hide drops columns from a table (the query time, the constant value of
// an info series, labels every row shares).
func hide(columns ...string) dashboard.DataTransformerConfig {
	ex := map[string]any{}
	for _, c := range columns {
		ex[c] = true
	}
	return transform("organize", map[string]any{"excludeByName": ex})
}

// mark maps exact cell values to a text and a colour, given as triples
// (value, text, colour): the risky settings, "unlimited" for a 0 limit.
func mark(triples ...string) []dashboard.ValueMapping {
	opts := map[string]dashboard.ValueMappingResult{}
	for i := 0; i+2 < len(triples); i += 3 {
		opts[triples[i]] = dashboard.ValueMappingResult{Text: cog.ToPtr(triples[i+1]), Color: cog.ToPtr(triples[i+2]), Index: cog.ToPtr(int32(i / 3))}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

// colouredCells colours a table column's cells by their value mapping.
func colouredCells() dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "custom.cellOptions", Value: map[string]any{"type": "color-background", "mode": "basic"}}
}

// stacked stacks a graph's series: parts of one whole (buffer bytes by
// client group).
func stacked() *common.StackingConfigBuilder {
	return common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)
}

// sortDesc sorts a table by a column, largest first.
func sortDesc(column string) []cog.Builder[common.TableSortByFieldState] {
	return []cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName(column).Desc(true)}
}

// row is an expanded row: the panels added after it belong to it.
func row(title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title)
}

// customVar is a single-value variable with fixed options and a default:
// the N of the rankings' topk, the label to group counts by.
func customVar(name, label, current string, values ...string) *dashboard.CustomVariableBuilder {
	opts := make([]dashboard.VariableOption, len(values))
	for i, v := range values {
		opts[i] = dashboard.VariableOption{
			Selected: cog.ToPtr(v == current),
			Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr(v)},
			Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr(v)},
		}
	}
	return dashboard.NewCustomVariableBuilder(name).
		Label(label).
		Values(dashboard.StringOrMap{String: cog.ToPtr(strings.Join(values, ","))}).
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr(current)},
			Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr(current)},
		}).
		Options(opts)
}
