package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// target is one Redis server and the state kept between its scrapes: a
// run sends INFO, MEMORY STATS and CONFIG GET when due (info.go) and
// CLIENT LIST when its mode says so (clientlist.go).
type target struct {
	spec     *targetSpec
	clStream *resplimit.Stream // CLIENT LIST replies, aggregated as they arrive
	s        settings
	logger   *slog.Logger
	problems *collector.Problems
	down     *collector.StateLog // the target going down and coming back

	runs    singleflight.Group // concurrent scrapes of the target share one run
	sem     chan struct{}      // held by the run in progress, and by close
	inSetup atomic.Bool        // a new connection is authenticating (newClient)

	// Guarded by sem.
	client        *redis.Client // nil until the next scrape needs it (closeIdle)
	major, minor  int           // server version, 0.0 until known
	noMemoryStats bool
	cfg           configCache
	scrapes       uint64
	agg           replies.Aggregator
	cl            clientListResult
	untracked     *collector.StateLog // CLIENT LIST having more than replies.MaxGroups groups
	// commands logs CLIENT LIST, CONFIG GET and MEMORY STATS being refused,
	// by cmd label (Failing is stall_redis_command_refused); nil for a
	// command never refused.
	commands map[string]*collector.StateLog
}

func newTarget(spec *targetSpec, s settings, cfg collector.Config) *target {
	logger := cfg.Logger.With("addr", spec.label)
	return &target{
		spec:      spec,
		clStream:  resplimit.NewStream(spec.clientListLimit, "client", "list"),
		s:         s,
		logger:    logger,
		problems:  cfg.Problems,
		down:      collector.NewStateLog(logger),
		untracked: collector.NewStateLog(logger),
		sem:       make(chan struct{}, 1),
		agg:       replies.Aggregator{GroupBy: s.groupBy, TopK: s.topK},
		commands:  map[string]*collector.StateLog{},
	}
}

// close waits for a running scrape to finish, then closes the connection
// pool; a later collect waits for its deadline and reports the target down.
func (t *target) close() {
	t.sem <- struct{}{}
	t.closeClient()
}

// closeIdle closes the target's connection unless a scrape is using it,
// and reports whether it did.
func (t *target) closeIdle() bool {
	select {
	case t.sem <- struct{}{}:
	default:
		return false
	}
	t.closeClient()
	<-t.sem
	return true
}

// closeClient closes the connection pool; the caller holds sem.
func (t *target) closeClient() {
	if t.client != nil {
		_ = t.client.Close()
		t.client = nil
	}
}

// collect scrapes the target and sends its series; stall_redis_up is sent
// in every case, before ctx's deadline. Scrapes that arrive while one runs
// share its series and error, so concurrent requests cannot multiply the
// work done on Redis' main thread.
func (t *target) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	ctx, cancel := context.WithDeadline(ctx, collector.ScrapeDeadline(ctx, time.Now(), t.s.timeout))
	defer cancel()
	mine := make(chan struct{}) // closed when the run is this scrape's own
	res := t.runs.DoChan("", func() (any, error) {
		close(mine)
		return t.run(ctx)
	})
	select {
	case r := <-res:
		return send(ch, r)
	case <-ctx.Done():
	}
	select {
	case <-mine:
		// This scrape's own run has the same deadline: it ends now, with
		// its own verdict and series.
		return send(ch, <-res)
	default:
		upDesc.Send(ch, 0, t.spec.label)
		downReasonDesc.Send(ch, 1, t.spec.label, remote.ReasonTimeout)
		return fmt.Errorf("redis %s: the scrape in progress did not end within this scrape's time limit", t.spec.label)
	}
}

func send(ch chan<- prometheus.Metric, r singleflight.Result) error {
	for _, m := range r.Val.([]prometheus.Metric) {
		ch <- m
	}
	return r.Err
}

// run scrapes the target once and returns the series to send.
func (t *target) run(ctx context.Context) ([]prometheus.Metric, error) {
	buf := make(chan prometheus.Metric, 64)
	var metrics []prometheus.Metric
	collected := make(chan struct{})
	go func() {
		for m := range buf {
			metrics = append(metrics, m)
		}
		close(collected)
	}()
	err := t.lockAndScrape(ctx, buf)
	close(buf)
	<-collected
	return metrics, err
}

// lockAndScrape takes the target (sem) for one scrape, or gives up when
// ctx ends first (the target is closing), connects when no client is
// open, scrapes, and sends up, the down reason and the scrape's own
// metrics whatever the outcome.
func (t *target) lockAndScrape(ctx context.Context, ch chan<- prometheus.Metric) error {
	l := t.spec.label
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		upDesc.Send(ch, 0, l)
		downReasonDesc.Send(ch, 1, l, remote.ReasonTimeout)
		return fmt.Errorf("redis %s: the target is closing", l)
	}
	defer func() { <-t.sem }()
	if t.client == nil {
		t.inSetup.Store(false)
		t.client = t.spec.newClient(t.clStream, &t.inSetup)
	}
	start := time.Now()
	err := t.scrape(ctx, ch)
	scrapeSecondsDesc.Send(ch, time.Since(start).Seconds(), l)
	oversizedDesc.Send(ch, float64(t.spec.oversized.Load()), l)
	budgetRefusedDesc.Send(ch, float64(t.spec.budgetRefused.Load()), l)
	var after errAfterUp
	if err == nil || errors.As(err, &after) {
		upDesc.Send(ch, 1, l)
		t.down.OK("redis target answers again")
		if err == nil {
			return nil
		}
		if downReason(after.error) == remote.ReasonProtocol {
			t.problems.Add("redis_reply", 1, after.error)
		}
		t.logger.Debug("redis scrape incomplete", "err", after.error)
		return fmt.Errorf("redis %s: %w", l, after.error)
	}
	if t.inSetup.Load() && isErrorReply(err) {
		// HELLO or AUTH got an error reply, whatever its code: -ERR or
		// -NOPERM from a proxy or an ACL, not an answer to INFO.
		err = fmt.Errorf("%w: %w", errAuthRefused, err)
	}
	reason := downReason(err)
	upDesc.Send(ch, 0, l)
	downReasonDesc.Send(ch, 1, l, reason)
	if reason == remote.ReasonProtocol {
		t.problems.Add("redis_reply", 1, err)
	}
	if !isErrorReply(err) {
		// Start the next scrape on a fresh pool: go-redis' pool would
		// otherwise keep answering with the last dial error for a while
		// after the server is back.
		t.closeClient()
	}
	t.down.Failed(downMessages[reason], reason, err)
	return fmt.Errorf("redis %s: %s: %w", l, reason, err)
}

// errAfterUp is a failure after the target answered INFO: stall_redis_up
// stays 1.
type errAfterUp struct{ error }

func (e errAfterUp) Unwrap() error { return e.error }

// isErrorReply tells a server error reply from a network or timeout error.
func isErrorReply(err error) bool {
	var re redis.Error
	return err != nil && errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// scrape sends the target's commands and series; an error after INFO
// answered is an errAfterUp.
func (t *target) scrape(ctx context.Context, ch chan<- prometheus.Metric) error {
	t.scrapes++
	memStats := replies.AtLeast(t.major, t.minor, 4, 0) && !t.noMemoryStats
	info, err := t.info(ctx)
	if err != nil {
		return err
	}
	var ms replies.MemoryStats
	var memErr error
	if memStats {
		ms, memErr = t.memoryStats(ctx)
	}
	if err := t.refreshConfig(ctx); err != nil {
		return err
	}
	clErr := t.maybeClientList(ctx, info, ms)

	t.sendInfo(ch, info, ms)
	t.sendConfig(ch)
	t.sendClientList(ch)
	t.sendRefused(ch)
	if err := errors.Join(memErr, clErr); err != nil {
		return errAfterUp{err}
	}
	return nil
}

// What a refused command takes away, for the warning, by cmd label.
var refusedEffects = map[string]string{
	cmdClientList:  "the client output-buffer aggregates (stall_redis_client_*, incident 7's signal) are not exported; allow the exporter's ACL user client|list",
	cmdConfigGet:   "the client-output-buffer-limit families are not exported; allow config|get (managed services may rename or forbid CONFIG)",
	cmdMemoryStats: "client memory is read from INFO instead; allow memory|stats",
}

// What a MEMORY STATS reply over replyLimit takes away, for the warning:
// the only command whose reply size nothing else bounds.
const memoryStatsTooLarge = "client memory is read from INFO (mem_clients_normal, 5.0+) instead until the next --redis.config-refresh-interval tries again; its db.N entries grow with every non-empty database (about 2,700 fit)"

// The commands stall_redis_command_refused reports.
const (
	cmdClientList  = "client|list"
	cmdConfigGet   = "config|get"
	cmdMemoryStats = "memory|stats"
)

// commandAnswered records whether the server answered cmd (err nil) or
// refused it: an error reply, or for MEMORY STATS a reply over replyLimit.
func (t *target) commandAnswered(cmd string, err error) {
	l := t.commands[cmd]
	if l == nil && err == nil {
		t.commands[cmd] = nil // answered, never refused: no log to keep
		return
	}
	if l == nil {
		l = collector.NewStateLog(t.logger)
		t.commands[cmd] = l
	}
	switch {
	case err == nil:
		l.OK("redis target answers "+cmd+" again", "cmd", cmd)
	case errors.Is(err, resplimit.ErrTooLarge):
		l.Failed("redis target's "+cmd+" reply is over the 1 MiB reply limit: "+memoryStatsTooLarge, remote.ReasonTooLarge, err, "cmd", cmd)
	default:
		l.Failed("redis target refused "+cmd+": "+refusedEffects[cmd], remote.ReasonErrorReply, err, "cmd", cmd)
	}
}

func (t *target) sendRefused(ch chan<- prometheus.Metric) {
	for cmd, l := range t.commands {
		v := 0.0
		if l != nil && l.Failing() {
			v = 1
		}
		refusedDesc.Send(ch, v, t.spec.label, cmd)
	}
}
