package rocketmq

import (
	"errors"
	"strings"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// /probe refuses malformed targets before anything else (400, no
// connection), matches the allowlist on the normalised target, and keeps one
// collector and one connection per broker however the target is spelled.
func TestProbeTargets(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "")
	useFlags(t, "--rocketmq.probe.allowed-targets=127.0.0.1/32")
	_, port, _ := strings.Cut(b.Addr(), ":")
	cfg := collectortest.Config("rocketmq", nil)
	for _, bad := range []string{
		b.Addr() + "/x", b.Addr() + "?a=b", ":0", ":-1", ":99999", b.Addr() + "\x00", "127.0.0.1:99999",
	} {
		c, err := probe(cfg, bad)
		if err == nil || errors.Is(err, collector.ErrTargetNotAllowed) {
			t.Errorf("probe(%q) = %v, %v; want a bad-target error", bad, c, err)
		}
		if err != nil && strings.ContainsRune(err.Error(), 0) {
			t.Errorf("probe(%q): the error carries the NUL: %q", bad, err)
		}
	}
	if n := b.Accepted(); n != 0 {
		t.Errorf("%d connections to the broker for refused targets", n)
	}
	var first collector.Collector
	for _, spelling := range []string{b.Addr(), "[::ffff:127.0.0.1]:" + port, "127.0.0.1:0" + port} {
		c, err := probe(cfg, spelling)
		if err != nil {
			t.Fatalf("probe(%q): %v", spelling, err)
		}
		if first == nil {
			first = c
		} else if c != first {
			t.Errorf("probe(%q) is another collector than probe(%q): one broker, two cache entries", spelling, b.Addr())
		}
		got, _ := scrape(t, c, "stall_rocketmq_up", "stall_rocketmq_broker_info")
		expect(t, got, `
stall_rocketmq_broker_info{address="`+b.Addr()+`",broker="`+b.Addr()+`",broker_id="",cluster="",version="V4_9_7"} 1
stall_rocketmq_up{broker="`+b.Addr()+`",broker_id="",cluster=""} 1
`)
	}
	if n := b.Accepted(); n != 1 {
		t.Errorf("%d connections for one broker probed under three spellings, want 1", n)
	}
}
