package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/stall-exporter/stall_exporter/tools/dashboards"
)

// ExtraParams are added to every query request (VictoriaMetrics' nocache).
var ExtraParams map[string]string

// CPU, when set, returns the CPU time the server has used so far (see
// ProcessCPU); Evaluate then records each query's share of it.
var CPU func() time.Duration

// Result is one panel query evaluated as Grafana would send it.
type Result struct {
	Panel, RefID, Expr string
	Instant            bool
	Took               time.Duration
	CPU                time.Duration // the server's CPU time during the query, with CPU set
	Series             []Sample      // instant: one value per series; range: the last value of each
}

// Sample is a series' labels and its value (the last one of a range).
type Sample struct {
	Labels map[string]string
	Value  float64
	Values []float64   // a range query's values, in time order
	Times  []time.Time // the time of each of Values
}

// Evaluate runs every query of the dashboard at file against the Prometheus
// API at base (Prometheus, or VictoriaMetrics' compatible API), over the
// range [end-window, end]: table queries as instant queries at end, graphs
// as range queries with the panel's minimum interval as step (aligned as
// Grafana aligns it), variables at their defaults and "All".
func Evaluate(ctx context.Context, base, file string, end time.Time, window time.Duration) ([]Result, error) {
	m, err := dashboards.Load(file)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{
		"__range":   fmt.Sprintf("%ds", int(window.Seconds())),
		"__range_s": strconv.Itoa(int(window.Seconds())),
	}
	for _, v := range m.Templating.List {
		switch v.Type {
		case "custom":
			vars[v.Name] = v.CurrentValue()
		case "query":
			vars[v.Name] = v.AllValue
		}
	}
	var out []Result
	for _, p := range m.Panels {
		step := time.Hour
		if d, err := model.ParseDuration(p.Interval); err == nil {
			step = time.Duration(d)
		}
		vars["__interval"] = fmt.Sprintf("%ds", int(step.Seconds()))
		for _, t := range p.Targets {
			expr, err := dashboards.Expand(t.Expr, vars)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.Title, err)
			}
			r := Result{Panel: p.Title, RefID: t.RefID, Expr: expr, Instant: t.Instant}
			params := url.Values{"query": {expr}}
			for k, v := range ExtraParams {
				params.Set(k, v)
			}
			path := "/api/v1/query"
			if t.Instant {
				params.Set("time", strconv.FormatInt(end.Unix(), 10))
			} else {
				path = "/api/v1/query_range"
				s := end.Add(-window).Truncate(step)
				params.Set("start", strconv.FormatInt(s.Unix(), 10))
				params.Set("end", strconv.FormatInt(end.Unix(), 10))
				params.Set("step", strconv.Itoa(int(step.Seconds())))
			}
			var cpu0 time.Duration
			if CPU != nil {
				cpu0 = CPU()
			}
			began := time.Now()
			r.Series, err = query(ctx, base+path, params)
			r.Took = time.Since(began)
			if CPU != nil {
				r.CPU = CPU() - cpu0
			}
			if err != nil {
				return nil, fmt.Errorf("%s %s: %q: %w", p.Title, t.RefID, expr, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func query(ctx context.Context, u string, params url.Values) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	req.URL.RawQuery = params.Encode()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	var out []Sample
	for _, s := range r.Data.Result {
		points := s.Values
		if len(s.Value) == 2 {
			points = [][]any{s.Value}
		}
		smp := Sample{Labels: s.Metric}
		for _, p := range points {
			if len(p) != 2 {
				return nil, fmt.Errorf("point %v", p)
			}
			str, _ := p[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			ts, ok := p[0].(float64)
			if err != nil || !ok {
				return nil, fmt.Errorf("point %v: %w", p, err)
			}
			smp.Values = append(smp.Values, f)
			smp.Times = append(smp.Times, time.UnixMilli(int64(math.Round(ts*1000))).UTC())
			smp.Value = f
		}
		out = append(out, smp)
	}
	return out, nil
}

// ProcessCPU returns a CPU function for process pid: the on-CPU time of all
// its threads (/proc/<pid>/task/*/schedstat, nanoseconds), which other
// processes on the machine do not inflate the way they inflate wall time.
func ProcessCPU(pid int) func() time.Duration {
	return func() time.Duration {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		var total time.Duration
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // a thread that ended
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				total += time.Duration(ns)
			}
		}
		return total
	}
}
