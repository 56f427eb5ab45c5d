package rocketmq

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

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
		go func() { defer close(done); collectortest.Expose(t, context.Background(), cs) }()
		synctest.Wait()
		if n := budget.InUse(); n != 64<<10 {
			t.Fatalf("the stalled announcement holds %d bytes of the budget, want 64 KiB", n)
		}
		lv := `{broker="` + victim.Addr() + `",broker_id="",rocketmq_cluster=""`
		start := time.Now()
		collectortest.Compare(t, cv, `
stall_rocketmq_down_reason{broker="`+victim.Addr()+`",broker_id="",reason="reply_memory",rocketmq_cluster=""} 1
stall_rocketmq_reply_budget_refusals_total`+lv+`} 1
stall_rocketmq_up`+lv+`} 0
`, "stall_rocketmq_up", "stall_rocketmq_down_reason", "stall_rocketmq_reply_budget_refusals_total")
		if took := time.Since(start); took != 300*time.Millisecond {
			t.Errorf("the refused scrape took %s, want its 300 ms timeout", took)
		}
		<-done
		if n := budget.InUse(); n != 0 {
			t.Errorf("%d bytes of the budget still taken after every request ended", n)
		}
		collectortest.Compare(t, cv, `
stall_rocketmq_reply_budget_refusals_total`+lv+`} 1
stall_rocketmq_up`+lv+`} 1
`, "stall_rocketmq_up", "stall_rocketmq_reply_budget_refusals_total")
	})
}
