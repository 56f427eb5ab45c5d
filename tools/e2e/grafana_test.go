package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// grafanaDashboardProvisioning is Grafana's dashboard provisioning file
// (apiVersion 1), with the fields of Grafana's provisioning documentation
// ("Dashboards" under Provision Grafana); decoding it strictly fails on a
// misspelt or unknown one.
type grafanaDashboardProvisioning struct {
	APIVersion int `json:"apiVersion"`
	Providers  []struct {
		Name                  string `json:"name"`
		OrgID                 int    `json:"orgId"`
		Type                  string `json:"type"`
		Folder                string `json:"folder"`
		FolderUID             string `json:"folderUid"`
		AllowUIUpdates        bool   `json:"allowUiUpdates"`
		DisableDeletion       bool   `json:"disableDeletion"`
		UpdateIntervalSeconds int    `json:"updateIntervalSeconds"`
		Options               struct {
			Path                      string `json:"path"`
			FoldersFromFilesStructure bool   `json:"foldersFromFilesStructure"`
		} `json:"options"`
	} `json:"providers"`
}

// grafanaDatasourceProvisioning is Grafana's data source provisioning file
// (apiVersion 1), the fields the example uses and their siblings.
type grafanaDatasourceProvisioning struct {
	APIVersion  int `json:"apiVersion"`
	Datasources []struct {
		Name      string `json:"name"`
		UID       string `json:"uid"`
		Type      string `json:"type"`
		Access    string `json:"access"`
		URL       string `json:"url"`
		OrgID     int    `json:"orgId"`
		IsDefault bool   `json:"isDefault"`
		Editable  bool   `json:"editable"`
		JSONData  struct {
			TimeInterval string `json:"timeInterval"`
			HTTPMethod   string `json:"httpMethod"`
		} `json:"jsonData"`
	} `json:"datasources"`
}

// TestGrafanaProvisioning checks the plain-Grafana path: the dashboard
// provider of deploy/grafana reads the directory the docs copy
// dashboards/*.json into, as files that stay the source of truth; every
// dashboard can be provisioned as a file (a uid of its own, no __inputs to
// fill in, a `datasource` variable of type prometheus instead of a named
// data source); the example data source is a Prometheus whose interval is
// prometheus.yml's scrape interval.
func TestGrafanaProvisioning(t *testing.T) {
	const providerFile = "deploy/grafana/provisioning/dashboards/stall.yml"
	b, err := os.ReadFile(providerFile)
	if err != nil {
		t.Fatal(err)
	}
	var p grafanaDashboardProvisioning
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("%s: %v", providerFile, err)
	}
	if p.APIVersion != 1 || len(p.Providers) != 1 {
		t.Fatalf("%s: apiVersion %d, %d providers: want apiVersion 1 and one provider", providerFile, p.APIVersion, len(p.Providers))
	}
	pr := p.Providers[0]
	if pr.Type != "file" || pr.AllowUIUpdates || pr.Options.FoldersFromFilesStructure || pr.UpdateIntervalSeconds <= 0 ||
		pr.Folder == "" || !filepath.IsAbs(pr.Options.Path) {
		t.Errorf("%s: provider %+v: want type file, an absolute path, a folder, no UI updates, periodic rereads", providerFile, pr)
	}
	// The install commands (the file's own comment, the docs) copy the
	// dashboards to the provider's path, and the provider to Grafana's
	// provisioning directory.
	copyDashboards := "install -m 0644 dashboards/*.json " + pr.Options.Path + "/"
	copyProvider := "install -m 0644 " + providerFile + " /etc/grafana/provisioning/dashboards/"
	for _, doc := range []string{providerFile, "docs/grafana.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{copyDashboards, copyProvider} {
			if !strings.Contains(string(text), cmd) {
				t.Errorf("%s does not say %q", doc, cmd)
			}
		}
	}

	files, err := filepath.Glob("dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	uids := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID        string `json:"uid"`
			Inputs     []any  `json:"__inputs"`
			Templating struct {
				List []struct {
					Name  string `json:"name"`
					Type  string `json:"type"`
					Query any    `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || uids[d.UID] != "" {
			t.Errorf("%s: uid %q empty or also %s's: a provisioned dashboard needs its own", f, d.UID, uids[d.UID])
		}
		uids[d.UID] = f
		if len(d.Inputs) > 0 {
			t.Errorf("%s has __inputs, which file provisioning leaves unfilled", f)
		}
		ok := false
		for _, v := range d.Templating.List {
			ok = ok || v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
		}
		if !ok {
			t.Errorf("%s has no datasource variable of type prometheus", f)
		}
	}

	const dsFile = "deploy/grafana/provisioning/datasources/stall-prometheus.yml"
	b, err = os.ReadFile(dsFile)
	if err != nil {
		t.Fatal(err)
	}
	var ds grafanaDatasourceProvisioning
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("%s: %v", dsFile, err)
	}
	cfg, _ := deployPromConfig(t, promSetup{})
	var prom struct {
		Global struct {
			ScrapeInterval string `json:"scrape_interval"`
		} `json:"global"`
	}
	if err := yaml.Unmarshal(cfg, &prom); err != nil {
		t.Fatal(err)
	}
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" ||
		ds.Datasources[0].JSONData.TimeInterval != prom.Global.ScrapeInterval {
		t.Errorf("%s: %+v: want one Prometheus data source with timeInterval %s (prometheus.yml's scrape interval)",
			dsFile, ds, prom.Global.ScrapeInterval)
	}
}
