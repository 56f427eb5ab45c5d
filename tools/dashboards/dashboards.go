// Package dashboards generates stall_exporter's Grafana dashboards with the
// typed builders of github.com/grafana/grafana-foundation-sdk/go, whose types
// come from Grafana's own schema. The JSON files beside this package are its
// output and what users import; `make dashboards` (go generate) rewrites
// them and TestGenerated fails when they are stale.
//
// One dashboard is one file here: a function that returns a
// *dashboard.DashboardBuilder, registered in an init with its file name.
// The helpers in kit.go carry the conventions (data source and job/instance
// variables, $__rate_interval, units, descriptions) that TestLint checks.
package dashboards

//go:generate go run ./generate ../../dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// Board is one generated dashboard.
type Board struct {
	File  string // file name beside this package, e.g. "stall-overview.json"
	build func() *dashboard.DashboardBuilder
}

var boards []Board

// register adds a dashboard; each dashboard file calls it from init.
func register(file string, build func() *dashboard.DashboardBuilder) {
	boards = append(boards, Board{File: file, build: build})
}

// All returns the registered dashboards in file-name order.
func All() []Board {
	out := append([]Board(nil), boards...)
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// Render builds the dashboard and returns its JSON (two-space indent, final
// newline). Panel ids are numbered in layout order so that the output is
// stable and links to a panel survive regeneration.
func (b Board) Render() ([]byte, error) {
	d, err := b.build().Build()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.File, err)
	}
	// The SDK places dashboard links "inControlsMenu", a placement only
	// Grafana 12.x knows, which hides them in the controls dropdown there.
	// Without a placement every version shows them above the panels.
	for i := range d.Links {
		d.Links[i].Placement = nil
	}
	// Rows are expanded, so their panels follow them at the top level (an
	// expanded row with nested panels shows nothing in Grafana).
	for i, p := range d.Panels {
		id := uint32(i + 1)
		switch {
		case p.Panel != nil:
			p.Panel.Id = &id
		case p.RowPanel != nil:
			if len(p.RowPanel.Panels) > 0 {
				return nil, fmt.Errorf("%s: row %q nests panels; add them with WithPanel after WithRow", b.File, *p.RowPanel.Title)
			}
			p.RowPanel.Id = id
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep PromQL's <, > and & readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("%s: %w", b.File, err)
	}
	return buf.Bytes(), nil
}

// WriteAll renders every dashboard into dir.
func WriteAll(dir string) error {
	for _, b := range All() {
		out, err := b.Render()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, b.File), out, 0o644); err != nil {
			return err
		}
	}
	return nil
}
