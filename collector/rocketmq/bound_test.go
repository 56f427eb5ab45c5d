package rocketmq

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// /probe keeps the state of every cached broker but the connections of the
// probeMaxConns most recently probed only (review 3, item 2): a broker that
// lost its connection is the same collector at its next probe, dials again
// and does not read its config again. Under the default flags a frame over
// --rocketmq.max-frame-bytes (4 MiB) is refused and counted.
func TestProbeBoundsConnections(t *testing.T) {
	useFlags(t, "--rocketmq.probe.allowed-targets=127.0.0.1/32")
	probes.Reset()
	t.Cleanup(probes.Reset)
	cfg := collectortest.Config("rocketmq", nil)

	brokers := make([]*rocketmqtest.Broker, probeMaxConns+6)
	var first collector.Collector
	for i := range brokers {
		brokers[i] = startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
		c, err := probe(cfg, brokers[i].Addr())
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := scrape(t, c, "stall_rocketmq_up"); !strings.HasSuffix(got, "} 1\n") {
			t.Fatalf("broker %d: %q, want up 1", i, got)
		}
		if i == 0 {
			first = c
		}
	}
	open := func() int {
		n := 0
		for _, b := range brokers {
			n += b.Open()
		}
		return n
	}
	// The brokers see the closes a moment after the cache makes them.
	for end := time.Now().Add(5 * time.Second); open() > probeMaxConns && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open(); n != probeMaxConns {
		t.Errorf("%d connections open after %d brokers were probed, want %d", n, len(brokers), probeMaxConns)
	}
	if n := brokers[0].Open(); n != 0 {
		t.Errorf("the least recently probed broker has %d connections open, want 0", n)
	}
	if n := probes.Len(); n != len(brokers) {
		t.Errorf("%d brokers cached, want all %d", n, len(brokers))
	}

	c, err := probe(cfg, brokers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	if c != first {
		t.Error("the broker that lost its connection is a new collector: its state is gone")
	}
	if got, _ := scrape(t, c, "stall_rocketmq_up"); !strings.HasSuffix(got, "} 1\n") {
		t.Errorf("after its connection was closed: %q, want up 1", got)
	}
	if n := brokers[0].Accepted(); n != 2 {
		t.Errorf("%d connections accepted by the first broker, want 2 (one redial)", n)
	}
	if n := brokers[0].RequestCount(remoting.GetBrokerConfig); n != 1 {
		t.Errorf("config read %d times, want once: the cached config is kept", n)
	}

	// 16 MiB is within the broker's own limit, over the default 4 MiB.
	brokers[1].Inject(rocketmqtest.Announce)
	c, _ = probe(cfg, brokers[1].Addr())
	before := cfg.Problems.Count()
	got, _ := scrape(t, c, "stall_rocketmq_down_reason")
	if !strings.Contains(got, `reason="reply_too_large"} 1`) {
		t.Errorf("a 16 MiB frame: %q, want reason reply_too_large", got)
	}
	if d := cfg.Problems.Count() - before; d != 1 {
		t.Errorf("a 16 MiB frame: %d problems counted, want 1", d)
	}
}

// A reply that finds no room in the process-wide budget of frames read at
// once fails that broker's scrape with reason reply_memory at its
// deadline, and is counted; the budget is given back, and the next scrape
// answers.
func TestReplyBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxFrame = 16<<20 + 1 // a limit no other test uses: its own budget
		budgetsMu.Lock()
		budget := remote.NewBudget(64<<10 + 1<<10) // one first chunk and 1 KiB
		budgets[maxFrame] = budget
		budgetsMu.Unlock()
		t.Cleanup(func() { budgetsMu.Lock(); delete(budgets, maxFrame); budgetsMu.Unlock() })

		var n rocketmqtest.Net
		stalled := pipeBroker(t, &n, "10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerName=s\n")
		stalled.Delay(time.Minute)
		stalled.Inject(rocketmqtest.Announce)                                       // 16 MiB announced: its client takes a 64 KiB chunk and waits
		victim := pipeBroker(t, &n, "10.0.0.2:10911", rocketmqtest.Runtime49(), "") // no brokerName: labelled by its address
		frame := "--rocketmq.max-frame-bytes=" + strconv.Itoa(maxFrame)
		cs := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.broker="+stalled.Addr(), frame, "--rocketmq.timeout=1s")
		cv := pipeScraper(t, collectortest.Config("rocketmq", nil), &n, "--rocketmq.broker="+victim.Addr(), frame, "--rocketmq.timeout=300ms")
		done := make(chan struct{})
		go func() { defer close(done); scrape(t, cs) }()
		synctest.Wait()
		if n := budget.InUse(); n != 64<<10 {
			t.Fatalf("the stalled announcement holds %d bytes of the budget, want 64 KiB", n)
		}
		start := time.Now()
		got, _ := scrape(t, cv, "stall_rocketmq_up", "stall_rocketmq_down_reason", "stall_rocketmq_reply_budget_refusals_total")
		if took := time.Since(start); took != 300*time.Millisecond {
			t.Errorf("the refused scrape took %s, want its 300 ms timeout", took)
		}
		lv := `{broker="` + victim.Addr() + `",broker_id="",cluster=""`
		expect(t, got, `
stall_rocketmq_down_reason`+lv+`,reason="reply_memory"} 1
stall_rocketmq_reply_budget_refusals_total`+lv+`} 1
stall_rocketmq_up`+lv+`} 0
`)
		<-done
		if n := budget.InUse(); n != 0 {
			t.Errorf("%d bytes of the budget still taken after every request ended", n)
		}
		got, _ = scrape(t, cv, "stall_rocketmq_up", "stall_rocketmq_reply_budget_refusals_total")
		expect(t, got, `
stall_rocketmq_reply_budget_refusals_total`+lv+`} 1
stall_rocketmq_up`+lv+`} 1
`)
	})
}
