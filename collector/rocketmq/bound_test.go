package rocketmq

import (
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// A reply that finds no room in the process-wide budget of frames read at
// once fails that broker's scrape with reason reply_memory before its
// deadline and is counted; the budget is given back, and the next scrape
// answers.
func TestReplyBudget(t *testing.T) {
	const maxFrame = 16<<20 + 1 // a limit no other test uses: its own budget
	budgetsMu.Lock()
	budget := remote.NewBudget(64<<10 + 1<<10) // one first chunk and 1 KiB
	budgets[maxFrame] = budget
	budgetsMu.Unlock()
	t.Cleanup(func() { budgetsMu.Lock(); delete(budgets, maxFrame); budgetsMu.Unlock() })

	stalled := startBroker(t, rocketmqtest.Runtime49(), "brokerName=s\n")
	stalled.Delay(time.Minute)
	stalled.Inject(rocketmqtest.Announce)                  // 16 MiB announced: its client takes a 64 KiB chunk and waits
	victim := startBroker(t, rocketmqtest.Runtime49(), "") // no brokerName: labelled by its address
	cs := newScraper(collectortest.Config("rocketmq", nil), options{Brokers: []string{stalled.Addr()}, MaxFrame: maxFrame, Timeout: time.Second})
	cv := newScraper(collectortest.Config("rocketmq", nil), options{Brokers: []string{victim.Addr()}, MaxFrame: maxFrame, Timeout: 300 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); scrape(t, cs) }()
	for end := time.Now().Add(5 * time.Second); budget.InUse() < 64<<10 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := budget.InUse(); n != 64<<10 {
		t.Fatalf("the stalled announcement holds %d bytes of the budget, want 64 KiB", n)
	}
	start := time.Now()
	got, _ := scrape(t, cv, "stall_rocketmq_up", "stall_rocketmq_down_reason", "stall_rocketmq_reply_budget_refusals_total")
	if took := time.Since(start); took > time.Second {
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
}
