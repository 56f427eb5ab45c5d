// Command generate writes the Grafana dashboards of package dashboards as
// JSON into the directory it is given (dashboards/ at the repository's top: `make dashboards`
// runs `go generate ./dashboards` in the tools module).
package main

import (
	"log"
	"os"

	"github.com/stall-exporter/stall_exporter/tools/dashboards"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: generate DIR")
	}
	if err := dashboards.WriteAll(os.Args[1]); err != nil {
		log.Fatal(err)
	}
}
