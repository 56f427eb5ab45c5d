// Command fleetgen writes a synthetic fleet's capacity roll-ups (package
// fleet) for the capacity benchmark:
//
//	cd tools && go run ./dashboards/fleet/fleetgen -hosts 1000 -days 30 > fleet.om
//	promtool tsdb create-blocks-from openmetrics --max-block-duration=768h fleet.om data/
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/stall-exporter/stall_exporter/tools/dashboards/fleet"
)

func main() {
	hosts := flag.Int("hosts", 1000, "hosts in the fleet")
	days := flag.Int("days", 30, "days of hourly roll-ups, ending at -end")
	end := flag.Int64("end", time.Now().Add(-time.Hour).Unix(), "Unix time of the last hour of data")
	millis := flag.Bool("millis", false, "Prometheus text with millisecond timestamps (VictoriaMetrics' /api/v1/import/prometheus) instead of OpenMetrics")
	flag.Parse()
	cfg := fleet.Config{Hosts: *hosts, Days: *days, End: time.Unix(*end, 0).UTC(), Offset: 17 * time.Minute, Millis: *millis}
	if err := fleet.Write(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleetgen:", err)
		os.Exit(1)
	}
}
