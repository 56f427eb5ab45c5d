package redis

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"

	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
)

// flagValues are the redis collector's flags as kingpin parsed them;
// settings() validates them. Tests parse their own application's.
type flagValues struct {
	addrs                             *[]string
	user, passwordFile, passwordEnv   *string
	tlsCA, tlsCert, tlsKey, tlsServer *string
	tlsInsecure                       *bool
	dialTimeout, timeout              *time.Duration
	maxReply                          *byteSize
	configRefresh                     *time.Duration
	clMode                            *string
	clEvery                           *int
	clOutThreshold, clClientsMemThr   *byteSize
	groupBy                           *string
	topK                              *int
	probeAllowed                      *[]string
	probeAllowedRE, probeScheme       *string

	bigkeysEnable   *bool
	bigkeysRate     *float64
	bigkeysTop      *int
	bigkeysMinBytes *byteSize
	bigkeysReplica  *bool
	bigkeysHash     *bool
	bigkeysInterval *time.Duration
	bigkeysSamples  *int
}

// flags are the process's flags, parsed by main.
var flags = registerFlags(kingpin.CommandLine)

func registerFlags(app *kingpin.Application) *flagValues {
	f := &flagValues{}
	f.addrs = app.Flag("redis.addr",
		"Redis target scraped on /metrics (repeatable): host:port, redis://[user@]host:port, rediss://… (TLS), unix:///path.sock. "+
			"Per-target options: ?password_file=PATH or ?password_env=VAR (credentials), ?bigkeys_replica=HOST:PORT. Without any target, the redis collector reports no data.").Strings()
	f.user = app.Flag("redis.user", "ACL user name for targets that do not name one (Redis 6+).").Default("").String()
	f.passwordFile = app.Flag("redis.password-file", "File holding the password of targets without their own password source; read on every new connection.").Default("").String()
	f.passwordEnv = app.Flag("redis.password-env", "Environment variable holding the password of targets without their own password source; the exporter refuses to start when it is not set.").Default("").String()
	f.tlsCA = app.Flag("redis.tls.ca-file", "CA bundle (PEM) that verifies rediss:// servers; default: system roots.").Default("").String()
	f.tlsCert = app.Flag("redis.tls.cert-file", "Client certificate (PEM) for rediss:// targets that require one.").Default("").String()
	f.tlsKey = app.Flag("redis.tls.key-file", "Key (PEM) of --redis.tls.cert-file.").Default("").String()
	f.tlsServer = app.Flag("redis.tls.server-name", "Server name expected in the certificate of rediss:// targets; default: the target host.").Default("").String()
	f.tlsInsecure = app.Flag("redis.tls.insecure-skip-verify", "Do not verify rediss:// server certificates (testing only).").Default("false").Bool()
	f.dialTimeout = app.Flag("redis.dial-timeout", "Time limit for connecting to a target (TCP, TLS and AUTH).").Default("2s").Duration()
	f.timeout = app.Flag("redis.timeout",
		"Time limit of one target's scrape (every command); a target that does not answer within it reports stall_redis_up 0. Also capped by --collector.timeout.").
		Default("3s").Duration()
	f.maxReply = bytesFlag(app.Flag("redis.max-reply-bytes",
		"Largest CLIENT LIST reply accepted from a target, checked against the length the server announces. The reply is aggregated as it arrives, "+
			"so this bounds read time, not memory; every other reply is limited to 1MiB. A larger reply drops the connection and counts in "+
			"stall_redis_oversized_replies_total. The default fits CLIENT LIST of 100,000 clients.").
		Default("64MiB"))
	f.configRefresh = app.Flag("redis.config-refresh-interval",
		"How long CONFIG GET client-output-buffer-limit / maxmemory results are reused.").Default("5m").Duration()
	f.clMode = app.Flag("redis.client-list.mode",
		"When to run CLIENT LIST (O(clients) on Redis' main thread): auto (when INFO shows non-trivial output buffers, once more after they shrink, and every Nth scrape), always, never.").
		Default("auto").Enum("auto", "always", "never")
	f.clEvery = app.Flag("redis.client-list.every",
		"In auto mode, also run CLIENT LIST on every Nth scrape of a target; 0 disables the periodic run.").Default("10").Int()
	f.clOutThreshold = bytesFlag(app.Flag("redis.client-list.output-buffer-threshold",
		"In auto mode, run CLIENT LIST when INFO client_recent_max_output_buffer reaches this many bytes.").Default("1MiB"))
	f.clClientsMemThr = bytesFlag(app.Flag("redis.client-list.clients-memory-threshold",
		"In auto mode, run CLIENT LIST when the memory of normal clients (MEMORY STATS clients.normal / INFO mem_clients_normal) reaches this many bytes.").
		Default("512MiB"))
	f.groupBy = app.Flag("redis.client-group-by",
		"Client attribute CLIENT LIST aggregates are grouped by: pool (the client name without its instance suffix — pod hash, ordinal, UUID —, else lib-name, else host), "+
			"host (peer IP), name, lib-name (7.2+) or user (6.0+).").
		Default("pool").Enum(replies.GroupByNames...)
	f.topK = app.Flag("redis.client-list.top-k",
		"Number of client groups and of last commands exported by output-buffer size; the rest is summed in group/cmd=\"other\".").Default("10").Int()
	f.probeAllowed = app.Flag("redis.probe.allowed-targets",
		"Target allowed on /probe?module=redis (repeatable; --redis.addr syntax). --redis.addr targets are always allowed. "+
			"A probe request names host:port only; the scheme, TLS settings and user configured here are used.").Strings()
	f.probeAllowedRE = app.Flag("redis.probe.allowed-targets-regexp",
		"Anchored regular expression over host:port (or the socket path) of targets allowed on /probe?module=redis.").Default("").String()
	f.probeScheme = app.Flag("redis.probe.scheme",
		"Scheme of targets allowed only by --redis.probe.allowed-targets-regexp: redis or rediss (TLS, --redis.tls.*).").Default("redis").Enum("redis", "rediss")

	f.bigkeysEnable = app.Flag("redis.bigkeys.enable",
		"Scan --redis.addr targets in the background (SCAN + MEMORY USAGE, Redis 4.0+) and export the largest keys.").Default("false").Bool()
	f.bigkeysRate = app.Flag("redis.bigkeys.keys-per-second",
		"Keys measured per second (MEMORY USAGE calls), per target.").Default("100").Float64()
	f.bigkeysTop = app.Flag("redis.bigkeys.top",
		"Most keys exported per target (the largest of at least --redis.bigkeys.min-bytes).").Default("10").Int()
	f.bigkeysMinBytes = bytesFlag(app.Flag("redis.bigkeys.min-bytes",
		"Export only keys whose MEMORY USAGE reaches this size (default: 4 × the 16 KiB reply buffer of a client, so every read of such a key is queued in the client's output buffer).").
		Default("64KiB"))
	f.bigkeysReplica = app.Flag("redis.bigkeys.prefer-replica",
		"Scan an online replica listed in the master's INFO replication instead of the master, when one answers (same credentials and TLS).").Default("true").Bool()
	f.bigkeysHash = app.Flag("redis.bigkeys.hash-names",
		"Export sha256:<16 hex digits> of each key name instead of the name (for key names that carry personal data).").Default("false").Bool()
	f.bigkeysInterval = app.Flag("redis.bigkeys.interval",
		"Pause between the end of one full scan and the start of the next.").Default("1h").Duration()
	f.bigkeysSamples = app.Flag("redis.bigkeys.samples",
		"MEMORY USAGE SAMPLES: nested values sampled per key (0 = all, exact but slow on big collections).").Default("5").Int()
	return f
}

// byteSize is a size flag in bytes (1MiB, 512KiB, 64MB …); negative sizes
// are refused when the command line is parsed.
type byteSize struct {
	n    int64
	flag string
}

func bytesFlag(fc *kingpin.FlagClause) *byteSize {
	v := &byteSize{flag: fc.Model().Name}
	fc.SetValue(v)
	return v
}

func (b *byteSize) Set(s string) error {
	n, err := units.ParseBase2Bytes(s)
	if err != nil {
		return fmt.Errorf("--%s: %w", b.flag, err)
	}
	if n < 0 {
		return fmt.Errorf("--%s must not be negative, not %s", b.flag, s)
	}
	b.n = int64(n)
	return nil
}

func (b *byteSize) String() string { return units.Base2Bytes(b.n).String() }

// minReplyLimit keeps --redis.max-reply-bytes above a CLIENT LIST of
// several hundred clients (about 300 bytes each).
const minReplyLimit = 256 << 10

// validate checks the flag values; every refusal names its flag.
func (f *flagValues) validate() (settings, error) {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(*f.timeout <= 0, "--redis.timeout must be positive, not %v", *f.timeout)
	check(*f.dialTimeout <= 0, "--redis.dial-timeout must be positive, not %v", *f.dialTimeout)
	check(*f.configRefresh <= 0, "--redis.config-refresh-interval must be positive, not %v", *f.configRefresh)
	check(*f.topK < 1, "--redis.client-list.top-k must be at least 1, not %d", *f.topK)
	check(*f.clEvery < 0, "--redis.client-list.every must be 0 or more, not %d", *f.clEvery)
	check(f.maxReply.n < minReplyLimit, "--redis.max-reply-bytes must be at least %s, not %s",
		units.Base2Bytes(minReplyLimit), f.maxReply)
	if *f.passwordEnv != "" {
		_, set := os.LookupEnv(*f.passwordEnv)
		check(!set, "--redis.password-env names %s, which is not set in the exporter's environment", *f.passwordEnv)
	}
	if *f.passwordFile != "" {
		// Read at each connection (a rotated password is picked up), but
		// one that cannot be opened at start is a mistake to report now,
		// not at the first scrape as a Redis that is down.
		if pf, err := os.Open(*f.passwordFile); err != nil {
			errs = append(errs, fmt.Errorf("--redis.password-file: %w", err))
		} else {
			_ = pf.Close()
		}
	}
	rate := *f.bigkeysRate
	check(rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0),
		"--redis.bigkeys.keys-per-second must be a positive number, not %v", rate)
	check(*f.bigkeysTop < 1, "--redis.bigkeys.top must be at least 1, not %d", *f.bigkeysTop)
	check(*f.bigkeysSamples < 0, "--redis.bigkeys.samples must be 0 or more, not %d", *f.bigkeysSamples)
	check(*f.bigkeysInterval < 0, "--redis.bigkeys.interval must be 0 or more, not %v", *f.bigkeysInterval)
	gb, err := replies.ParseGroupBy(*f.groupBy)
	if err != nil {
		errs = append(errs, fmt.Errorf("--redis.client-group-by: %w", err))
	}
	// Read once, here, so that a bad file stops the start naming its flag.
	tlsS, err := tlsSettings{caFile: *f.tlsCA, certFile: *f.tlsCert, keyFile: *f.tlsKey,
		serverName: *f.tlsServer, insecureSkipVerify: *f.tlsInsecure}.load()
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return settings{}, err
	}
	return settings{
		conn: connSettings{
			user: *f.user, passwordFile: *f.passwordFile, passwordEnv: *f.passwordEnv,
			dialTimeout: *f.dialTimeout, clientListLimit: f.maxReply.n,
			tls: tlsS,
		},
		timeout:         *f.timeout,
		configRefresh:   *f.configRefresh,
		clMode:          *f.clMode,
		clEvery:         *f.clEvery,
		clOutThreshold:  uint64(f.clOutThreshold.n),
		clClientsMemThr: uint64(f.clClientsMemThr.n),
		groupBy:         gb,
		topK:            *f.topK,
		bigkeys: bigKeySettings{
			enabled: *f.bigkeysEnable, keysPerSecond: rate, top: *f.bigkeysTop, minBytes: f.bigkeysMinBytes.n,
			preferReplica: *f.bigkeysReplica, hashNames: *f.bigkeysHash, interval: *f.bigkeysInterval,
			samples: *f.bigkeysSamples,
		},
	}, nil
}

// settings is everything the flags decide, read once.
type settings struct {
	conn            connSettings
	timeout         time.Duration
	configRefresh   time.Duration
	clMode          string
	clEvery         int
	clOutThreshold  uint64
	clClientsMemThr uint64
	groupBy         replies.GroupBy
	topK            int
	bigkeys         bigKeySettings
}

// TCPAddrs returns the host:port of every --redis.addr target reached
// over TCP (not unix://), as the redis collector spells it: what the
// tcpqueues collector matches against this host's addresses to find the
// Redis ports whose send queues it sums. A target that does not parse is
// left out; the redis collector's own start refuses it.
func TCPAddrs() []string {
	var out []string
	for _, raw := range *flags.addrs {
		if spec, err := parseTarget(raw, connSettings{}); err == nil && spec.scheme != "unix" {
			out = append(out, spec.hostPort)
		}
	}
	return out
}
