package rocketmq

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// incident1Replay is the promtool replay of incident 1, whose
// stall_rocketmq_up series TestIncident1ReplayIsWhatTheCollectorExports
// checks against the collector.
const incident1Replay = "../../alerts/tests/incident-1-broker-gone-with-session.yml"

// TestIncident1ReplayIsWhatTheCollectorExports runs the collector through
// incident 1's timeline — a name server, a broker that registers, answers
// for half an hour, then dies with the operator's session and, as a
// stopping broker does, leaves the name server's list at once — scraping
// every 15 s under testing/synctest with the shipped defaults (discovery every
// 30 s, --rocketmq.unlisted-broker-retention), and compares its
// stall_rocketmq_up series, sample by sample, with the one the replay feeds
// promtool. The replay used to feed a constant up 0 that the collector
// never produced (the series vanished within 30 s, so RocketMQBrokerDown
// could not fire); a replay that drifts from the collector fails here.
func TestIncident1ReplayIsWhatTheCollectorExports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		want := replaySeries(t, incident1Replay, `stall_rocketmq_up{`)
		defaults := parseFlags(t)
		retention, discovery := defaults.opts.UnlistedRetention, defaults.opts.DiscoveryInterval
		r := newUnlistedRig(t, retention)
		r.c.opts.DiscoveryInterval = discovery
		b := r.broker("10.0.0.1:10911")
		listed := []remoting.BrokerAddr{{Cluster: "DefaultCluster", Name: "broker-c", ID: 0, Addr: b.Addr()}}
		const (
			registered = 10 * time.Second // 13:30:10: the JVM is up and registered
			sessionEnd = 30 * time.Minute // 14:00:00, just after that scrape
		)
		// Run past the broker's drop even if the replay ends before it.
		steps := max(len(want), int((sessionEnd+retention+2*discovery)/(15*time.Second))) + 8
		var got []string
		for step := 0; step < steps; step++ {
			at := time.Duration(step) * 15 * time.Second
			if at > registered && at-15*time.Second <= registered {
				r.ns.SetBrokers(listed)
			}
			if at > sessionEnd && at-15*time.Second <= sessionEnd {
				b.Close()            // SIGHUP: the JVM exits ...
				r.ns.SetBrokers(nil) // ... and its shutdown hook unregisters it
			}
			out := r.scrape().Families("stall_rocketmq_up")
			v := "_"
			if _, val, ok := strings.Cut(strings.TrimSpace(out), `broker="broker-c",broker_id="0",rocketmq_cluster="DefaultCluster"} `); ok {
				v = val
			}
			got = append(got, v)
		}
		// Prometheus marks a series stale at the first scrape without it.
		seen := false
		for i, v := range got {
			if v != "_" {
				seen = true
			} else if seen {
				got[i], seen = "stale", false
			}
		}
		for len(want) < len(got) {
			want = append(want, "_")
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("at %s the collector exports %s, the replay feeds %s\ncollector: %s\nreplay:    %s",
					time.Duration(i)*15*time.Second, got[i], want[i], compact(got), compact(want))
				break
			}
		}
	})
}

// replaySeries returns the samples of the one input series of a promtool
// test file that starts with prefix, expanded: a number, "_" (no sample) or
// "stale" per 15 s step.
func replaySeries(t *testing.T, path, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
				Values string `yaml:"values"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, g := range doc.Tests {
		for _, s := range g.InputSeries {
			if strings.HasPrefix(s.Series, prefix) {
				values = append(values, s.Values)
			}
		}
	}
	if len(values) != 1 {
		t.Fatalf("%s: %d input series starting with %s, want 1", path, len(values), prefix)
	}
	out, err := expandValues(values[0])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

var valueTerm = regexp.MustCompile(`^(-?[0-9.]+)(?:([+-])([0-9.]+)x([0-9]+))?$`)

// expandValues expands promtool's series notation: "_", "_xN", "stale", a
// number, "a+bxN" and "a-bxN" (a, then N more steps of b).
func expandValues(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Fields(s) {
		switch {
		case f == "_" || f == "stale":
			out = append(out, f)
			continue
		case strings.HasPrefix(f, "_x"):
			n, err := strconv.Atoi(f[2:])
			if err != nil {
				return nil, fmt.Errorf("term %q: %w", f, err)
			}
			for range n {
				out = append(out, "_")
			}
			continue
		}
		m := valueTerm.FindStringSubmatch(f)
		if m == nil {
			return nil, fmt.Errorf("term %q: not a promtool series term this test reads", f)
		}
		a, _ := strconv.ParseFloat(m[1], 64)
		out = append(out, strconv.FormatFloat(a, 'g', -1, 64))
		if m[2] == "" {
			continue
		}
		d, _ := strconv.ParseFloat(m[3], 64)
		if m[2] == "-" {
			d = -d
		}
		n, _ := strconv.Atoi(m[4])
		for i := 1; i <= n; i++ {
			out = append(out, strconv.FormatFloat(a+float64(i)*d, 'g', -1, 64))
		}
	}
	return out, nil
}

// compact writes samples back in promtool's notation, runs folded.
func compact(vs []string) string {
	var parts []string
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[i] {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, vs[i])
		case vs[i] == "_":
			parts = append(parts, fmt.Sprintf("_x%d", j-i+1))
		default:
			parts = append(parts, fmt.Sprintf("%s+0x%d", vs[i], j-i))
		}
		i = j + 1
	}
	return strings.Join(parts, " ")
}
