package main

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/stall-exporter/stall_exporter/collector"
)

var refusedDesc = collector.NewMetric("exporter_requests_refused_total",
	"HTTP requests answered 503 because --web.max-requests (/metrics) or --web.max-probe-requests (/probe) requests were already running.",
	prometheus.CounterValue, "handler")

// limiter is one handler's concurrency budget. A refused request is
// answered 503, counted in stall_exporter_requests_refused_total (the
// limiter is its prometheus.Collector), and logged through a refusalLog.
type limiter struct {
	handler string // label value: metrics, probe
	flag    string // the flag that sets the budget, for messages
	slots   chan struct{}
	refusalLog
}

// newLimiter allows n concurrent requests; n == 0 means no limit.
func newLimiter(handler, flag string, n int, logger *slog.Logger) *limiter {
	l := &limiter{handler: handler, flag: flag, refusalLog: newRefusalLog(logger)}
	if n > 0 {
		l.slots = make(chan struct{}, n)
	}
	return l
}

// acquire takes a slot, or answers 503, counts and logs the refusal and
// returns false. A true return must be followed by release.
func (l *limiter) acquire(w http.ResponseWriter, r *http.Request) bool {
	if l.slots == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.count("refusing requests over the concurrency limit (at most one line per minute; every refusal is counted in stall_exporter_requests_refused_total)",
		"handler", l.handler, "limit", cap(l.slots), "flag", l.flag, "remote", r.RemoteAddr)
	http.Error(w, "too many concurrent requests ("+l.flag+")", http.StatusServiceUnavailable)
	return false
}

func (l *limiter) release() {
	if l.slots != nil {
		<-l.slots
	}
}

func (l *limiter) Collect(ch chan<- prometheus.Metric) {
	ch <- refusedDesc.New(float64(l.refused.Load()), l.handler)
}

func (*limiter) Describe(chan<- *prometheus.Desc) {}

// refusalLog counts refusals and logs them: the first at once, later ones
// as one summary line per minute at most, so a flood cannot flood the log.
// The limiters and the connection limit (conns.go) use it.
type refusalLog struct {
	logger           *slog.Logger
	refused, pending atomic.Uint64 // pending: refusals since the last log line
	every            rate.Sometimes
}

func newRefusalLog(logger *slog.Logger) refusalLog {
	return refusalLog{logger: logger, every: rate.Sometimes{Interval: refusalLogInterval}}
}

// refusalLogInterval is the least time between two refusal log lines.
const refusalLogInterval = time.Minute

// count counts one refusal and, when a line is due, logs msg with args and
// the number of refusals since the last line.
func (rl *refusalLog) count(msg string, args ...any) {
	rl.refused.Add(1)
	rl.pending.Add(1)
	rl.every.Do(func() { rl.logger.Warn(msg, append(args, "count_since_last_line", rl.pending.Swap(0))...) })
}
