package redis

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
)

var (
	bigKeyDesc = collector.NewMetric("redis_big_key_bytes",
		"Memory of the largest keys in the last complete background scan (MEMORY USAGE), at most --redis.bigkeys.top per target.",
		prometheus.GaugeValue, "addr", "db", "key")
	bigKeysScannedDesc = collector.NewMetric("redis_big_keys_scanned_total",
		"Keys measured with MEMORY USAGE by the background big-key scan.", prometheus.CounterValue, "addr")
	bigKeysPassDesc = collector.NewMetric("redis_big_keys_last_pass_timestamp_seconds",
		"Unix time the last complete big-key scan of the target finished.", prometheus.GaugeValue, "addr")
)

type bigKeySettings struct {
	enabled       bool
	keysPerSecond float64
	top           int
	minBytes      int64 // keys below are not exported
	preferReplica bool
	hashNames     bool
	interval      time.Duration
	samples       int
}

// scanCount is SCAN's COUNT: a page of 100 key names is a few kB.
const scanCount = 100

// errBigKeysUnsupported stops the scanner of a server without MEMORY USAGE.
var errBigKeysUnsupported = errors.New("MEMORY USAGE needs Redis 4.0 or later")

type bigKey struct {
	db    int
	key   string // label value (sanitized or hashed)
	bytes int64
}

// bigKeyScanner walks one target's keyspace at a bounded rate and keeps the
// top N keys by MEMORY USAGE.
type bigKeyScanner struct {
	t       *target
	s       bigKeySettings
	logger  *slog.Logger
	state   *collector.StateLog // failed passes
	limiter *rate.Limiter

	mu       sync.Mutex
	done     []bigKey // last complete pass
	partial  []bigKey // pass in progress
	passDone time.Time
	scanned  uint64
}

func newBigKeyScanner(t *target, s bigKeySettings, cfg collector.Config) *bigKeyScanner {
	burst := max(1, int(s.keysPerSecond))
	logger := cfg.Logger.With("addr", t.spec.label, "task", "bigkeys")
	return &bigKeyScanner{
		t: t, s: s, logger: logger, state: collector.NewStateLog(logger),
		limiter: rate.NewLimiter(rate.Limit(s.keysPerSecond), burst),
	}
}

// send exports the last complete pass (before it, the running one).
func (b *bigKeyScanner) send(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.t.spec.label
	keys := b.done
	if b.passDone.IsZero() {
		keys = b.partial
	} else {
		bigKeysPassDesc.Send(ch, float64(b.passDone.UnixNano())/1e9, l)
	}
	for _, k := range keys {
		bigKeyDesc.Send(ch, float64(k.bytes), l, strconv.Itoa(k.db), k.key)
	}
	bigKeysScannedDesc.Send(ch, float64(b.scanned), l)
}

// bigKeysBackoff is the wait after failed passes in a row (never longer
// than --redis.bigkeys.interval): a pass that failed on a timeout or a
// closed connection is tried again soon, one that keeps failing once a
// minute.
var bigKeysBackoff = collector.Backoff{Min: 10 * time.Second, Max: time.Minute}

// run scans until ctx ends: a pass, then --redis.bigkeys.interval of
// rest. A failed pass is tried again with bigKeysBackoff; a server that
// cannot be scanned (before 4.0, or MEMORY USAGE refused) stops the
// scanner.
func (b *bigKeyScanner) run(ctx context.Context) {
	failures := 0
	for {
		err := b.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errBigKeysUnsupported) {
			b.logger.Warn("big-key scan disabled for this target", "err", err)
			return
		}
		wait := b.s.interval
		if err != nil {
			failures++
			wait = min(wait, bigKeysBackoff.Delay(failures))
			b.state.Failed("big-key scan stopped; retrying with backoff", downReason(err), err, "retry_in", wait)
		} else {
			failures = 0
			b.state.OK("big-key scan completes again")
		}
		if !collector.Sleep(ctx, wait) {
			return
		}
	}
}

// scanSource returns the options to scan with: an online replica's when
// preferred and reachable, else the target's, and the replica's address.
func (b *bigKeyScanner) scanSource(ctx context.Context) (*redis.Options, string, error) {
	mc := b.t.spec.newClient(nil, nil)
	info, err := mc.Info(ctx).Result() // default sections: server, replication, keyspace on every version
	_ = mc.Close()
	if err != nil {
		return nil, "", fmt.Errorf("INFO: %w", err)
	}
	in := replies.ParseInfo(info)
	if major, _ := in.Version(); major > 0 && major < 4 {
		return nil, "", fmt.Errorf("%w (server is %s)", errBigKeysUnsupported, in.Fields["redis_version"])
	}
	opts := *b.t.spec.opts
	if in.Fields["redis_mode"] == "cluster" {
		// Keys on a cluster replica are readable only after READONLY;
		// without it every MEMORY USAGE would be a MOVED redirect.
		named := opts.OnConnect // setClientName
		opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			if err := named(ctx, cn); err != nil {
				return err
			}
			return cn.ReadOnly(ctx).Err()
		}
	}
	if b.s.preferReplica && in.Fields["role"] == "master" && b.t.spec.opts.Network != "unix" {
		// An explicit ?bigkeys_replica= first (for replicas that announce
		// an address the exporter cannot reach), then INFO's online ones.
		var candidates []string
		if b.t.spec.bigKeysReplica != "" {
			candidates = append(candidates, b.t.spec.bigKeysReplica)
		}
		for _, r := range in.Replicas {
			if r.State == "online" {
				candidates = append(candidates, net.JoinHostPort(r.IP, strconv.Itoa(r.Port)))
			}
		}
		for _, addr := range candidates {
			ro := opts
			ro.Addr = addr
			c := redis.NewClient(&ro)
			err := c.Ping(ctx).Err()
			_ = c.Close()
			if err == nil {
				return &ro, ro.Addr, nil
			}
			b.logger.Debug("replica not reachable; scanning the master", "replica", ro.Addr, "err", err)
		}
	}
	return &opts, "", nil
}

func (b *bigKeyScanner) pass(ctx context.Context) error {
	opts, replica, err := b.scanSource(ctx)
	if err != nil {
		return err
	}
	kc := redis.NewClient(opts)
	info, err := kc.Info(ctx, "keyspace").Result()
	_ = kc.Close()
	if err != nil {
		return fmt.Errorf("INFO keyspace: %w", err)
	}
	dbs := replies.ParseInfo(info).Keyspace
	if replica != "" {
		b.logger.Debug("scanning replica", "replica", replica)
	}
	b.mu.Lock()
	b.partial = nil
	b.mu.Unlock()
	for _, db := range dbs {
		o := *opts
		o.DB = db.Index
		o.PoolSize = 1
		c := redis.NewClient(&o)
		err := b.scanDB(ctx, c, db.Index)
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("db %d: %w", db.Index, err)
		}
	}
	b.mu.Lock()
	b.done, b.partial = b.partial, nil
	b.passDone = time.Now()
	b.mu.Unlock()
	return nil
}

func (b *bigKeyScanner) scanDB(ctx context.Context, c *redis.Client, db int) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "", scanCount).Result()
		if err != nil {
			return fmt.Errorf("SCAN: %w", err)
		}
		for len(keys) > 0 {
			n := min(len(keys), b.limiter.Burst())
			if err := b.limiter.WaitN(ctx, n); err != nil {
				return err
			}
			pipe := c.Pipeline()
			cmds := make([]*redis.IntCmd, n)
			for i, k := range keys[:n] {
				cmds[i] = pipe.MemoryUsage(ctx, k, b.s.samples) // SAMPLES 0: every nested value
			}
			if _, err := pipe.Exec(ctx); err != nil && !isErrorReply(err) && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("MEMORY USAGE: %w", err)
			}
			b.mu.Lock()
			for i, k := range keys[:n] {
				v, err := cmds[i].Result()
				if err != nil {
					if msg := strings.ToLower(err.Error()); isErrorReply(err) &&
						(strings.Contains(msg, "unknown") || strings.HasPrefix(msg, "noperm")) {
						b.mu.Unlock()
						return fmt.Errorf("%w: %v", errBigKeysUnsupported, err) //nolint:errorlint // unsupported is the verdict; the error reply is detail, not to be matched as one
					}
					continue // key expired or deleted between SCAN and MEMORY USAGE
				}
				b.scanned++
				if v >= b.s.minBytes {
					b.partial = insertTop(b.partial, bigKey{db: db, key: k, bytes: v}, b.s.top, func(k string) string { return bigKeyLabel(k, b.s.hashNames) })
				}
			}
			b.mu.Unlock()
			keys = keys[n:]
		}
		cursor = next
		if cursor == 0 {
			return nil
		}
	}
}

// insertTop keeps at most n keys, largest first, equal sizes by db and
// label, so an unchanged keyspace exports the same keys whatever order
// SCAN returns them in. Keys with the same label (names cut to the same
// label, or equal hashes) are one series: the larger wins. The name is
// turned into its label only when it may enter the list.
func insertTop(top []bigKey, k bigKey, n int, label func(string) string) []bigKey {
	if len(top) >= n && k.bytes < top[len(top)-1].bytes {
		return top
	}
	k.key = label(k.key)
	if i := slices.IndexFunc(top, func(e bigKey) bool { return e.db == k.db && e.key == k.key }); i >= 0 {
		if top[i].bytes >= k.bytes {
			return top
		}
		top = slices.Delete(top, i, i+1)
	}
	i, _ := slices.BinarySearchFunc(top, k, compareBigKeys)
	top = slices.Insert(top, i, k)
	if len(top) > n {
		top = top[:n]
	}
	return top
}

func compareBigKeys(a, b bigKey) int {
	switch {
	case a.bytes != b.bytes:
		return cmp.Compare(b.bytes, a.bytes)
	case a.db != b.db:
		return cmp.Compare(a.db, b.db)
	}
	return strings.Compare(a.key, b.key)
}

// bigKeyLabel returns the label value of a key: sha256:<16 hex> with
// --redis.bigkeys.hash-names, else collector.LabelValue of the name.
func bigKeyLabel(key string, hash bool) string {
	if hash {
		sum := sha256.Sum256([]byte(key))
		return "sha256:" + hex.EncodeToString(sum[:8])
	}
	return collector.Label(key)
}
