package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
)

// clientListResult is the last CLIENT LIST run's aggregates, exported
// until the next run.
type clientListResult struct {
	have       bool
	triggered  bool // the last run was started by a threshold
	at         time.Time
	duration   time.Duration
	replyBytes int64
	runs       uint64
	stats      replies.ClientListStats
}

// clientListDue decides whether this scrape runs CLIENT LIST and whether a
// threshold caused it.
func (t *target) clientListDue(in replies.Info, ms replies.MemoryStats) (run, triggered bool) {
	switch t.s.clMode {
	case "never":
		return false, false
	case "always":
		return true, false
	}
	if v, ok := t.infoNumber(in, "client_recent_max_output_buffer"); ok && v >= float64(t.s.clOutThreshold) {
		triggered = true
	} else if v, ok := t.infoNumber(in, "client_longest_output_list"); ok && v > 0 {
		// Before 5.0 the only hint is the longest reply list, in nodes;
		// one node can hold a whole multi-megabyte reply (incident 7 had
		// oll=1), so any queued reply is worth a look.
		triggered = true
	}
	clientsMem, ok := ms.ClientsNormal, ms.HasClients
	if !ok {
		clientsMem, ok = t.infoNumber(in, "mem_clients_normal")
	}
	if ok && clientsMem >= float64(t.s.clClientsMemThr) {
		triggered = true
	}
	if triggered {
		return true, true
	}
	// Once more after a triggered run, so the exported aggregates show the
	// return to normal instead of the last bad state.
	if t.cl.have && t.cl.triggered {
		return true, false
	}
	if t.s.clEvery > 0 && t.scrapes%uint64(t.s.clEvery) == 0 {
		return true, false
	}
	return false, false
}

func (t *target) maybeClientList(ctx context.Context, in replies.Info, ms replies.MemoryStats) error {
	run, triggered := t.clientListDue(in, ms)
	if !run {
		return nil
	}
	start := time.Now()
	// The reply is aggregated as it arrives (resplimit.Stream): a CLIENT
	// LIST of 100,000 clients is 30–45 MB, which go-redis would hold whole.
	t.agg.Begin(0)
	t.clStream.Arm(&t.agg)
	reply, err := t.client.ClientList(ctx).Result()
	t.clStream.Disarm()
	took := time.Since(start)
	if err != nil {
		if isErrorReply(err) {
			// The last aggregates would be re-exported as if current.
			t.cl = clientListResult{runs: t.cl.runs}
			t.commandAnswered(cmdClientList, err)
			return nil
		}
		return fmt.Errorf("CLIENT LIST: %w", err)
	}
	t.commandAnswered(cmdClientList, nil)
	if reply != "" {
		// The stream takes every bulk-string reply (go-redis reads "").
		return fmt.Errorf("CLIENT LIST: %w: the reply is not a bulk string", resplimit.ErrProtocol)
	}
	st := t.agg.Finish()
	t.problems.Add("redis_client_list", st.Malformed, errors.New("CLIENT LIST line or field not in field=value form, or longer than 64 KiB"))
	if st.Untracked == 0 {
		t.untracked.OK("CLIENT LIST's client groups and commands are all tracked again: exported client counts are exact")
	} else {
		t.untracked.Failed(fmt.Sprintf("CLIENT LIST has more than %d distinct client groups or commands: clients of later ones without pending output are counted in group=\"other\", "+
			"so exported client counts may be low; past %d with pending output the smallest are moved to \"other\" (the top groups are exact unless a group's clients are scattered; totals stay exact); "+
			"--redis.client-group-by=pool groups pods and numbered workers", replies.MaxGroups, 2*replies.MaxGroups),
			"too_many_groups", nil, "untracked_clients", st.Untracked)
	}
	t.cl = clientListResult{
		have: true, triggered: triggered, at: start, duration: took,
		replyBytes: st.Bytes, runs: t.cl.runs + 1, stats: st,
	}
	return nil
}

func (t *target) sendClientList(ch chan<- prometheus.Metric) {
	l := t.spec.label
	if t.cl.runs > 0 {
		clRunsDesc.Send(ch, float64(t.cl.runs), l)
	}
	if !t.cl.have {
		return
	}
	st := t.cl.stats
	clLastRunDesc.Send(ch, float64(t.cl.at.UnixNano())/1e9, l)
	clDurationDesc.Send(ch, t.cl.duration.Seconds(), l)
	clReplyBytesDesc.Send(ch, float64(t.cl.replyBytes), l)
	clClientsDesc.Send(ch, float64(st.Clients), l)
	if st.HasOutputBuffer {
		// Redis 2.4 prints no omem: absent, not a measured 0.
		clOmemDesc.Send(ch, float64(st.OutputBufferBytes), l)
		clMaxOmemDesc.Send(ch, float64(st.MaxOutputBufferBytes), l)
	}
	if st.HasTotalMemory {
		clTotMemDesc.Send(ch, float64(st.TotalMemoryBytes), l)
	}
	clPendingDesc.Send(ch, float64(st.PendingClients), l)
	clOllDesc.Send(ch, float64(st.OutputListBlocks), l)
	// Group and command names are label values already (replies.label).
	for _, g := range st.Groups {
		clGroupOmemDesc.Send(ch, float64(g.OutputBufferBytes), l, g.Name)
		clGroupClientsDesc.Send(ch, float64(g.Clients), l, g.Name)
	}
	for _, g := range st.Commands {
		clCmdOmemDesc.Send(ch, float64(g.OutputBufferBytes), l, g.Name)
	}
}
