package rocketmq

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// Parsers of RocketMQ runtime-info values (GET_BROKER_RUNTIME_INFO). Every
// value the broker sends is a string; these turn one into base units or
// report why not, so one bad key costs one metric, never the broker.

// errNull is a value the broker writes as the literal "null": no
// data yet (putMessageDistributeTime during the first minute), not an error.
var errNull = errors.New("null (no data yet)")

// distBounds are the upper bounds, in seconds, of the 13
// putMessageDistributeTime buckets (<=0ms, 0~10ms … 5~10s, 10s~). The broker
// puts a latency of exactly 10 ms in the 10~50ms bucket (its rules are
// "< 10", "< 50" …), a Prometheus bucket le="0.01" includes 10 ms: the
// difference is one millisecond at each edge.
var distBounds = [13]float64{0, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, math.Inf(1)}

// parseDistribution parses putMessageDistributeTime (or the tail of
// a [PAGECACHERT] log line): 13 tokens "[label]:count" separated by spaces,
// in bucket order. It returns errNull for "null".
func parseDistribution(s string) ([13]uint64, error) {
	var out [13]uint64
	s = strings.TrimSpace(s)
	if s == "null" || s == "" {
		return out, errNull
	}
	fields := strings.Fields(s)
	if len(fields) != 13 {
		return out, fmt.Errorf("%d buckets, want 13", len(fields))
	}
	for i, f := range fields {
		want := "[" + remoting.DistributionLabels[i] + "]:"
		if !strings.HasPrefix(f, want) {
			return out, fmt.Errorf("bucket %d is %s, want %s<count>", i, remote.Shown(f), want)
		}
		n, err := strconv.ParseUint(f[len(want):], 10, 64)
		if err != nil {
			return out, fmt.Errorf("bucket %s: %w", remoting.DistributionLabels[i], err)
		}
		out[i] = n
	}
	return out, nil
}

var sizeUnits = map[string]float64{
	"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60,
}

// parseSize parses the broker's human-readable byte counts
// (remainHowManyDataToFlush, commitLogDirCapacity parts): "0 B", "512 B",
// "12.3 MiB", and "1,5 GiB" when the JVM's locale writes a comma decimal
// point. The result is in bytes; the broker rounded it to 3 significant
// digits, so it is exact only below 1 KiB.
func parseSize(s string) (float64, error) {
	s = strings.TrimSpace(s)
	num, unit, ok := strings.Cut(s, " ")
	if !ok {
		return 0, fmt.Errorf("size %s has no unit", remote.Shown(s))
	}
	mult, ok := sizeUnits[strings.TrimSpace(unit)]
	if !ok {
		return 0, fmt.Errorf("size %s: unknown unit", remote.Shown(s))
	}
	if strings.Count(num, ",") == 1 && !strings.Contains(num, ".") {
		num = strings.Replace(num, ",", ".", 1)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("size %s: bad number", remote.Shown(s))
	}
	return v * mult, nil
}

// parseFloat parses a plain number ("35", "2543.00", "0.4521"); NaN and
// infinities are not numbers.
func parseFloat(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "null" {
		return 0, errNull
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a number: %s", remote.Shown(s))
	}
	return v + 0, nil // + 0: "-0" is 0
}

// parseCount parses a count, a size or a capacity: a number that cannot be
// negative.
func parseCount(s string) (float64, error) {
	v, err := parseFloat(s)
	if err == nil && v < 0 {
		return 0, fmt.Errorf("negative count %s", remote.Shown(s))
	}
	return v, err
}

// maxMillis bounds every duration a broker reports: how long the put lock
// has been held, the oldest queued request's age, the longest put since
// boot, a window's put percentile. Each is at most the broker's uptime,
// and no broker stalls for a week unnoticed: the broker itself fails sends
// that waited 200 ms, producers give up after 3 s. A larger value is not a
// measurement ("99999999999999999999" was once exported as 1e17 s).
const maxMillis = 7 * 24 * 3600 * 1000

// parseMillis parses a runtime-info duration in milliseconds into seconds.
// A negative value, or one over maxMillis, is an error: no broker measures
// that, so it is bad input, not a value to export.
func parseMillis(s string) (float64, error) {
	v, err := parseFloat(s)
	switch {
	case err != nil:
		return 0, err
	case v < 0:
		return 0, fmt.Errorf("negative duration %s ms", remote.Shown(s))
	case v > maxMillis:
		return 0, fmt.Errorf("duration %s ms is longer than 7 days: not a measurement", remote.Shown(s))
	}
	return v / 1000, nil
}

// parseConfigMillis parses a configured duration (osPageCacheBusyTimeOutMills,
// waitTimeMillsInSendQueue) into seconds. It has no upper bound: an
// operator may set a huge value to turn a check off, and that is the
// setting in force.
func parseConfigMillis(s string) (float64, error) {
	v, err := parseCount(s)
	return v / 1000, err
}

// parseTps parses "10s 60s 600s" rates: three space-separated
// doubles, any of which may be empty early after boot. Missing tokens are
// reported as NaN.
func parseTps(s string) ([3]float64, error) {
	out := [3]float64{math.NaN(), math.NaN(), math.NaN()}
	parts := strings.Split(s, " ")
	if len(parts) > 3 {
		return out, fmt.Errorf("%d rate tokens, want at most 3", len(parts))
	}
	for i, p := range parts {
		if p == "" {
			continue
		}
		v, err := parseFloat(p)
		if err != nil {
			return out, err
		}
		out[i] = v
	}
	return out, nil
}

// reportsWindowInProgress is true for brokers before 4.9.1, whose
// putMessageDistributeTime is the minute in progress rather than the last
// completed one. desc is brokerVersionDesc ("V4_9_7", "V5_3_3_SNAPSHOT");
// one of another shape is taken for a newer broker.
func reportsWindowInProgress(desc string) bool {
	parts := strings.Split(strings.TrimPrefix(desc, "V"), "_")
	if len(parts) < 3 {
		return false
	}
	v := make([]int, 3)
	for i := range v {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return false
		}
		v[i] = n
	}
	return slices.Compare(v, []int{4, 9, 1}) < 0
}

// putHistogram accumulates putMessageDistributeTime windows into
// cumulative bucket counts, so rate() works on the exported histogram.
//
// From 4.9.1 the broker reports the last COMPLETED 60 s window; a window is
// added once when its text changes. Two consecutive windows with exactly the
// same counts cannot be told apart by their text, so an unchanged non-empty
// window is counted again only after 90 s (one 60 s period plus half a
// period of slack for the broker's scheduling drift): a repeat is counted at
// most 30 s late and never twice. Before 4.9.1 the broker reports the window
// in progress, so growth since the previous look is added, and a shrink
// starts a new window (the end of the previous one since the last look is
// lost). Windows between two looks more than 60 s apart are lost: poll at
// least once a minute (the 1 s sampler does).
type putHistogram struct {
	cum      [13]uint64
	last     [13]uint64
	lastSeen time.Time // when last was first seen, advanced by 60 s per repeat
	have     bool
}

const putWindow = 60 * time.Second

func (h *putHistogram) observe(dist [13]uint64, inProgress bool, now time.Time) {
	switch {
	case !h.have:
		h.add(dist)
		h.lastSeen = now
	case inProgress:
		grew := true
		for i := range dist {
			if dist[i] < h.last[i] {
				grew = false
			}
		}
		if grew {
			for i := range dist {
				h.cum[i] += dist[i] - h.last[i]
			}
		} else {
			h.add(dist)
		}
	case dist != h.last:
		h.add(dist)
		h.lastSeen = now
	default:
		var n uint64
		for _, c := range dist {
			n += c
		}
		if n > 0 && now.Sub(h.lastSeen) >= putWindow+putWindow/2 {
			h.add(dist)
			h.lastSeen = h.lastSeen.Add(putWindow)
		}
	}
	h.last, h.have = dist, true
}

func (h *putHistogram) add(d [13]uint64) {
	for i := range d {
		h.cum[i] += d[i]
	}
}

// buckets are the cumulative buckets (without +Inf) and the count.
func (h *putHistogram) buckets() (map[float64]uint64, uint64) {
	return cumulativeBuckets(h.cum[:], distBounds[:12])
}

// cumulativeBuckets turns per-bucket counts into the cumulative buckets
// prometheus.MustNewConstHistogram takes: counts[i] observations fell in
// bucket i, whose upper bound is bounds[i]; counts past the last bound are
// the +Inf bucket and only add to the total. It returns the buckets and the
// total count.
func cumulativeBuckets(counts []uint64, bounds []float64) (map[float64]uint64, uint64) {
	out := make(map[float64]uint64, len(bounds))
	var run uint64
	for i, c := range counts {
		run += c
		if i < len(bounds) {
			out[bounds[i]] = run
		}
	}
	return out, run
}
