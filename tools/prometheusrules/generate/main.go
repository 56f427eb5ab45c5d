// Command generate writes the PrometheusRules rendered from a directory of rule files to a file:
// `generate ../../alerts ../../deploy/kubernetes/prometheus-operator/prometheusrules.yaml`, as
// `make prometheusrules` (go generate ./prometheusrules in the tools module) runs it.
package main

import (
	"log"
	"os"

	"github.com/stall-exporter/stall_exporter/tools/prometheusrules"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: generate ALERTS_DIR OUTPUT_FILE")
	}
	b, err := prometheusrules.Render(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(os.Args[2], b, 0o644); err != nil {
		log.Fatal(err)
	}
}
