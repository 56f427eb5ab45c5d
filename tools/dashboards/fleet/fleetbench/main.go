// Command fleetbench evaluates every query of the capacity dashboard over
// its default range (30 days) against a Prometheus API, as Grafana would
// send them, and prints each query's wall time (the best and the worst of
// -runs runs) and the series it returned. scripts/capacity-bench.sh runs it
// on a generated fleet.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/stall-exporter/stall_exporter/tools/dashboards/fleet"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:9090", "Prometheus API base URL")
	file := flag.String("dashboard", "dashboards/stall-capacity.json", "dashboard JSON")
	end := flag.Int64("end", time.Now().Unix(), "Unix time of the end of the range")
	days := flag.Int("days", 30, "range in days")
	runs := flag.Int("runs", 3, "runs of the whole dashboard")
	nocache := flag.Bool("nocache", false, "ask for no result cache (VictoriaMetrics' nocache=1)")
	pid := flag.Int("pid", 0, "the server's process id: also report its CPU time per query (/proc/<pid>/task/*/schedstat)")
	planted := flag.Int("planted", 0, "the data is fleetgen's for this many hosts: also check that its planted hosts come out on top")
	flag.Parse()
	base := *url
	if *nocache {
		fleet.ExtraParams = map[string]string{"nocache": "1"}
	}
	window := time.Duration(*days) * 24 * time.Hour
	if *pid > 0 {
		fleet.CPU = fleet.ProcessCPU(*pid)
	}
	var all [][]fleet.Result
	for range *runs {
		r, err := fleet.Evaluate(context.Background(), base, *file, time.Unix(*end, 0), window)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetbench:", err)
			os.Exit(1)
		}
		all = append(all, r)
	}
	if *planted > 0 {
		cfg := fleet.Config{Hosts: *planted, Days: *days, End: time.Unix(*end, 0).UTC(), Offset: 17 * time.Minute}
		if problems := fleet.CheckPlanted(all[0], cfg); len(problems) > 0 {
			for _, p := range problems {
				fmt.Fprintln(os.Stderr, "planted:", p)
			}
			os.Exit(1)
		}
		fmt.Println("planted hosts: each on top of its tables, forecasts within the range")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "best ms\tworst ms\tCPU ms\tseries\t\tpanel / query\t")
	var total, slowest, cpuTotal, cpuMax time.Duration
	for i, r := range all[0] {
		var took, cpu []time.Duration
		for _, run := range all {
			took = append(took, run[i].Took)
			cpu = append(cpu, run[i].CPU)
		}
		best, worst, leastCPU := slices.Min(took), slices.Max(took), slices.Min(cpu)
		total += best
		slowest = max(slowest, worst)
		cpuTotal += leastCPU
		cpuMax = max(cpuMax, leastCPU)
		kind := "instant"
		if !r.Instant {
			kind = "range"
		}
		fmt.Fprintf(w, "%.0f\t%.0f\t%.0f\t%d\t%s\t%s %s\t\n", ms(best), ms(worst), ms(leastCPU), len(r.Series), kind, r.Panel, r.RefID)
	}
	w.Flush()
	fmt.Printf("%d queries; slowest %.0f ms; the whole dashboard %.1f s (sum of the best runs, one at a time)\n", len(all[0]), ms(slowest), total.Seconds())
	if fleet.CPU != nil {
		fmt.Printf("server CPU (least of the runs): most for one query %.0f ms, the whole dashboard %.1f s\n", ms(cpuMax), cpuTotal.Seconds())
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
