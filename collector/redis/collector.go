// Package redis is the redis collector. It scrapes every --redis.addr target
// on /metrics and any allowed target on /probe?module=redis. Every series
// carries an addr label ("redis://host:port", never credentials) so that
// several targets on one /metrics page never collide; docs/redis.md explains
// the choice.
//
// It registers the "redis" collector and /probe module in its init, so main
// only imports it.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

var (
	upDesc = collector.NewMetric("redis_up",
		"1 if the last scrape of the Redis target answered INFO within --redis.timeout, else 0 (stall_redis_down_reason says why).", prometheus.GaugeValue, "addr")
	downReasonDesc = collector.NewMetric("redis_down_reason",
		"1 for why the last scrape of a target that is down failed (connection, AUTH or reply); absent while it is up.",
		prometheus.GaugeValue, "addr", "reason")
	refusedDesc = collector.NewMetric("redis_command_refused",
		"1 if the target answered the last CLIENT LIST, CONFIG GET or MEMORY STATS with an error reply, or MEMORY STATS with a reply over 1 MiB; 0 if it answered.",
		prometheus.GaugeValue, "addr", "cmd")
	oversizedDesc = collector.NewMetric("redis_oversized_replies_total",
		"Replies refused because the size their RESP header announced exceeded its limit (--redis.max-reply-bytes for CLIENT LIST).", prometheus.CounterValue, "addr")
	budgetRefusedDesc = collector.NewMetric("redis_reply_budget_refusals_total",
		"Replies over 64 KiB dropped because the exporter-wide reply memory budget (8 MiB) stayed full until the deadline.", prometheus.CounterValue, "addr")
	scrapeSecondsDesc = collector.NewMetric("redis_scrape_duration_seconds",
		"Wall time of this target's last scrape (all commands, parsing included), as measured by the exporter.", prometheus.GaugeValue, "addr")
	infoDesc = collector.NewMetric("redis_server_info",
		"Redis server version and replication role (INFO server redis_version, INFO replication role); always 1.", prometheus.GaugeValue, "addr", "version", "role")
	uptimeDesc = collector.NewMetric("redis_uptime_seconds",
		"Seconds since the Redis server started (INFO uptime_in_seconds); a drop is a restart.", prometheus.GaugeValue, "addr")
	clientsDesc = collector.NewMetric("redis_clients_connected",
		"Client connections, replicas excluded (INFO connected_clients).", prometheus.GaugeValue, "addr")
	clientsMemDesc = collector.NewMetric("redis_clients_memory_bytes",
		"Memory used by client connections, buffers included, by type (MEMORY STATS clients.*, or INFO mem_clients_* before 4.0).",
		prometheus.GaugeValue, "addr", "type")
	recentMaxOutDesc = collector.NewMetric("redis_client_recent_max_output_buffer_bytes",
		"Largest output buffer of any client over the last seconds (INFO client_recent_max_output_buffer, 5.0+; absent before).",
		prometheus.GaugeValue, "addr")
	recentMaxInDesc = collector.NewMetric("redis_client_recent_max_input_buffer_bytes",
		"Largest query buffer of any client over the last seconds (INFO client_recent_max_input_buffer, 5.0+).", prometheus.GaugeValue, "addr")
	outputBytesDesc = collector.NewMetric("redis_output_bytes_total",
		"Bytes Redis wrote to the network, replication included (INFO total_net_output_bytes).", prometheus.CounterValue, "addr")
	inputBytesDesc = collector.NewMetric("redis_input_bytes_total",
		"Bytes Redis read from the network (INFO total_net_input_bytes).", prometheus.CounterValue, "addr")
	memUsedDesc = collector.NewMetric("redis_memory_used_bytes",
		"Memory allocated by Redis (INFO used_memory).", prometheus.GaugeValue, "addr")
	memMaxDesc = collector.NewMetric("redis_memory_max_bytes",
		"The maxmemory setting; 0 means no limit (INFO maxmemory, CONFIG GET maxmemory before 3.2).", prometheus.GaugeValue, "addr")
	datasetRatioDesc = collector.NewMetric("redis_memory_dataset_ratio",
		"Share of net memory used by the dataset, 0–1 (MEMORY STATS dataset.percentage / 100; INFO used_memory_dataset_perc).", prometheus.GaugeValue, "addr")
	evictedKeysDesc = collector.NewMetric("redis_evicted_keys_total",
		"Keys evicted because of maxmemory (INFO evicted_keys).", prometheus.CounterValue, "addr")
	evictedClientsDesc = collector.NewMetric("redis_evicted_clients_total",
		"Clients evicted because of maxmemory-clients (INFO evicted_clients, 7.0+).", prometheus.CounterValue, "addr")
	oblDisconnectsDesc = collector.NewMetric("redis_client_output_buffer_limit_disconnections_total",
		"Clients closed for exceeding client-output-buffer-limit (INFO client_output_buffer_limit_disconnections, 7.4+).", prometheus.CounterValue, "addr")
	rejectedDesc = collector.NewMetric("redis_rejected_connections_total",
		"Connections refused because of maxclients (INFO rejected_connections).", prometheus.CounterValue, "addr")
	connectionsDesc = collector.NewMetric("redis_connections_received_total",
		"Connections accepted (INFO total_connections_received).", prometheus.CounterValue, "addr")

	obLimitDesc = collector.NewMetric("redis_client_output_buffer_limit_bytes",
		"client-output-buffer-limit per class (normal|replica|pubsub) and limit (hard|soft); 0 means no limit (CONFIG GET client-output-buffer-limit, cached).",
		prometheus.GaugeValue, "addr", "class", "limit")
	obLimitSecondsDesc = collector.NewMetric("redis_client_output_buffer_limit_soft_seconds",
		"Seconds a client may stay above the soft output-buffer limit (CONFIG GET client-output-buffer-limit, cached).",
		prometheus.GaugeValue, "addr", "class")
	obUnlimitedDesc = collector.NewMetric("redis_client_output_buffer_limit_unlimited",
		"1 if neither the hard nor the soft limit bounds the class's output buffers (both 0 in CONFIG GET client-output-buffer-limit), else 0.",
		prometheus.GaugeValue, "addr", "class")

	cmdCallsDesc = collector.NewMetric("redis_commands_total",
		"Calls per command since start or CONFIG RESETSTAT (INFO commandstats calls); 7.0+ names subcommands as container|sub, e.g. cluster|nodes.",
		prometheus.CounterValue, "addr", "cmd")
	cmdSecondsDesc = collector.NewMetric("redis_command_duration_seconds_total",
		"Time spent executing each command on Redis' main thread (INFO commandstats usec / 1e6).", prometheus.CounterValue, "addr", "cmd")

	clClientsDesc = collector.NewMetric("redis_client_list_clients",
		"Clients in the last CLIENT LIST, replica connections excluded as in INFO connected_clients.", prometheus.GaugeValue, "addr")
	clOmemDesc = collector.NewMetric("redis_client_output_buffer_bytes",
		"Sum of every client's output buffer list (CLIENT LIST omem, last run).", prometheus.GaugeValue, "addr")
	clMaxOmemDesc = collector.NewMetric("redis_client_max_output_buffer_bytes",
		"The largest single client output buffer list (CLIENT LIST omem, last run).", prometheus.GaugeValue, "addr")
	clTotMemDesc = collector.NewMetric("redis_client_memory_bytes",
		"Sum of all memory used by clients (CLIENT LIST tot-mem, 6.0.9+, last run).", prometheus.GaugeValue, "addr")
	clPendingDesc = collector.NewMetric("redis_client_pending_output_clients",
		"Clients with replies waiting to be written: oll > 0 or omem > 0 (CLIENT LIST, last run).", prometheus.GaugeValue, "addr")
	clOllDesc = collector.NewMetric("redis_client_output_list_blocks",
		"Sum of reply-list blocks queued for clients (CLIENT LIST oll, last run).", prometheus.GaugeValue, "addr")
	clGroupOmemDesc = collector.NewMetric("redis_client_group_output_buffer_bytes",
		"Output buffer bytes of the top client groups with non-zero omem, the rest as group=\"other\" (CLIENT LIST omem).",
		prometheus.GaugeValue, "addr", "group")
	clGroupClientsDesc = collector.NewMetric("redis_client_group_clients",
		"Clients in each exported client group; group=\"other\" counts the rest (CLIENT LIST, last run).", prometheus.GaugeValue, "addr", "group")
	clCmdOmemDesc = collector.NewMetric("redis_client_output_buffer_by_command_bytes",
		"Output buffer bytes by the client's last command (CLIENT LIST cmd; top K with non-zero omem, cmd=\"other\" the rest, cmd=\"none\" for NULL).",
		prometheus.GaugeValue, "addr", "cmd")
	clLastRunDesc = collector.NewMetric("redis_client_list_last_run_timestamp_seconds",
		"Unix time of the last CLIENT LIST the exporter ran on this target (the age of the redis_client_* aggregates).", prometheus.GaugeValue, "addr")
	clDurationDesc = collector.NewMetric("redis_client_list_duration_seconds",
		"Time from sending the last CLIENT LIST to the end of its reply, which is aggregated as it arrives.", prometheus.GaugeValue, "addr")
	clReplyBytesDesc = collector.NewMetric("redis_client_list_reply_bytes",
		"Size of the last CLIENT LIST reply.", prometheus.GaugeValue, "addr")
	clRunsDesc = collector.NewMetric("redis_client_list_runs_total",
		"CLIENT LIST commands the exporter sent to this target since it started.", prometheus.CounterValue, "addr")
)

func init() {
	collector.Register("redis",
		"Redis memory, clients, output buffers, persistence, replication and big keys, from INFO, MEMORY STATS, CLIENT LIST, CONFIG GET and MEMORY USAGE of each --redis.addr",
		true, newCollector)
	collector.RegisterProbe("redis", newProbe)
	// go-redis' own log lines (dial retries, pool notices) would repeat
	// what stall_redis_up and our once-a-minute warning already say.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// settingsFromFlags validates the process's flags.
func settingsFromFlags() (settings, error) { return flags.settings() }

// probeAllowlistFromFlags builds the /probe allowlist from the process's
// flags.
func probeAllowlistFromFlags(conn connSettings) (*allowlist, error) { return flags.allowlist(conn) }

// scraper scrapes the --redis.addr targets concurrently.
type scraper struct {
	targets []*target
	bigkeys []*bigKeyScanner
	logger  *slog.Logger
}

func newCollector(cfg collector.Config) (collector.Collector, error) { return flags.collector(cfg) }

// collector validates the flags and builds the /metrics collector; every
// error names the flag to fix.
func (f *flagValues) collector(cfg collector.Config) (*scraper, error) {
	s, err := f.settings()
	if err != nil {
		return nil, err
	}
	// The /probe allowlist is built on the first probe; check its flags now
	// so a bad regexp stops the start instead of failing every probe.
	if _, err := f.allowlist(s.conn); err != nil {
		return nil, err
	}
	return newScraper(cfg, s, *f.addrs)
}

func newScraper(cfg collector.Config, s settings, addrs []string) (*scraper, error) {
	c := &scraper{logger: cfg.Logger}
	seen := map[string]bool{}
	for _, a := range addrs {
		spec, err := parseTarget(a, s.conn)
		if err != nil {
			return nil, fmt.Errorf("--redis.addr: %w", err)
		}
		if seen[spec.label] {
			return nil, fmt.Errorf("--redis.addr %s given twice", spec.label)
		}
		seen[spec.label] = true
		if spec.passwordInURL {
			cfg.Logger.Warn("the password in this --redis.addr is visible in the process list; prefer ?password_file= or --redis.password-file",
				"addr", spec.label)
		}
		t := newTarget(spec, s, cfg)
		c.targets = append(c.targets, t)
		if s.bigkeys.enabled {
			c.bigkeys = append(c.bigkeys, newBigKeyScanner(t, s.bigkeys, cfg))
		}
	}
	return c, nil
}

// Update implements Collector. With no target it reports ErrNoData. A
// target that is down is reported by stall_redis_up 0; the error returned
// (success 0 for the collector) names the targets that failed.
func (c *scraper) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if len(c.targets) == 0 {
		return collector.ErrNoData
	}
	errs := make([]error, len(c.targets))
	var wg sync.WaitGroup
	for i, t := range c.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.collect(ctx, ch)
		}()
	}
	wg.Wait()
	for _, b := range c.bigkeys {
		b.send(ch)
	}
	return errors.Join(errs...)
}

// Run implements Runner: the big-key scanners, when enabled.
func (c *scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range c.bigkeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.run(ctx)
		}()
	}
	wg.Wait()
}

// target is one Redis server and the state kept between its scrapes.
type target struct {
	spec     *targetSpec
	clStream *resplimit.Stream // CLIENT LIST replies, aggregated as they arrive
	s        settings
	logger   *slog.Logger
	problems *collector.Problems

	mu       sync.Mutex
	inflight *sharedRun // the run concurrent scrapes wait for; nil when idle

	sem chan struct{} // held by the run in progress, and by close

	// inSetup is true while a new connection authenticates (newClient).
	inSetup atomic.Bool

	// Guarded by sem.
	client          *redis.Client // nil until the next scrape needs it (dropConn)
	major, minor    int           // server version, 0.0 until known
	noMemoryStats   bool
	cfgFetched      time.Time
	cfgLimits       []replies.OutputBufferLimit
	cfgMaxmemory    float64
	cfgHasMaxmemory bool
	scrapes         uint64
	agg             replies.Aggregator
	cl              clientListResult
	lastDownLog     time.Time
	lastDownReason  string
	untrackedLogged bool            // CLIENT LIST had more than replies.MaxGroups groups
	refused         map[string]bool // by command: the last attempt got an error reply
	refusedWarned   map[string]bool // the refusal was logged at warn level
}

// What a refused command takes away, for the warning; by the cmd label
// value (Redis' own command|subcommand name).
var refusedEffects = map[string]string{
	cmdClientList:  "the client output-buffer aggregates (stall_redis_client_*, incident 7's signal) are not exported; allow the exporter's ACL user client|list",
	cmdConfigGet:   "the client-output-buffer-limit families are not exported; allow config|get (managed services may rename or forbid CONFIG)",
	cmdMemoryStats: "client memory is read from INFO instead; allow memory|stats",
}

// What a reply over replyLimit takes away, for the warning; by the cmd
// label value. Only commands whose reply size the exporter does not bound
// by other means are listed.
var tooLargeEffects = map[string]string{
	cmdMemoryStats: "client memory is read from INFO (mem_clients_normal, 5.0+) instead until the next --redis.config-refresh-interval tries again; its db.N entries grow with every non-empty database (about 2,700 fit)",
}

// The commands stall_redis_command_refused reports.
const (
	cmdClientList  = "client|list"
	cmdConfigGet   = "config|get"
	cmdMemoryStats = "memory|stats"
)

// commandAnswered records whether the server answered cmd (err nil) or
// refused it with an error reply (or, for MEMORY STATS, a reply over
// replyLimit). A refusal is logged at warn level once
// per command until the command is answered again, repeats at debug level.
func (t *target) commandAnswered(cmd string, err error) {
	if t.refused == nil {
		t.refused, t.refusedWarned = map[string]bool{}, map[string]bool{}
	}
	if err == nil {
		if t.refused[cmd] {
			t.logger.Info("redis target answers "+cmd+" again", "cmd", cmd)
		}
		t.refused[cmd], t.refusedWarned[cmd] = false, false
		return
	}
	t.refused[cmd] = true
	msg := "redis target refused " + cmd + ": " + refusedEffects[cmd]
	if errors.Is(err, resplimit.ErrTooLarge) {
		msg = "redis target's " + cmd + " reply is over the 1 MiB reply limit: " + tooLargeEffects[cmd]
	}
	if t.refusedWarned[cmd] {
		t.logger.Debug(msg, "cmd", cmd, "err", err)
		return
	}
	t.refusedWarned[cmd] = true
	t.logger.Warn(msg+" (repeats are logged at debug level)", "cmd", cmd, "err", err)
}

func (t *target) sendRefused(ch chan<- prometheus.Metric) {
	for cmd, refused := range t.refused {
		v := 0.0
		if refused {
			v = 1
		}
		refusedDesc.Send(ch, v, t.spec.label, cmd)
	}
}

// sharedRun is one scrape of a target whose result every scrape that
// arrived while it ran receives.
type sharedRun struct {
	done    chan struct{} // closed when metrics and err are final
	metrics []prometheus.Metric
	err     error
}

type clientListResult struct {
	have       bool
	triggered  bool // the last run was started by a threshold
	at         time.Time
	duration   time.Duration
	replyBytes int64
	runs       uint64
	stats      replies.ClientListStats
}

func newTarget(spec *targetSpec, s settings, cfg collector.Config) *target {
	return &target{
		spec:     spec,
		clStream: spec.newClientListStream(),
		s:        s,
		logger:   cfg.Logger.With("addr", spec.label),
		problems: cfg.Problems,
		sem:      make(chan struct{}, 1),
		agg:      replies.Aggregator{GroupBy: s.groupBy, TopK: s.topK},
	}
}

// close waits for a running scrape to finish, then closes the connection
// pool; the target must not be used afterwards (a later collect waits for
// its deadline and reports it down).
func (t *target) close() {
	t.sem <- struct{}{}
	t.closeClient()
}

// dropConn closes the target's connection unless a scrape is using it; the
// next scrape opens a new one. It reports whether the target is now
// without a connection.
func (t *target) dropConn() bool {
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
// in every case, before ctx's deadline. Scrapes of the same target that
// arrive while one runs do not start their own: they wait for that run
// and send its series and error. Whoever can reach the exporter therefore
// cannot multiply the INFO and CLIENT LIST work done on Redis' main
// thread by sending concurrent requests.
func (t *target) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	tctx, cancel := context.WithDeadline(ctx, collector.ScrapeDeadline(ctx, time.Now(), t.s.timeout))
	defer cancel()
	t.mu.Lock()
	r := t.inflight
	leader := r == nil
	if leader {
		r = &sharedRun{done: make(chan struct{})}
		t.inflight = r
	}
	t.mu.Unlock()
	if leader {
		r.metrics, r.err = t.run(tctx)
		t.mu.Lock()
		t.inflight = nil
		t.mu.Unlock()
		close(r.done)
	} else {
		select {
		case <-r.done:
		case <-tctx.Done():
			upDesc.Send(ch, 0, t.spec.label)
			downReasonDesc.Send(ch, 1, t.spec.label, remote.ReasonTimeout)
			return fmt.Errorf("redis %s: the scrape in progress did not end within this scrape's time limit", t.spec.label)
		}
	}
	for _, m := range r.metrics {
		ch <- m
	}
	return r.err
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
	err := t.runLocked(ctx, buf)
	close(buf)
	<-collected
	return metrics, err
}

func (t *target) runLocked(ctx context.Context, ch chan<- prometheus.Metric) error {
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
	if errors.As(err, &after) {
		upDesc.Send(ch, 1, l)
		if downReason(after.error) == reasonProtocol {
			t.problems.Add("redis reply", 1, after.error)
		}
		t.logger.Debug("redis scrape incomplete", "err", after.error)
		return fmt.Errorf("redis %s: %w", l, after.error)
	}
	if err != nil {
		if t.inSetup.Load() && isErrorReply(err) {
			// HELLO or AUTH got an error reply, whatever its code: -ERR
			// or -NOPERM from a proxy or an ACL, not an answer to INFO.
			err = fmt.Errorf("%w: %w", errAuthRefused, err)
		}
		reason := downReason(err)
		upDesc.Send(ch, 0, l)
		downReasonDesc.Send(ch, 1, l, reason)
		if reason == reasonProtocol {
			t.problems.Add("redis reply", 1, err)
		}
		if !isErrorReply(err) {
			// Start the next scrape on a fresh pool: go-redis' pool would
			// otherwise keep answering with the last dial error for a while
			// after the server is back.
			t.closeClient()
		}
		now := t.s.now()
		// A flapping target logs at most once a minute; a new reason (a
		// password change after a network outage) at once.
		if reason != t.lastDownReason || now.Sub(t.lastDownLog) > time.Minute {
			t.lastDownLog, t.lastDownReason = now, reason
			t.logger.Warn(downMessages[reason]+" (the same reason is logged at most once a minute)", "reason", reason, "err", err)
		}
		return fmt.Errorf("redis %s: %s: %w", l, reason, err)
	}
	upDesc.Send(ch, 1, l)
	return nil
}

// isErrorReply tells a server error reply (unknown command, NOPERM) from a
// network or timeout error.
func isErrorReply(err error) bool {
	var re redis.Error
	return err != nil && errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

func (t *target) scrape(ctx context.Context, ch chan<- prometheus.Metric) error {
	t.scrapes++

	// One round trip: INFO (+ commandstats). MEMORY STATS gets its own,
	// after it (memoryStats): its reply grows with every non-empty database,
	// so in the same pipeline a server with a few thousand of them would
	// take INFO, and the target, over replyLimit.
	memStats := replies.AtLeast(t.major, t.minor, 4, 0) && !t.noMemoryStats
	pipe := t.client.Pipeline()
	var infoCmds []*redis.StringCmd
	if replies.AtLeast(t.major, t.minor, 7, 0) {
		infoCmds = append(infoCmds, pipe.Info(ctx, "server", "clients", "memory", "stats", "replication", "commandstats"))
	} else {
		infoCmds = append(infoCmds, pipe.Info(ctx), pipe.Info(ctx, "commandstats"))
	}
	_, execErr := pipe.Exec(ctx)
	if execErr != nil && !isErrorReply(execErr) {
		return execErr
	}
	if err := infoCmds[0].Err(); err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	if infoCmds[0].Val() == "" {
		// The connection's AUTH/HELLO was refused: nothing was sent.
		if execErr != nil {
			return execErr
		}
		return errEmptyInfo
	}
	info := replies.ParseInfo(infoCmds[0].Val())
	for _, c := range infoCmds[1:] {
		if c.Err() == nil {
			more := replies.ParseInfo(c.Val())
			n := min(len(more.Commands), max(replies.MaxInfoCommands-len(info.Commands), 0))
			info.Commands = append(info.Commands, more.Commands[:n]...)
			info.Malformed += more.Malformed
			info.Dropped += more.Dropped + len(more.Commands) - n
		}
	}
	t.problems.Add("redis INFO line", info.Malformed, errors.New("INFO line without key:value"))
	t.problems.Add("redis INFO size", info.Dropped, fmt.Errorf("INFO has more than %d fields, %d commands or %d databases; the rest is ignored",
		replies.MaxInfoFields, replies.MaxInfoCommands, replies.MaxInfoDatabases))
	known := t.major != 0
	t.major, t.minor = info.Version()
	if !known && t.major == 0 {
		t.problems.Add("redis version", 1, errors.New("INFO has no readable redis_version"))
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
	// INFO answered, so the target is up; the collector still reports
	// the failure.
	if err := errors.Join(memErr, clErr); err != nil {
		return errAfterUp{err}
	}
	return nil
}

// memoryStats sends MEMORY STATS in a round trip of its own and parses
// the reply. An error reply (renamed, NOPERM, a proxy without it) and a
// reply over replyLimit both leave t.noMemoryStats set until the next
// config refresh, and the client memory is read from INFO meanwhile: the
// reply is 387 bytes longer, as resplimit counts it, for every non-empty
// database (Redis 7.0: 3 kB with 1, 388 kB with 1,000, 1.5 MB with 4,000),
// so replyLimit holds about 2,700. The oversized reply is counted in
// stall_redis_oversized_replies_total and costs its connection; the next
// command opens a new one. Any other error (network, timeout, reply
// memory budget) is returned, wrapped.
func (t *target) memoryStats(ctx context.Context) (replies.MemoryStats, error) {
	var ms replies.MemoryStats
	v, err := t.client.Do(ctx, "MEMORY", "STATS").Result()
	switch {
	case isErrorReply(err) || errors.Is(err, resplimit.ErrTooLarge):
		t.noMemoryStats = true
		t.commandAnswered(cmdMemoryStats, err)
		return ms, nil
	case err != nil:
		return ms, fmt.Errorf("MEMORY STATS: %w", err)
	}
	t.commandAnswered(cmdMemoryStats, nil)
	ms, err = replies.ParseMemoryStats(v)
	if err != nil {
		t.problems.Add("redis MEMORY STATS", 1, err)
	}
	t.problems.Add("redis MEMORY STATS value", ms.Malformed, errors.New("MEMORY STATS value is not a number"))
	return ms, nil
}

// errEmptyInfo is an INFO reply without a single field.
var errEmptyInfo = fmt.Errorf("%w: empty INFO reply", resplimit.ErrProtocol)

// errAfterUp is a failure after the target answered INFO: stall_redis_up
// stays 1.
type errAfterUp struct{ error }

func (e errAfterUp) Unwrap() error { return e.error }

func (t *target) sendInfo(ch chan<- prometheus.Metric, in replies.Info, ms replies.MemoryStats) {
	l := t.spec.label
	role := in.Fields["role"]
	if v := in.Fields["redis_version"]; v != "" {
		infoDesc.Send(ch, 1, l, labelValue(v), labelValue(role))
	}
	field := func(m collector.Metric, key string, scale float64) {
		if v, ok := in.Float(key); ok {
			m.Send(ch, v*scale, l)
		}
	}
	field(uptimeDesc, "uptime_in_seconds", 1)
	field(clientsDesc, "connected_clients", 1)
	if ms.HasClients {
		clientsMemDesc.Send(ch, ms.ClientsNormal, l, "normal")
		clientsMemDesc.Send(ch, ms.ClientsReplicas, l, "replica")
	} else {
		if v, ok := in.Float("mem_clients_normal"); ok {
			clientsMemDesc.Send(ch, v, l, "normal")
		}
		if v, ok := in.Float("mem_clients_slaves"); ok {
			clientsMemDesc.Send(ch, v, l, "replica")
		}
	}
	field(recentMaxOutDesc, "client_recent_max_output_buffer", 1)
	field(recentMaxInDesc, "client_recent_max_input_buffer", 1)
	field(outputBytesDesc, "total_net_output_bytes", 1)
	field(inputBytesDesc, "total_net_input_bytes", 1)
	field(memUsedDesc, "used_memory", 1)
	if _, ok := in.Fields["maxmemory"]; ok {
		field(memMaxDesc, "maxmemory", 1)
	} else if t.cfgHasMaxmemory {
		memMaxDesc.Send(ch, t.cfgMaxmemory, l)
	}
	if ms.HasDataset {
		datasetRatioDesc.Send(ch, ms.DatasetPercentage/100, l)
	} else if s, ok := in.Fields["used_memory_dataset_perc"]; ok {
		if v, err := strconv.ParseFloat(trimPercent(s), 64); err == nil {
			datasetRatioDesc.Send(ch, v/100, l)
		}
	}
	field(evictedKeysDesc, "evicted_keys", 1)
	field(evictedClientsDesc, "evicted_clients", 1)
	field(oblDisconnectsDesc, "client_output_buffer_limit_disconnections", 1)
	field(rejectedDesc, "rejected_connections", 1)
	field(connectionsDesc, "total_connections_received", 1)
	seen := make(map[string]bool, len(in.Commands))
	for _, c := range in.Commands {
		name := labelValue(c.Name)
		if seen[name] {
			continue // a proxy that repeats commandstats would duplicate series
		}
		seen[name] = true
		cmdCallsDesc.Send(ch, float64(c.Calls), l, name)
		cmdSecondsDesc.Send(ch, float64(c.Usec)/1e6, l, name)
	}
}

// labelValue makes a value that came from the server (a command, client
// or library name, a version string) a valid label value of at most
// collector.MaxLabelBytes (+ "…"). CLIENT LIST group and command names come
// from the aggregator in that form already; for them it is the identity.
func labelValue(s string) string { return collector.LabelValue(s, collector.MaxLabelBytes) }

func trimPercent(s string) string {
	if n := len(s); n > 0 && s[n-1] == '%' {
		return s[:n-1]
	}
	return s
}

// refreshConfig re-reads the cached CONFIG values when they are older than
// --redis.config-refresh-interval. A server that refuses CONFIG (renamed,
// ACL, managed service) leaves the limits unknown without failing the
// scrape; a network error fails it.
func (t *target) refreshConfig(ctx context.Context) error {
	now := t.s.now()
	if !t.cfgFetched.IsZero() && now.Sub(t.cfgFetched) < t.s.configRefresh {
		return nil
	}
	pipe := t.client.Pipeline()
	obl := pipe.ConfigGet(ctx, "client-output-buffer-limit")
	var mm *redis.MapStringStringCmd
	if !replies.AtLeast(t.major, t.minor, 3, 2) {
		mm = pipe.ConfigGet(ctx, "maxmemory")
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !isErrorReply(err) {
		return fmt.Errorf("CONFIG GET: %w", err)
	}
	t.cfgFetched = now
	t.cfgLimits = nil
	t.noMemoryStats = false // try MEMORY STATS again (ACL or server may have changed)
	t.commandAnswered(cmdConfigGet, obl.Err())
	if v, ok := obl.Val()["client-output-buffer-limit"]; obl.Err() == nil && ok {
		limits, err := replies.ParseOutputBufferLimits(v)
		if err != nil {
			t.problems.Add("redis client-output-buffer-limit", 1, err)
		}
		t.cfgLimits = limits
	}
	t.cfgHasMaxmemory = false
	if mm != nil && mm.Err() == nil {
		if v, ok := mm.Val()["maxmemory"]; ok {
			if n, err := replies.ParseMemory(v); err == nil {
				t.cfgMaxmemory, t.cfgHasMaxmemory = float64(n), true
			}
		}
	}
	return nil
}

func (t *target) sendConfig(ch chan<- prometheus.Metric) {
	l := t.spec.label
	for _, lim := range t.cfgLimits {
		obLimitDesc.Send(ch, float64(lim.HardBytes), l, lim.Class, "hard")
		obLimitDesc.Send(ch, float64(lim.SoftBytes), l, lim.Class, "soft")
		obLimitSecondsDesc.Send(ch, float64(lim.SoftSeconds), l, lim.Class)
		unlimited := 0.0
		if lim.Unlimited() {
			unlimited = 1
		}
		obUnlimitedDesc.Send(ch, unlimited, l, lim.Class)
	}
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
	if v, ok := in.Float("client_recent_max_output_buffer"); ok && v >= float64(t.s.clOutThreshold) {
		triggered = true
	} else if v, ok := in.Float("client_longest_output_list"); ok && v > 0 {
		// Before 5.0 the only hint is the longest reply list, in nodes;
		// one node can hold a whole multi-megabyte reply (incident 7 had
		// oll=1), so any queued reply is worth a look.
		triggered = true
	}
	clientsMem, ok := ms.ClientsNormal, ms.HasClients
	if !ok {
		clientsMem, ok = in.Float("mem_clients_normal")
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
	start := t.s.now()
	// The reply is aggregated as it arrives (resplimit.Stream): a CLIENT
	// LIST of 100,000 clients is 30–45 MB, which go-redis would hold whole.
	t.agg.Begin(0)
	t.clStream.Arm(&t.agg)
	reply, err := t.client.ClientList(ctx).Result()
	t.clStream.Disarm()
	took := t.s.now().Sub(start)
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
	var st replies.ClientListStats
	if reply != "" {
		// Not streamed (read whole, within replyLimit): only if go-redis
		// ever writes the command differently from what Stream expects.
		st = t.agg.Aggregate(reply)
	} else {
		st = t.agg.Finish()
	}
	t.problems.Add("redis CLIENT LIST", st.Malformed, errors.New("CLIENT LIST line or field not in field=value form, or longer than 64 KiB"))
	if st.Untracked > 0 && !t.untrackedLogged {
		t.untrackedLogged = true
		t.logger.Info(fmt.Sprintf("CLIENT LIST has more than %d distinct client groups or commands: clients of later ones without pending output are counted in group=\"other\", "+
			"so exported client counts may be low; past %d with pending output the smallest are moved to \"other\" (the top groups are exact unless a group's clients are scattered; totals stay exact); "+
			"--redis.client-group-by=pool groups pods and numbered workers", replies.MaxGroups, 2*replies.MaxGroups),
			"untracked_clients", st.Untracked)
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
	for _, g := range st.Groups {
		name := labelValue(g.Name)
		clGroupOmemDesc.Send(ch, float64(g.OutputBufferBytes), l, name)
		clGroupClientsDesc.Send(ch, float64(g.Clients), l, name)
	}
	for _, g := range st.Commands {
		clCmdOmemDesc.Send(ch, float64(g.OutputBufferBytes), l, labelValue(g.Name))
	}
}
