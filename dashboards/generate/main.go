// Command generate writes the Grafana dashboards of package dashboards as
// JSON into the current directory (run by `go generate ./dashboards`, which
// `make dashboards` calls).
package main

import (
	"log"

	"github.com/stall-exporter/stall_exporter/dashboards"
)

func main() {
	if err := dashboards.WriteAll("."); err != nil {
		log.Fatal(err)
	}
}
