package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
)

// TestLandingPageLinksWork: every link of the landing page, and its /probe
// form submitted as a browser would with a target the module allows,
// answers 200 (the page once linked /probe?module=redis&target=, a 400);
// /-/healthy and /-/ready answer 200 as Prometheus' components do.
func TestLandingPageLinksWork(t *testing.T) {
	srv := newTestServer(testSetup{built: testBuilt(&fakeCollector{name: "fast"}), modules: map[string]collector.ProbeModule{"stub": stubModule{}, "other": stubModule{}}})
	mux := http.NewServeMux()
	if err := routes(mux, "/metrics", srv.metrics, srv.probe, srv.probe.names); err != nil {
		t.Fatal(err)
	}
	page := get(t, mux, "/").Body.String()

	links := regexp.MustCompile(`<a href="([^"]+)"`).FindAllStringSubmatch(page, -1)
	var hrefs []string
	for _, l := range links {
		hrefs = append(hrefs, l[1])
	}
	for _, want := range []string{"/metrics", "/-/healthy", "/-/ready"} {
		if !strings.Contains(strings.Join(hrefs, " "), want) {
			t.Errorf("the landing page has no link to %s: %q", want, hrefs)
		}
	}
	for _, href := range hrefs {
		if strings.HasPrefix(href, "http") {
			continue // the page's link to the project, not served here
		}
		u := href
		if !strings.HasPrefix(u, "/") {
			u = "/" + u
		}
		if rec := serve(mux, httptest.NewRequest(http.MethodGet, u, nil)); rec.Code != http.StatusOK {
			t.Errorf("link %s: %d %s", href, rec.Code, rec.Body)
		}
	}
	for path, body := range map[string]string{"/-/healthy": "Stall Exporter is Healthy.\n", "/-/ready": "Stall Exporter is Ready.\n"} {
		if got := get(t, mux, path).Body.String(); got != body {
			t.Errorf("%s: %q, want %q", path, got, body)
		}
	}

	form := regexp.MustCompile(`<form action="([^"]+)">`).FindStringSubmatch(page)
	if form == nil || form[1] != "/probe" {
		t.Fatalf("no /probe form on the landing page:\n%s", page)
	}
	q := url.Values{}
	for _, in := range regexp.MustCompile(`<input type="text" name="([^"]+)" placeholder="[^"]*" value="([^"]*)">`).FindAllStringSubmatch(page, -1) {
		q.Set(in[1], in[2])
	}
	if q.Get("module") != "other" || q.Get("debug") != "true" || !q.Has("target") {
		t.Fatalf("the form's fields and defaults: %v, want module=other (the first module), target, debug=true", q)
	}
	q.Set("target", "good:1") // what the user types
	rec := get(t, mux, form[1]+"?"+q.Encode())
	if !strings.Contains(rec.Body.String(), "Logs for the probe of other target good:1:") {
		t.Errorf("the form's probe answered:\n%s", rec.Body)
	}
}
