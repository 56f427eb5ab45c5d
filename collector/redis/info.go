package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
)

// info sends INFO (with commandstats) in one round trip and parses it.
func (t *target) info(ctx context.Context) (replies.Info, error) {
	pipe := t.client.Pipeline()
	var all, cmdstats *redis.StringCmd
	if replies.AtLeast(t.major, t.minor, 7, 0) {
		all = pipe.Info(ctx, "server", "clients", "memory", "stats", "replication", "commandstats")
	} else {
		// Before 7.0 INFO takes one section; 2.4 none (its INFO
		// commandstats is an error reply, and its INFO has no commandstats).
		all, cmdstats = pipe.Info(ctx), pipe.Info(ctx, "commandstats")
	}
	_, execErr := pipe.Exec(ctx)
	if execErr != nil && !isErrorReply(execErr) {
		return replies.Info{}, execErr
	}
	if err := all.Err(); err != nil {
		return replies.Info{}, fmt.Errorf("INFO: %w", err)
	}
	if all.Val() == "" {
		// The connection's AUTH/HELLO was refused: nothing was sent.
		if execErr != nil {
			return replies.Info{}, execErr
		}
		return replies.Info{}, errEmptyInfo
	}
	info := replies.ParseInfo(all.Val())
	if cmdstats != nil && cmdstats.Err() == nil {
		more := replies.ParseInfo(cmdstats.Val())
		n := min(len(more.Commands), max(replies.MaxInfoCommands-len(info.Commands), 0))
		info.Commands = append(info.Commands, more.Commands[:n]...)
		info.Malformed += more.Malformed
		info.Dropped += more.Dropped + len(more.Commands) - n
	}
	t.problems.Add("redis_info_line", info.Malformed, errors.New("INFO line without key:value"))
	t.problems.Add("redis_info_size", info.Dropped, fmt.Errorf("INFO has more than %d fields, %d commands or %d databases; the rest is ignored",
		replies.MaxInfoFields, replies.MaxInfoCommands, replies.MaxInfoDatabases))
	known := t.major != 0
	t.major, t.minor = info.Version()
	if !known && t.major == 0 {
		t.problems.Add("redis_version", 1, errors.New("INFO has no readable redis_version"))
	}
	return info, nil
}

// errEmptyInfo is an INFO reply without a single field.
var errEmptyInfo = fmt.Errorf("%w: empty INFO reply", resplimit.ErrProtocol)

// memoryStats sends MEMORY STATS in a round trip of its own: its reply is
// 387 bytes longer for every non-empty database (Redis 7.0: 388 kB with
// 1,000), so a server with more than about 2,700 loses MEMORY STATS, not
// INFO, to replyLimit. An error reply or a reply over replyLimit sets
// t.noMemoryStats until the next config refresh (client memory is read
// from INFO meanwhile); any other error is returned.
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
		t.problems.Add("redis_memory_stats", 1, err)
	}
	t.problems.Add("redis_memory_stats_value", ms.Malformed, errors.New("MEMORY STATS value is not a number"))
	return ms, nil
}

// configCache holds what CONFIG GET answered, for
// --redis.config-refresh-interval.
type configCache struct {
	fetched      time.Time
	limits       []replies.OutputBufferLimit
	maxmemory    float64
	hasMaxmemory bool // read with CONFIG GET: INFO has no maxmemory before 3.2
}

// refreshConfig re-reads the cached CONFIG values when they are older than
// --redis.config-refresh-interval. An error reply leaves the limits
// unknown; a network error fails the scrape.
func (t *target) refreshConfig(ctx context.Context) error {
	now := time.Now()
	if !t.cfg.fetched.IsZero() && now.Sub(t.cfg.fetched) < t.s.configRefresh {
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
	t.cfg = configCache{fetched: now}
	t.noMemoryStats = false // try MEMORY STATS again (ACL or server may have changed)
	t.commandAnswered(cmdConfigGet, obl.Err())
	if v, ok := obl.Val()["client-output-buffer-limit"]; obl.Err() == nil && ok {
		limits, err := replies.ParseOutputBufferLimits(v)
		if err != nil {
			t.problems.Add("redis_output_buffer_limit", 1, err)
		}
		t.cfg.limits = limits
	}
	if mm != nil && mm.Err() == nil {
		if v, ok := mm.Val()["maxmemory"]; ok {
			n, err := replies.ParseMemory(v)
			if err != nil {
				t.problems.Add("redis_config_maxmemory", 1, fmt.Errorf("CONFIG GET maxmemory: %w", err))
			} else {
				t.cfg.maxmemory, t.cfg.hasMaxmemory = float64(n), true
			}
		}
	}
	return nil
}

func (t *target) sendInfo(ch chan<- prometheus.Metric, in replies.Info, ms replies.MemoryStats) {
	l := t.spec.label
	if v := in.Fields["redis_version"]; v != "" {
		infoDesc.Send(ch, 1, l, collector.Label(v), collector.Label(in.Fields["role"]))
	}
	for _, f := range infoMetrics {
		if v, ok := t.infoNumber(in, f.field); ok {
			f.metric.Send(ch, v, l)
		}
	}
	if ms.HasClients {
		clientsMemDesc.Send(ch, ms.ClientsNormal, l, "normal")
		clientsMemDesc.Send(ch, ms.ClientsReplicas, l, "replica")
	} else {
		if v, ok := t.infoNumber(in, "mem_clients_normal"); ok {
			clientsMemDesc.Send(ch, v, l, "normal")
		}
		if v, ok := t.infoNumber(in, "mem_clients_slaves"); ok {
			clientsMemDesc.Send(ch, v, l, "replica")
		}
	}
	if _, ok := in.Fields["maxmemory"]; ok {
		if v, ok := t.infoNumber(in, "maxmemory"); ok {
			memMaxDesc.Send(ch, v, l)
		}
	} else if t.cfg.hasMaxmemory {
		memMaxDesc.Send(ch, t.cfg.maxmemory, l)
	}
	if ms.HasDataset {
		datasetRatioDesc.Send(ch, ms.DatasetPercentage/100, l)
	} else if v, ok := t.infoNumber(in, "used_memory_dataset_perc"); ok {
		datasetRatioDesc.Send(ch, v/100, l)
	}
	seen := make(map[string]bool, len(in.Commands))
	for _, c := range in.Commands {
		name := collector.Label(c.Name)
		if seen[name] {
			continue // a proxy that repeats commandstats would duplicate series
		}
		seen[name] = true
		cmdCallsDesc.Send(ch, float64(c.Calls), l, name)
		cmdSecondsDesc.Send(ch, float64(c.Usec)/1e6, l, name)
	}
}

// infoNumber reads a numeric INFO field (replies.Info.Number): an absent
// field is not an error (versions differ); one that is not a number is
// counted as bad input.
func (t *target) infoNumber(in replies.Info, key string) (float64, bool) {
	v, present, err := in.Number(key)
	if err != nil {
		t.problems.Add("redis_info_value", 1, err)
		return 0, false
	}
	return v, present
}

func (t *target) sendConfig(ch chan<- prometheus.Metric) {
	l := t.spec.label
	for _, lim := range t.cfg.limits {
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
