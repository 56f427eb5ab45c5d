package rocketmq

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// GET_BROKER_RUNTIME_INFO to metrics: one row of runtimeKeys per key.

// runtimeKey is one runtime-info key and the series it becomes.
type runtimeKey struct {
	keys     []string // spellings, first present wins
	required bool     // missing counts as an error (present in every 4.9.x and 5.x)
	emit     emitFunc
}

// emitFunc converts a key's value and sends its series; an error is
// counted against the key (keyError) and costs only its own series.
type emitFunc func(e runtimeEmitter, raw string) error

// runtimeEmitter is what a runtimeKey's emit needs: the broker (b.mu
// held), its labels, the channel and the scrape's time.
type runtimeEmitter struct {
	b   *broker
	ch  chan<- prometheus.Metric
	lv  []string
	now time.Time
}

// runtimeKeys, in the order their series are sent. Durations go through
// parseMillis and counts, sizes and capacities through parseCount, which
// refuse what no broker can report (negative, a duration over a week).
// dispatchBehindBytes is a difference of two offsets the broker reads at
// different moments, so it is taken as it comes.
var runtimeKeys = []runtimeKey{
	{[]string{"pageCacheLockTimeMills"}, true, gauge(parseMillis, "commitlog_lock_held_seconds",
		"How long the current holder has held the CommitLog put lock, 0 when free (runtime-info pageCacheLockTimeMills).")},
	{[]string{"putMessageEntireTimeMax"}, true, gauge(parseMillis, "put_latency_max_seconds",
		"Longest whole put since broker start (runtime-info putMessageEntireTimeMax, high-water mark).")},
	{[]string{"putMessageTimesTotal"}, true, counter(parseCount, "put_messages_total",
		"Messages stored since broker start (runtime-info putMessageTimesTotal).")},
	{[]string{"putMessageSizeTotal"}, true, counter(parseCount, "put_bytes_total",
		"Message bytes stored since broker start (runtime-info putMessageSizeTotal).")},
	{[]string{"putMessageFailedTimes"}, false, counter(parseCount, "put_failures_total",
		"Failed puts since broker start (runtime-info putMessageFailedTimes; 4.9.3+).")},
	{[]string{"sendThreadPoolQueueSize"}, true, gauge(parseCount, "send_queue_size",
		"Send requests queued for the send thread pool (runtime-info sendThreadPoolQueueSize).")},
	{[]string{"sendThreadPoolQueueCapacity"}, true, gauge(parseCount, "send_queue_capacity",
		"Capacity of the send thread pool queue (runtime-info sendThreadPoolQueueCapacity).")},
	{[]string{"sendThreadPoolQueueHeadWaitTimeMills"}, true, gauge(parseMillis, "send_queue_head_wait_seconds",
		"Age of the oldest queued send request (runtime-info sendThreadPoolQueueHeadWaitTimeMills).")},
	{[]string{"pullThreadPoolQueueSize"}, true, gauge(parseCount, "pull_queue_size",
		"Pull requests queued for the pull thread pool (runtime-info pullThreadPoolQueueSize).")},
	{[]string{"pullThreadPoolQueueCapacity"}, true, gauge(parseCount, "pull_queue_capacity",
		"Capacity of the pull thread pool queue (runtime-info pullThreadPoolQueueCapacity).")},
	{[]string{"pullThreadPoolQueueHeadWaitTimeMills"}, true, gauge(parseMillis, "pull_queue_head_wait_seconds",
		"Age of the oldest queued pull request (runtime-info pullThreadPoolQueueHeadWaitTimeMills).")},
	{[]string{"remainHowManyDataToFlush"}, true, gauge(parseSize, "flush_pending_bytes",
		"CommitLog bytes written but not yet flushed to disk (runtime-info remainHowManyDataToFlush, a human-readable size rounded by the broker to 3 digits).")},
	{[]string{"remainHowManyDataToCommit"}, false, gauge(parseSize, "commit_pending_bytes",
		"Bytes in the transient store pool not yet committed to the file channel (runtime-info remainHowManyDataToCommit; only with transientStorePoolEnable).")},
	{[]string{"dispatchBehindBytes"}, true, gauge(parseFloat, "dispatch_behind_bytes",
		"CommitLog bytes not yet dispatched to consume queues and index (runtime-info dispatchBehindBytes).")},
	{[]string{"putLatency99"}, false, number(parseMillis, putPercentileDesc, "99")}, // 4.9.4+
	{[]string{"putLatency999"}, false, number(parseMillis, putPercentileDesc, "99.9")},
	{[]string{"putTps"}, true, rate("put")},
	{[]string{"getFoundTps"}, false, rate("get_found")},
	{[]string{"getMissTps"}, false, rate("get_miss")},
	{[]string{"getTotalTps"}, false, rate("get_total")},
	{[]string{"getTransferredTps", "getTransferedTps"}, false, rate("get_transferred")},
	{[]string{"remainTransientStoreBufferNumbs"}, true, transientPool},
	{[]string{"commitLogDiskRatio"}, true, diskRatio},
	{[]string{"putMessageDistributeTime"}, true, putDistribution},
}

// gauge and counter declare stall_rocketmq_<name> and send the key's
// value, converted by parse, as it.
func gauge(parse func(string) (float64, error), name, help string) emitFunc {
	return number(parse, brokerMetric(name, help, prometheus.GaugeValue))
}

func counter(parse func(string) (float64, error), name, help string) emitFunc {
	return number(parse, brokerMetric(name, help, prometheus.CounterValue))
}

// number sends the value, converted by parse, as metric with the broker
// labels and extra.
func number(parse func(string) (float64, error), metric collector.Metric, extra ...string) emitFunc {
	return func(e runtimeEmitter, raw string) error {
		v, err := parse(raw)
		if err == nil {
			metric.Send(e.ch, v, append(e.lv[:3:3], extra...)...)
		}
		return err
	}
}

var rateWindows = [3]string{"10s", "60s", "600s"}

// rate sends a "10s 60s 600s" rate triple, each window whose rate the
// broker knows.
func rate(op string) emitFunc {
	return func(e runtimeEmitter, raw string) error {
		tps, err := parseTps(raw)
		if err != nil {
			return err
		}
		for i, v := range tps {
			if !math.IsNaN(v) {
				rateDesc.Send(e.ch, v, append(e.lv[:3:3], op, rateWindows[i])...)
			}
		}
		return nil
	}
}

// transientPool: 2147483647 free buffers means the pool is disabled.
func transientPool(e runtimeEmitter, raw string) error {
	v, err := parseCount(raw)
	switch {
	case err != nil:
		return err
	case v == math.MaxInt32:
		transientPoolDesc.Send(e.ch, 0, e.lv...)
	default:
		transientPoolDesc.Send(e.ch, 1, e.lv...)
		transientFreeDesc.Send(e.ch, v, e.lv...)
	}
	return nil
}

// diskRatio: -1 means the broker could not stat the disk; no value rather
// than a fake one.
func diskRatio(e runtimeEmitter, raw string) error {
	v, err := parseFloat(raw)
	if err == nil && v >= 0 {
		diskRatioDesc.Send(e.ch, v, e.lv...)
	}
	return err
}

func putDistribution(e runtimeEmitter, raw string) error {
	return e.b.observeDistribution(raw, e.b.version, e.now)
}

// keyError counts one missing or bad runtime-info key; b.mu must be held.
func (b *broker) keyError(problems *collector.Problems, key string, err error) {
	b.keyErrors[key]++
	problems.Add("rocketmq_runtime_info_key_"+key, 1, fmt.Errorf("broker %s: %s: %w", b.addr, key, err))
}

var errMissing = errors.New("missing")

func lookup(kv map[string]string, keys []string) (string, string, bool) {
	for _, k := range keys {
		if v, ok := kv[k]; ok {
			return k, v, true
		}
	}
	return keys[0], "", false
}

// emitRuntime turns one runtime-info table into metrics (runtimeKeys);
// b.mu must be held.
func (b *broker) emitRuntime(ch chan<- prometheus.Metric, kv map[string]string, now time.Time, problems *collector.Problems) {
	b.version = collector.Label(kv["brokerVersionDesc"])
	infoDesc.Send(ch, 1, append(b.labels[:3:3], b.version, collector.Label(b.addr))...)
	e := runtimeEmitter{b: b, ch: ch, lv: b.labels[:], now: now}
	for _, k := range runtimeKeys {
		key, raw, ok := lookup(kv, k.keys)
		if !ok {
			if k.required {
				b.keyError(problems, key, errMissing)
			}
			continue
		}
		if err := k.emit(e, raw); err != nil {
			b.keyError(problems, key, err)
		}
	}
}
