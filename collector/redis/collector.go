package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/reply"
)

// The redis collector scrapes every --redis.addr target on /metrics and any
// allowed target on /probe?module=redis. Every series carries an addr label
// ("redis://host:port", never credentials) so that several targets on one
// /metrics page never collide; docs/redis.md explains the choice.

var (
	redisAddrs = kingpin.Flag("redis.addr",
		"Redis target scraped on /metrics (repeatable): host:port, redis://[user@]host:port, rediss://… (TLS), unix:///path.sock. "+
			"Per-target options: ?password_file=PATH or ?password_env=VAR (credentials), ?bigkeys_replica=HOST:PORT. Without any target, the redis collector reports no data.").Strings()
	redisUser         = kingpin.Flag("redis.user", "ACL user name for targets that do not name one (Redis 6+).").Default("").String()
	redisPasswordFile = kingpin.Flag("redis.password-file", "File holding the password of targets without their own password source; read on every new connection.").Default("").String()
	redisPasswordEnv  = kingpin.Flag("redis.password-env", "Environment variable holding the password of targets without their own password source.").Default("").String()
	redisTLSCA        = kingpin.Flag("redis.tls.ca-file", "CA bundle (PEM) that verifies rediss:// servers; default: system roots.").Default("").String()
	redisTLSCert      = kingpin.Flag("redis.tls.cert-file", "Client certificate (PEM) for rediss:// targets that require one.").Default("").String()
	redisTLSKey       = kingpin.Flag("redis.tls.key-file", "Key (PEM) of --redis.tls.cert-file.").Default("").String()
	redisTLSServer    = kingpin.Flag("redis.tls.server-name", "Server name expected in the certificate of rediss:// targets; default: the target host.").Default("").String()
	redisTLSInsecure  = kingpin.Flag("redis.tls.insecure-skip-verify", "Do not verify rediss:// server certificates (testing only).").Default("false").Bool()
	redisDialTimeout  = kingpin.Flag("redis.dial-timeout", "Time limit for connecting to a target (TCP, TLS and AUTH).").Default("2s").Duration()
	redisTimeout      = kingpin.Flag("redis.timeout",
		"Time limit of one target's scrape (every command); a target that does not answer within it reports stall_redis_up 0. Also capped by --collector.timeout.").
		Default("3s").Duration()
	redisConfigRefresh = kingpin.Flag("redis.config-refresh-interval",
		"How long CONFIG GET client-output-buffer-limit / maxmemory results are reused.").Default("5m").Duration()
	redisCLMode = kingpin.Flag("redis.client-list.mode",
		"When to run CLIENT LIST (O(clients) on Redis' main thread): auto (when INFO shows non-trivial output buffers, once more after they shrink, and every Nth scrape), always, never.").
		Default("auto").Enum("auto", "always", "never")
	redisCLEvery = kingpin.Flag("redis.client-list.every",
		"In auto mode, also run CLIENT LIST on every Nth scrape of a target; 0 disables the periodic run.").Default("10").Int()
	redisCLOutputThreshold = kingpin.Flag("redis.client-list.output-buffer-threshold",
		"In auto mode, run CLIENT LIST when INFO client_recent_max_output_buffer reaches this many bytes.").Default("1MiB").Bytes()
	redisCLClientsMemThreshold = kingpin.Flag("redis.client-list.clients-memory-threshold",
		"In auto mode, run CLIENT LIST when the memory of normal clients (MEMORY STATS clients.normal / INFO mem_clients_normal) reaches this many bytes.").
		Default("512MiB").Bytes()
	redisGroupBy = kingpin.Flag("redis.client-group-by",
		"Client attribute CLIENT LIST aggregates are grouped by: host (peer IP), name, lib-name (7.2+) or user (6.0+).").
		Default("host").Enum(redisx.GroupByNames...)
	redisTopK = kingpin.Flag("redis.client-list.top-k",
		"Number of client groups and of last commands exported by output-buffer size; the rest is summed in group/cmd=\"other\".").Default("10").Int()
	redisProbeAllowed = kingpin.Flag("redis.probe.allowed-targets",
		"Target allowed on /probe?module=redis (repeatable; --redis.addr syntax). --redis.addr targets are always allowed. "+
			"A probe request names host:port only; the scheme, TLS settings and user configured here are used.").Strings()
	redisProbeAllowedRE = kingpin.Flag("redis.probe.allowed-targets-regexp",
		"Anchored regular expression over host:port (or the socket path) of targets allowed on /probe?module=redis.").Default("").String()
	redisProbeScheme = kingpin.Flag("redis.probe.scheme",
		"Scheme of targets allowed only by --redis.probe.allowed-targets-regexp: redis or rediss (TLS, --redis.tls.*).").Default("redis").Enum("redis", "rediss")
)

var (
	redisUpDesc = collector.NewMetric("redis_up",
		"1 if the last scrape of the Redis target answered INFO within --redis.timeout, else 0.", prometheus.GaugeValue, "addr")
	redisScrapeSecondsDesc = collector.NewMetric("redis_scrape_duration_seconds",
		"Wall time of this target's last scrape (all commands, parsing included), as measured by the exporter.", prometheus.GaugeValue, "addr")
	redisInfoDesc = collector.NewMetric("redis_server_info",
		"Redis server version and replication role (INFO server redis_version, INFO replication role); always 1.", prometheus.GaugeValue, "addr", "version", "role")
	redisUptimeDesc = collector.NewMetric("redis_uptime_seconds",
		"Seconds since the Redis server started (INFO uptime_in_seconds); a drop is a restart.", prometheus.GaugeValue, "addr")
	redisClientsDesc = collector.NewMetric("redis_clients_connected",
		"Client connections, replicas excluded (INFO connected_clients).", prometheus.GaugeValue, "addr")
	redisClientsMemDesc = collector.NewMetric("redis_clients_memory_bytes",
		"Memory used by client connections, buffers included, by type normal|replica (MEMORY STATS clients.normal/clients.slaves, 4.0+; INFO mem_clients_normal/mem_clients_slaves otherwise).",
		prometheus.GaugeValue, "addr", "type")
	redisRecentMaxOutDesc = collector.NewMetric("redis_client_recent_max_output_buffer_bytes",
		"Largest output buffer of any client over the last seconds (INFO client_recent_max_output_buffer, 5.0+; absent before).",
		prometheus.GaugeValue, "addr")
	redisRecentMaxInDesc = collector.NewMetric("redis_client_recent_max_input_buffer_bytes",
		"Largest query buffer of any client over the last seconds (INFO client_recent_max_input_buffer, 5.0+).", prometheus.GaugeValue, "addr")
	redisOutputBytesDesc = collector.NewMetric("redis_output_bytes_total",
		"Bytes Redis wrote to the network, replication included (INFO total_net_output_bytes).", prometheus.CounterValue, "addr")
	redisInputBytesDesc = collector.NewMetric("redis_input_bytes_total",
		"Bytes Redis read from the network (INFO total_net_input_bytes).", prometheus.CounterValue, "addr")
	redisMemUsedDesc = collector.NewMetric("redis_memory_used_bytes",
		"Memory allocated by Redis (INFO used_memory).", prometheus.GaugeValue, "addr")
	redisMemMaxDesc = collector.NewMetric("redis_memory_max_bytes",
		"The maxmemory setting; 0 means no limit (INFO maxmemory, CONFIG GET maxmemory before 3.2).", prometheus.GaugeValue, "addr")
	redisDatasetRatioDesc = collector.NewMetric("redis_memory_dataset_ratio",
		"Share of net memory used by the dataset, 0–1 (MEMORY STATS dataset.percentage / 100; INFO used_memory_dataset_perc).", prometheus.GaugeValue, "addr")
	redisEvictedKeysDesc = collector.NewMetric("redis_evicted_keys_total",
		"Keys evicted because of maxmemory (INFO evicted_keys).", prometheus.CounterValue, "addr")
	redisEvictedClientsDesc = collector.NewMetric("redis_evicted_clients_total",
		"Clients evicted because of maxmemory-clients (INFO evicted_clients, 7.0+).", prometheus.CounterValue, "addr")
	redisOBLDisconnectsDesc = collector.NewMetric("redis_client_output_buffer_limit_disconnections_total",
		"Clients closed for exceeding client-output-buffer-limit (INFO client_output_buffer_limit_disconnections, 7.4+).", prometheus.CounterValue, "addr")
	redisRejectedDesc = collector.NewMetric("redis_rejected_connections_total",
		"Connections refused because of maxclients (INFO rejected_connections).", prometheus.CounterValue, "addr")
	redisConnectionsDesc = collector.NewMetric("redis_connections_received_total",
		"Connections accepted (INFO total_connections_received).", prometheus.CounterValue, "addr")

	redisOBLimitDesc = collector.NewMetric("redis_client_output_buffer_limit_bytes",
		"client-output-buffer-limit per class (normal|replica|pubsub) and limit (hard|soft); 0 means no limit (CONFIG GET client-output-buffer-limit, cached).",
		prometheus.GaugeValue, "addr", "class", "limit")
	redisOBLimitSecondsDesc = collector.NewMetric("redis_client_output_buffer_limit_soft_seconds",
		"Seconds a client may stay above the soft output-buffer limit (CONFIG GET client-output-buffer-limit, cached).",
		prometheus.GaugeValue, "addr", "class")
	redisOBUnlimitedDesc = collector.NewMetric("redis_client_output_buffer_limit_unlimited",
		"1 if neither the hard nor the soft limit bounds the class's output buffers (both 0 in CONFIG GET client-output-buffer-limit), else 0.",
		prometheus.GaugeValue, "addr", "class")

	redisCmdCallsDesc = collector.NewMetric("redis_commands_total",
		"Calls per command since start or CONFIG RESETSTAT (INFO commandstats calls); 7.0+ names subcommands as container|sub, e.g. cluster|nodes.",
		prometheus.CounterValue, "addr", "cmd")
	redisCmdSecondsDesc = collector.NewMetric("redis_command_duration_seconds_total",
		"Time spent executing each command on Redis' main thread (INFO commandstats usec / 1e6).", prometheus.CounterValue, "addr", "cmd")

	redisCLClientsDesc = collector.NewMetric("redis_client_list_clients",
		"Clients in the last CLIENT LIST; replica connections (flags S) are excluded here and from every redis_client_* aggregate, as INFO connected_clients excludes them.", prometheus.GaugeValue, "addr")
	redisCLOmemDesc = collector.NewMetric("redis_client_output_buffer_bytes",
		"Sum of every client's output buffer list (CLIENT LIST omem, last run).", prometheus.GaugeValue, "addr")
	redisCLMaxOmemDesc = collector.NewMetric("redis_client_max_output_buffer_bytes",
		"The largest single client output buffer list (CLIENT LIST omem, last run).", prometheus.GaugeValue, "addr")
	redisCLTotMemDesc = collector.NewMetric("redis_client_memory_bytes",
		"Sum of all memory used by clients (CLIENT LIST tot-mem, 6.0+, last run).", prometheus.GaugeValue, "addr")
	redisCLPendingDesc = collector.NewMetric("redis_client_pending_output_clients",
		"Clients with replies waiting to be written: oll > 0 or omem > 0 (CLIENT LIST, last run).", prometheus.GaugeValue, "addr")
	redisCLOllDesc = collector.NewMetric("redis_client_output_list_blocks",
		"Sum of reply-list blocks queued for clients (CLIENT LIST oll, last run).", prometheus.GaugeValue, "addr")
	redisCLGroupOmemDesc = collector.NewMetric("redis_client_group_output_buffer_bytes",
		"Output buffer bytes of the top --redis.client-list.top-k client groups (--redis.client-group-by) with non-zero omem; group=\"other\" sums the rest (CLIENT LIST omem, last run).",
		prometheus.GaugeValue, "addr", "group")
	redisCLGroupClientsDesc = collector.NewMetric("redis_client_group_clients",
		"Clients in each exported client group; group=\"other\" counts the rest (CLIENT LIST, last run).", prometheus.GaugeValue, "addr", "group")
	redisCLCmdOmemDesc = collector.NewMetric("redis_client_output_buffer_by_command_bytes",
		"Output buffer bytes by the client's last command (CLIENT LIST cmd; top K with non-zero omem, cmd=\"other\" the rest, cmd=\"none\" for NULL).",
		prometheus.GaugeValue, "addr", "cmd")
	redisCLLastRunDesc = collector.NewMetric("redis_client_list_last_run_timestamp_seconds",
		"Unix time of the last CLIENT LIST the exporter ran on this target (the age of the redis_client_* aggregates).", prometheus.GaugeValue, "addr")
	redisCLDurationDesc = collector.NewMetric("redis_client_list_duration_seconds",
		"Round-trip time of the last CLIENT LIST, parsing excluded.", prometheus.GaugeValue, "addr")
	redisCLReplyBytesDesc = collector.NewMetric("redis_client_list_reply_bytes",
		"Size of the last CLIENT LIST reply.", prometheus.GaugeValue, "addr")
	redisCLRunsDesc = collector.NewMetric("redis_client_list_runs_total",
		"CLIENT LIST commands the exporter sent to this target since it started.", prometheus.CounterValue, "addr")
)

func init() {
	collector.Register("redis", true, newRedisCollector)
	collector.RegisterProbe("redis", newRedisProbe)
	// go-redis' own log lines (dial retries, pool notices) would repeat
	// what stall_redis_up and our once-a-minute warning already say.
	redis.SetLogger(quietRedisLogger{})
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

// redisSettings is everything the flags decide, read once.
type redisSettings struct {
	conn            redisConnSettings
	timeout         time.Duration
	configRefresh   time.Duration
	clMode          string
	clEvery         int
	clOutThreshold  uint64
	clClientsMemThr uint64
	groupBy         redisx.GroupBy
	topK            int
	bigkeys         bigKeySettings
	now             func() time.Time
}

func redisSettingsFromFlags() (redisSettings, error) {
	switch {
	case *redisTimeout <= 0:
		return redisSettings{}, fmt.Errorf("--redis.timeout must be positive, not %v", *redisTimeout)
	case *redisDialTimeout <= 0:
		return redisSettings{}, fmt.Errorf("--redis.dial-timeout must be positive, not %v", *redisDialTimeout)
	case *redisConfigRefresh <= 0:
		return redisSettings{}, fmt.Errorf("--redis.config-refresh-interval must be positive, not %v", *redisConfigRefresh)
	case *redisTopK < 1:
		return redisSettings{}, fmt.Errorf("--redis.client-list.top-k must be at least 1, not %d", *redisTopK)
	case *redisCLEvery < 0:
		return redisSettings{}, fmt.Errorf("--redis.client-list.every must be 0 or more, not %d", *redisCLEvery)
	}
	gb, err := redisx.ParseGroupBy(*redisGroupBy)
	if err != nil {
		return redisSettings{}, err
	}
	bk, err := bigKeySettingsFromFlags()
	if err != nil {
		return redisSettings{}, err
	}
	return redisSettings{
		conn: redisConnSettings{
			user: *redisUser, passwordFile: *redisPasswordFile, passwordEnv: *redisPasswordEnv,
			dialTimeout: *redisDialTimeout,
			tls: redisTLSSettings{caFile: *redisTLSCA, certFile: *redisTLSCert, keyFile: *redisTLSKey,
				serverName: *redisTLSServer, insecureSkipVerify: *redisTLSInsecure},
		},
		timeout:         *redisTimeout,
		configRefresh:   *redisConfigRefresh,
		clMode:          *redisCLMode,
		clEvery:         *redisCLEvery,
		clOutThreshold:  uint64(*redisCLOutputThreshold),
		clClientsMemThr: uint64(*redisCLClientsMemThreshold),
		groupBy:         gb,
		topK:            *redisTopK,
		bigkeys:         bk,
		now:             time.Now,
	}, nil
}

// redisCollector scrapes the --redis.addr targets concurrently.
type redisCollector struct {
	targets []*redisTarget
	bigkeys []*bigKeyScanner
	logger  *slog.Logger
}

func newRedisCollector(cfg collector.Config) (collector.Collector, error) {
	s, err := redisSettingsFromFlags()
	if err != nil {
		return nil, err
	}
	// The /probe allowlist is built on the first probe; check its flags now
	// so a bad regexp stops the start instead of failing every probe.
	if _, err := redisProbeAllowlistFromFlags(s.conn); err != nil {
		return nil, err
	}
	return newRedisCollectorFor(cfg, s, *redisAddrs)
}

func newRedisCollectorFor(cfg collector.Config, s redisSettings, addrs []string) (*redisCollector, error) {
	c := &redisCollector{logger: cfg.Logger}
	seen := map[string]bool{}
	for _, a := range addrs {
		spec, err := parseRedisTarget(a, s.conn)
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
		t := newRedisTarget(spec, s, cfg)
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
func (c *redisCollector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
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
func (c *redisCollector) Run(ctx context.Context) {
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

// Close releases the targets' connections.
func (c *redisCollector) Close() {
	for _, t := range c.targets {
		t.close()
	}
}

// redisTarget is one Redis server and the state kept between its scrapes.
type redisTarget struct {
	spec     *redisTargetSpec
	client   *redis.Client
	s        redisSettings
	logger   *slog.Logger
	problems *collector.Problems

	sem chan struct{} // one scrape at a time

	// Guarded by sem.
	major, minor    int // server version, 0.0 until known
	noMemoryStats   bool
	cfgFetched      time.Time
	cfgLimits       []redisx.OutputBufferLimit
	cfgMaxmemory    float64
	cfgHasMaxmemory bool
	scrapes         uint64
	agg             redisx.Aggregator
	cl              clientListResult
	lastDownLog     time.Time
}

type clientListResult struct {
	have       bool
	triggered  bool // the last run was started by a threshold
	at         time.Time
	duration   time.Duration
	replyBytes int
	runs       uint64
	stats      redisx.ClientListStats
}

func newRedisTarget(spec *redisTargetSpec, s redisSettings, cfg collector.Config) *redisTarget {
	return &redisTarget{
		spec:     spec,
		client:   spec.newClient(),
		s:        s,
		logger:   cfg.Logger.With("addr", spec.label),
		problems: cfg.Problems,
		sem:      make(chan struct{}, 1),
		agg:      redisx.Aggregator{GroupBy: s.groupBy, TopK: s.topK},
	}
}

// close waits for a running scrape to finish, then closes the connection
// pool; the target must not be used afterwards (a later collect waits for
// its deadline and reports it down).
func (t *redisTarget) close() {
	t.sem <- struct{}{}
	_ = t.client.Close()
}

// collect scrapes the target and sends its series; stall_redis_up is sent
// in every case, before ctx's deadline.
func (t *redisTarget) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	tctx, cancel := t.scrapeContext(ctx)
	defer cancel()
	select {
	case t.sem <- struct{}{}:
	case <-tctx.Done():
		redisUpDesc.Send(ch, 0, t.spec.label)
		return fmt.Errorf("redis %s: previous scrape still running", t.spec.label)
	}
	defer func() { <-t.sem }()
	start := time.Now()
	err := t.scrape(tctx, ch)
	redisScrapeSecondsDesc.Send(ch, time.Since(start).Seconds(), t.spec.label)
	var after errAfterUp
	if errors.As(err, &after) {
		redisUpDesc.Send(ch, 1, t.spec.label)
		t.logger.Debug("redis scrape incomplete", "err", after.error)
		return fmt.Errorf("redis %s: %w", t.spec.label, after.error)
	}
	if err != nil {
		redisUpDesc.Send(ch, 0, t.spec.label)
		if !isRedisError(err) {
			// Start the next scrape on a fresh pool: go-redis' pool would
			// otherwise keep answering with the last dial error for a while
			// after the server is back.
			_ = t.client.Close()
			t.client = t.spec.newClient()
		}
		now := t.s.now()
		if now.Sub(t.lastDownLog) > time.Minute {
			t.lastDownLog = now
			t.logger.Warn("redis target not answering (logged at most once a minute)", "err", err)
		}
		return fmt.Errorf("redis %s: %w", t.spec.label, err)
	}
	redisUpDesc.Send(ch, 1, t.spec.label)
	return nil
}

// scrapeContext bounds a scrape by --redis.timeout and ends it a little
// before the exporter's own deadline so that stall_redis_up 0 still makes
// it into the scrape.
func (t *redisTarget) scrapeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := t.s.timeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		margin := min(left/10, 250*time.Millisecond)
		if left-margin < d {
			d = left - margin
		}
	}
	return context.WithTimeout(ctx, d)
}

// isRedisError tells a server error reply (unknown command, NOPERM) from a
// network or timeout error.
func isRedisError(err error) bool {
	var re redis.Error
	return err != nil && errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

func (t *redisTarget) scrape(ctx context.Context, ch chan<- prometheus.Metric) error {
	t.scrapes++

	// One round trip: INFO (+ commandstats) and MEMORY STATS.
	pipe := t.client.Pipeline()
	var infoCmds []*redis.StringCmd
	if redisx.AtLeast(t.major, t.minor, 7, 0) {
		infoCmds = append(infoCmds, pipe.Info(ctx, "server", "clients", "memory", "stats", "replication", "commandstats"))
	} else {
		infoCmds = append(infoCmds, pipe.Info(ctx), pipe.Info(ctx, "commandstats"))
	}
	var memCmd *redis.Cmd
	if redisx.AtLeast(t.major, t.minor, 4, 0) && !t.noMemoryStats {
		memCmd = pipe.Do(ctx, "MEMORY", "STATS")
	}
	_, execErr := pipe.Exec(ctx)
	if execErr != nil && !isRedisError(execErr) {
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
		return errors.New("empty INFO reply")
	}
	info := redisx.ParseInfo(infoCmds[0].Val())
	for _, c := range infoCmds[1:] {
		if c.Err() == nil {
			more := redisx.ParseInfo(c.Val())
			info.Commands = append(info.Commands, more.Commands...)
			info.Malformed += more.Malformed
		}
	}
	t.problems.Add("redis INFO line", info.Malformed, errors.New("INFO line without key:value"))
	known := t.major != 0
	t.major, t.minor = info.Version()
	if !known && t.major == 0 {
		t.problems.Add("redis version", 1, errors.New("INFO has no readable redis_version"))
	}
	var ms redisx.MemoryStats
	if memCmd != nil {
		if err := memCmd.Err(); err != nil {
			if isRedisError(err) {
				// Renamed, forbidden (NOPERM) or a proxy without it: INFO
				// values are used instead until the next config refresh.
				t.noMemoryStats = true
				t.logger.Debug("MEMORY STATS unavailable, using INFO", "err", err)
			}
		} else {
			ms, err = redisx.ParseMemoryStats(memCmd.Val())
			if err != nil {
				t.problems.Add("redis MEMORY STATS", 1, err)
			}
			t.problems.Add("redis MEMORY STATS value", ms.Malformed, errors.New("MEMORY STATS value is not a number"))
		}
	}

	if err := t.refreshConfig(ctx); err != nil {
		return err
	}
	clErr := t.maybeClientList(ctx, info, ms)

	t.sendInfo(ch, info, ms)
	t.sendConfig(ch)
	t.sendClientList(ch)
	if clErr != nil {
		// INFO answered, so the target is up; the collector still reports
		// the failure.
		return errAfterUp{clErr}
	}
	return nil
}

// errAfterUp is a failure after the target answered INFO: stall_redis_up
// stays 1.
type errAfterUp struct{ error }

func (e errAfterUp) Unwrap() error { return e.error }

func (t *redisTarget) sendInfo(ch chan<- prometheus.Metric, in redisx.Info, ms redisx.MemoryStats) {
	l := t.spec.label
	role := in.Fields["role"]
	if v := in.Fields["redis_version"]; v != "" {
		redisInfoDesc.Send(ch, 1, l, labelValue(v), labelValue(role))
	}
	field := func(m collector.Metric, key string, scale float64) {
		if v, ok := in.Float(key); ok {
			m.Send(ch, v*scale, l)
		}
	}
	field(redisUptimeDesc, "uptime_in_seconds", 1)
	field(redisClientsDesc, "connected_clients", 1)
	if ms.HasClients {
		redisClientsMemDesc.Send(ch, ms.ClientsNormal, l, "normal")
		redisClientsMemDesc.Send(ch, ms.ClientsReplicas, l, "replica")
	} else {
		if v, ok := in.Float("mem_clients_normal"); ok {
			redisClientsMemDesc.Send(ch, v, l, "normal")
		}
		if v, ok := in.Float("mem_clients_slaves"); ok {
			redisClientsMemDesc.Send(ch, v, l, "replica")
		}
	}
	field(redisRecentMaxOutDesc, "client_recent_max_output_buffer", 1)
	field(redisRecentMaxInDesc, "client_recent_max_input_buffer", 1)
	field(redisOutputBytesDesc, "total_net_output_bytes", 1)
	field(redisInputBytesDesc, "total_net_input_bytes", 1)
	field(redisMemUsedDesc, "used_memory", 1)
	if _, ok := in.Fields["maxmemory"]; ok {
		field(redisMemMaxDesc, "maxmemory", 1)
	} else if t.cfgHasMaxmemory {
		redisMemMaxDesc.Send(ch, t.cfgMaxmemory, l)
	}
	if ms.HasDataset {
		redisDatasetRatioDesc.Send(ch, ms.DatasetPercentage/100, l)
	} else if s, ok := in.Fields["used_memory_dataset_perc"]; ok {
		if v, err := strconv.ParseFloat(trimPercent(s), 64); err == nil {
			redisDatasetRatioDesc.Send(ch, v/100, l)
		}
	}
	field(redisEvictedKeysDesc, "evicted_keys", 1)
	field(redisEvictedClientsDesc, "evicted_clients", 1)
	field(redisOBLDisconnectsDesc, "client_output_buffer_limit_disconnections", 1)
	field(redisRejectedDesc, "rejected_connections", 1)
	field(redisConnectionsDesc, "total_connections_received", 1)
	seen := make(map[string]bool, len(in.Commands))
	for _, c := range in.Commands {
		name := labelValue(c.Name)
		if seen[name] {
			continue // a proxy that repeats commandstats would duplicate series
		}
		seen[name] = true
		redisCmdCallsDesc.Send(ch, float64(c.Calls), l, name)
		redisCmdSecondsDesc.Send(ch, float64(c.Usec)/1e6, l, name)
	}
}

// labelValue makes a value that came from the server (a command, client
// or library name, a version string) a valid label value.
func labelValue(s string) string { return collector.LabelValue(s, 0) }

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
func (t *redisTarget) refreshConfig(ctx context.Context) error {
	now := t.s.now()
	if !t.cfgFetched.IsZero() && now.Sub(t.cfgFetched) < t.s.configRefresh {
		return nil
	}
	pipe := t.client.Pipeline()
	obl := pipe.ConfigGet(ctx, "client-output-buffer-limit")
	var mm *redis.MapStringStringCmd
	if redisx.AtLeast(t.major, t.minor, 0, 0) && !redisx.AtLeast(t.major, t.minor, 3, 2) {
		mm = pipe.ConfigGet(ctx, "maxmemory")
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !isRedisError(err) {
		return fmt.Errorf("CONFIG GET: %w", err)
	}
	t.cfgFetched = now
	t.cfgLimits = nil
	t.noMemoryStats = false // try MEMORY STATS again (ACL or server may have changed)
	if err := obl.Err(); err != nil {
		t.logger.Debug("CONFIG GET client-output-buffer-limit refused; limits not exported", "err", err)
	} else if v, ok := obl.Val()["client-output-buffer-limit"]; ok {
		limits, err := redisx.ParseOutputBufferLimits(v)
		if err != nil {
			t.problems.Add("redis client-output-buffer-limit", 1, err)
		}
		t.cfgLimits = limits
	}
	t.cfgHasMaxmemory = false
	if mm != nil && mm.Err() == nil {
		if v, ok := mm.Val()["maxmemory"]; ok {
			if n, err := redisx.ParseMemory(v); err == nil {
				t.cfgMaxmemory, t.cfgHasMaxmemory = float64(n), true
			}
		}
	}
	return nil
}

func (t *redisTarget) sendConfig(ch chan<- prometheus.Metric) {
	l := t.spec.label
	for _, lim := range t.cfgLimits {
		redisOBLimitDesc.Send(ch, float64(lim.HardBytes), l, lim.Class, "hard")
		redisOBLimitDesc.Send(ch, float64(lim.SoftBytes), l, lim.Class, "soft")
		redisOBLimitSecondsDesc.Send(ch, float64(lim.SoftSeconds), l, lim.Class)
		unlimited := 0.0
		if lim.Unlimited() {
			unlimited = 1
		}
		redisOBUnlimitedDesc.Send(ch, unlimited, l, lim.Class)
	}
}

// clientListDue decides whether this scrape runs CLIENT LIST and whether a
// threshold caused it.
func (t *redisTarget) clientListDue(in redisx.Info, ms redisx.MemoryStats) (run, triggered bool) {
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

func (t *redisTarget) maybeClientList(ctx context.Context, in redisx.Info, ms redisx.MemoryStats) error {
	run, triggered := t.clientListDue(in, ms)
	if !run {
		return nil
	}
	start := t.s.now()
	reply, err := t.client.ClientList(ctx).Result()
	took := t.s.now().Sub(start)
	if err != nil {
		if isRedisError(err) {
			t.logger.Debug("CLIENT LIST refused; client aggregates not exported", "err", err)
			return nil
		}
		return fmt.Errorf("CLIENT LIST: %w", err)
	}
	st := t.agg.Aggregate(reply)
	t.problems.Add("redis CLIENT LIST", st.Malformed, errors.New("CLIENT LIST line or field not in field=value form"))
	t.cl = clientListResult{
		have: true, triggered: triggered, at: start, duration: took,
		replyBytes: len(reply), runs: t.cl.runs + 1, stats: st,
	}
	return nil
}

func (t *redisTarget) sendClientList(ch chan<- prometheus.Metric) {
	l := t.spec.label
	if t.cl.runs > 0 {
		redisCLRunsDesc.Send(ch, float64(t.cl.runs), l)
	}
	if !t.cl.have {
		return
	}
	st := t.cl.stats
	redisCLLastRunDesc.Send(ch, float64(t.cl.at.UnixNano())/1e9, l)
	redisCLDurationDesc.Send(ch, t.cl.duration.Seconds(), l)
	redisCLReplyBytesDesc.Send(ch, float64(t.cl.replyBytes), l)
	redisCLClientsDesc.Send(ch, float64(st.Clients), l)
	redisCLOmemDesc.Send(ch, float64(st.OutputBufferBytes), l)
	redisCLMaxOmemDesc.Send(ch, float64(st.MaxOutputBufferBytes), l)
	if st.HasTotalMemory {
		redisCLTotMemDesc.Send(ch, float64(st.TotalMemoryBytes), l)
	}
	redisCLPendingDesc.Send(ch, float64(st.PendingClients), l)
	redisCLOllDesc.Send(ch, float64(st.OutputListBlocks), l)
	for _, g := range st.Groups {
		name := labelValue(g.Name)
		redisCLGroupOmemDesc.Send(ch, float64(g.OutputBufferBytes), l, name)
		redisCLGroupClientsDesc.Send(ch, float64(g.Clients), l, name)
	}
	for _, g := range st.Commands {
		redisCLCmdOmemDesc.Send(ch, float64(g.OutputBufferBytes), l, labelValue(g.Name))
	}
}
