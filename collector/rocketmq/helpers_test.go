package rocketmq

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// startBroker starts a fake broker on a loopback port, closed when the
// test ends.
func startBroker(t *testing.T, runtime map[string]string, config string) *rocketmqtest.Broker {
	t.Helper()
	b, err := rocketmqtest.NewBroker("127.0.0.1:0", runtime, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// parseFlags parses args (none: the defaults) on an application of its
// own, as main parses the process's command line.
func parseFlags(t testing.TB, args ...string) *flagValues {
	t.Helper()
	app := kingpin.New("test", "")
	f := registerFlags(app)
	if _, err := app.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

// testOptions are the /metrics collector's options for the command line
// args.
func testOptions(t testing.TB, args ...string) options {
	t.Helper()
	opts, err := parseFlags(t, args...).validateMetrics()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// recordLogs makes cfg's logger keep its records at info level and above
// ("LEVEL message key=value …").
func recordLogs(cfg *collector.Config) *collectortest.Logs {
	logs, logger := collectortest.NewLogs(slog.LevelInfo)
	cfg.Logger = logger
	return logs
}

// pipeOptions are testOptions for a scraper whose connections go to the
// fake servers of n (tests under testing/synctest).
func pipeOptions(t testing.TB, n *rocketmqtest.Net, args ...string) options {
	t.Helper()
	opts := testOptions(t, args...)
	opts.dial = n.Dial
	return opts
}

// pipeBroker starts a fake broker at addr on n, closed when the test
// ends.
func pipeBroker(t *testing.T, n *rocketmqtest.Net, addr string, runtime map[string]string, config string) *rocketmqtest.Broker {
	b := n.Broker(addr, runtime, config)
	t.Cleanup(func() { b.Close() })
	return b
}

// pipeNameServer starts a fake name server at addr on n, closed when the
// test ends.
func pipeNameServer(t *testing.T, n *rocketmqtest.Net, addr string, brokers ...remoting.BrokerAddr) *rocketmqtest.NameServer {
	ns := n.NameServer(addr, brokers)
	t.Cleanup(func() { ns.Close() })
	return ns
}

// pipeSilent starts a server at addr on n that never answers, closed when
// the test ends, and returns addr.
func pipeSilent(t *testing.T, n *rocketmqtest.Net, addr string) string {
	s := n.Silent(addr)
	t.Cleanup(func() { s.Close() })
	return addr
}

// pipeScraper is a scraper of the servers of n, configured by the
// command line args and closed when the test ends.
func pipeScraper(t *testing.T, cfg collector.Config, n *rocketmqtest.Net, args ...string) *scraper {
	t.Helper()
	c := newScraper(cfg, pipeOptions(t, n, args...))
	t.Cleanup(c.close)
	return c
}

// endRound waits for the discovery round in the background, if one runs.
func endRound(c *scraper) {
	c.mu.Lock()
	done := c.discovering
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

// checkLogs compares records by prefix (the err attribute varies) and
// checks no record carries the secret key of the ACL tests.
func checkLogs(t *testing.T, what string, got, want []string) {
	t.Helper()
	for _, g := range got {
		if strings.Contains(g, "s3cret") {
			t.Errorf("%s: log record carries the secret key: %s", what, g)
		}
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("%s: logged\n%s\nwant records starting with\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
