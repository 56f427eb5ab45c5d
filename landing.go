package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
)

// routes registers the exporter's endpoints on mux: metrics at
// metricsPath, probe at /probe, /-/healthy and /-/ready, and the landing
// page at / unless metricsPath is /. modules is "redis|rocketmq", shown
// on the page. An error is the landing page's template failing.
func routes(mux *http.ServeMux, metricsPath string, metrics, probe http.Handler, modules string) error {
	mux.Handle(metricsPath, metrics)
	mux.Handle("/probe", probe)
	// Prometheus' own components answer these (Kubernetes probes and load
	// balancers use them). Healthy: the process serves HTTP. Ready: it can
	// serve a scrape, which is true as soon as it serves at all, since
	// the collectors are built, and their background runners started,
	// before the listener opens. Neither runs a collector, so a probe of
	// them costs nothing and a slow Redis cannot make the Pod unready.
	mux.Handle("/-/healthy", plainText("Stall Exporter is Healthy.\n"))
	mux.Handle("/-/ready", plainText("Stall Exporter is Ready.\n"))
	if metricsPath == "/" {
		return nil
	}
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "Stall Exporter",
		Description: "Early warning signs of latency stalls: page cache, disk await, kernel log, Redis, RocketMQ",
		Version:     version.Info(),
		Profiling:   "false", // no net/http/pprof: profile with the benchmarks instead
		// A GET form, as blackbox_exporter's page has: /probe needs a
		// target, so a plain link to it could only answer 400.
		Form: web.LandingForm{
			Action: "/probe",
			Inputs: []web.LandingFormInput{
				{Label: "Module (" + modules + ")", Type: "text", Name: "module", Value: strings.SplitN(modules, "|", 2)[0]},
				{Label: "Target (host:port, allowed by configuration)", Type: "text", Name: "target", Placeholder: "localhost:6379"},
				{Label: "Debug (true: the probe's log lines and metrics as text)", Type: "text", Name: "debug", Value: "true"},
			},
		},
		Links: []web.LandingLinks{
			{Address: metricsPath, Text: "Metrics"},
			{Address: "/-/healthy", Text: "Health"},
			{Address: "/-/ready", Text: "Readiness"},
		},
	})
	if err != nil {
		return fmt.Errorf("landing page: %w", err)
	}
	mux.Handle("/", landing)
	return nil
}

// plainText answers every request with 200 and body.
func plainText(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(body))
	})
}
