package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Model is the part of a dashboard's JSON that the lint and the end-to-end
// test read: what Grafana will query, and the conventions around it. It is
// read from the generated files, so the checks see exactly what users
// import.
type Model struct {
	UID        string   `json:"uid"`
	Title      string   `json:"title"`
	Tags       []string `json:"tags"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
	Links  []Link  `json:"links"`
}

// Link is a dashboard link (the links to the other dashboards).
type Link struct {
	Title     string `json:"title"`
	Placement string `json:"placement"`
}

// Ref is a data source reference.
type Ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Variable is a template variable.
type Variable struct {
	Type       string `json:"type"`
	Name       string `json:"name"`
	Label      string `json:"label"`
	Query      any    `json:"query"` // a string for the variables generated here
	Datasource *Ref   `json:"datasource"`
	Multi      bool   `json:"multi"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
	Hide       int    `json:"hide"` // 2: hidden
	Current    struct {
		Value any `json:"value"`
	} `json:"current"`
}

// CurrentValue is the variable's default as saved in the dashboard (a
// custom variable's single value; "" for a multi-value selection).
func (v Variable) CurrentValue() string {
	s, _ := v.Current.Value.(string)
	return s
}

// Panel is a panel or a row.
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *Ref           `json:"datasource"`
	Targets     []Target       `json:"targets"`
	Options     map[string]any `json:"options"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Interval  string  `json:"interval"` // minimum interval (step) of its queries
	Collapsed bool    `json:"collapsed"`
	Panels    []Panel `json:"panels"` // a row's nested panels
}

// Target is one query of a panel.
type Target struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Legend     string `json:"legendFormat"`
	Format     string `json:"format"`
	Instant    bool   `json:"instant"`
	Datasource *Ref   `json:"datasource"`
}

// Load reads a dashboard JSON file.
func Load(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}

// Variable returns the template variable called name.
func (m *Model) Variable(name string) (Variable, bool) {
	for _, v := range m.Templating.List {
		if v.Name == name {
			return v, true
		}
	}
	return Variable{}, false
}

// QueryString is the variable's query as text ("" when it is not a string).
func (v Variable) QueryString() string {
	s, _ := v.Query.(string)
	return s
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// LabelValues splits a variable query label_values(selector, label); ok is
// false for any other form.
func (v Variable) LabelValues() (selector, label string, ok bool) {
	m := labelValues.FindStringSubmatch(strings.TrimSpace(v.QueryString()))
	if m == nil {
		return "", "", false
	}
	return strings.TrimSpace(m[1]), m[2], true
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// Expand substitutes Grafana's variables in a query ($name, ${name},
// ${name:format}, [[name]], and the built-ins such as $__rate_interval)
// with values, as Grafana does before it sends the query. A variable
// without a value is an error: the query could not run.
func Expand(expr string, values map[string]string) (string, error) {
	var missing []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for variable(s) %s in %s", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

// RegexValue formats the selected values of a multi-value variable the way
// Grafana's Prometheus data source does inside =~"…": each value
// regexp-escaped (with the backslashes doubled for the PromQL string), one
// value as is, several as (a|b).
func RegexValue(values []string) string {
	esc := make([]string, len(values))
	for i, v := range values {
		v = strings.ReplaceAll(v, `\`, `\\\\`)
		esc[i] = regexMeta.ReplaceAllString(v, `\\$0`)
	}
	if len(esc) == 1 {
		return esc[0]
	}
	return "(" + strings.Join(esc, "|") + ")"
}

var regexMeta = regexp.MustCompile(`[$^*{}\[\]'+?.()|]`)
