package rocketmq

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/logfollow"
)

// The broker log follower: on the broker host (--rocketmq.log-dir) it
// follows store.log and watermark.log with internal/logfollow — from their
// end at exporter start, across logback's rotations, into otherdays/ where
// the broker's shipped configuration archives them — and turns the few
// lines that matter into metrics (loglines.go). A line cut short by a
// rotation or longer than maxLogLine, a file truncated in place and a
// matching line whose number cannot be read are bad input, counted in
// stall_collector_parse_errors_total; a missing or unreadable directory or
// file is a state, logged when it starts and ends. None stops the follower.

// maxLogLine is the longest line kept; longer ones are counted as
// truncated and skipped. Broker lines are a few hundred bytes.
const maxLogLine = 64 << 10

// logArchiveDir is where the broker's logback configuration puts rotated
// logs, under the log directory.
const logArchiveDir = "otherdays"

// logFiles are the files followed, in the log directory.
var logFiles = []string{"store.log", "watermark.log"}

// logPollInterval is how often the follower reads the files.
const logPollInterval = time.Second

var slowBuckets = []float64{0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30}

// The log follower's metric families, documented at init whether or not a
// follower is configured; each follower builds its own vectors from them
// (newLogMetrics), so tests and followers never share counts.
var (
	logEventsFamily = collector.DeclareCounter("rocketmq_log_events_total",
		"Broker log lines by stall-related event, from store.log.",
		"event")
	logLinesFamily = collector.DeclareCounter("rocketmq_log_lines_total",
		"Lines read from each followed broker log file (store.log, watermark.log).",
		"file")
	logRotationsFamily = collector.DeclareCounter("rocketmq_log_rotations_total",
		"Times each followed broker log file was replaced by a new file at its path.",
		"file")
	logLastTimeFamily = collector.DeclareGauge("rocketmq_log_last_line_timestamp_seconds",
		"Unix time of the newest timestamped line read from each log file (the broker writes GMT+8 whatever the host zone).",
		"file")
	logQueueSizeFamily = collector.DeclareGauge("rocketmq_log_queue_size",
		"Requests queued for a broker thread pool at the last watermark.log '[WATERMARK] <Pool> Queue Size: N' line (written every second).",
		"pool")
	logQueueWaitFamily = collector.DeclareHistogram("rocketmq_log_queue_head_wait_seconds",
		"Age of the oldest queued request in each watermark.log [WATERMARK] line, by thread pool.",
		[]float64{0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.5, 1, 5}, "pool")
	// A const histogram: the broker logs whole windows, not observations.
	logPutLatencyDesc = collector.DeclareHistogram("rocketmq_log_put_latency_seconds",
		"Whole put latency from store.log's 60 s [PAGECACHERT] lines, cumulative since exporter start.",
		nil).Desc()
)

// The histograms of store.log's slow-operation warnings, by what the
// warning times; loglines.go's handlers observe into them.
const (
	lockHeld = iota
	busyHeld
	putSlow
	mappedFile
)

var slowFamilies = [...]collector.Stateful{
	lockHeld: collector.DeclareHistogram("rocketmq_log_lock_held_seconds",
		"CommitLog put-lock holds over 500 ms, from store.log '[NOTIFYME]putMessage(s) in lock cost time(ms)=N'.",
		slowBuckets),
	busyHeld: collector.DeclareHistogram("rocketmq_log_page_cache_busy_lock_held_seconds",
		"How long the put lock had been held when store.log reported '[NOTIFYME]page cache is busy'.",
		slowBuckets),
	putSlow: collector.DeclareHistogram("rocketmq_log_put_slow_seconds",
		"Whole puts over 500 ms, from store.log's slow-put lines ('not in lock elapsed time', 'CommitLog#putMessage cost').",
		slowBuckets),
	mappedFile: collector.DeclareHistogram("rocketmq_log_mapped_file_create_seconds",
		"Creations of a CommitLog mapped file over 10 ms, from store.log 'create mappedFile spent time(ms) N'.",
		[]float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10}),
}

// logMetrics are the follower's metric vectors, created per follower so
// that tests and /probe instances never share counts.
type logMetrics struct {
	events     *prometheus.CounterVec
	lines      *prometheus.CounterVec
	rotations  *prometheus.CounterVec
	lastTime   *prometheus.GaugeVec
	slow       [len(slowFamilies)]*prometheus.HistogramVec
	queueSize  *prometheus.GaugeVec
	queueWait  *prometheus.HistogramVec
	putLatency [13]uint64 // cumulative PAGECACHERT buckets
	putWindows bool
}

func newLogMetrics() *logMetrics {
	m := &logMetrics{
		events:    logEventsFamily.CounterVec(),
		lines:     logLinesFamily.CounterVec(),
		rotations: logRotationsFamily.CounterVec(),
		lastTime:  logLastTimeFamily.GaugeVec(),
		queueSize: logQueueSizeFamily.GaugeVec(),
		queueWait: logQueueWaitFamily.HistogramVec(),
	}
	for i, f := range slowFamilies {
		m.slow[i] = f.HistogramVec()
	}
	for _, ll := range logLines {
		if ll.event != "" {
			m.events.WithLabelValues(ll.event)
		}
	}
	return m
}

// logFollower follows the broker logs of one directory.
type logFollower struct {
	problems *collector.Problems
	dirState *collector.StateLog
	files    []followedFile

	mu sync.Mutex // guards m.putLatency, serialises poll
	m  *logMetrics
}

// followedFile is one log file and the state of reading it.
type followedFile struct {
	f     *logfollow.File
	state *collector.StateLog
}

func newLogFollower(dir string, problems *collector.Problems, logger *slog.Logger) *logFollower {
	l := &logFollower{problems: problems, m: newLogMetrics(),
		dirState: collector.NewStateLog(logger.With("dir", dir))}
	for _, name := range logFiles {
		l.m.lines.WithLabelValues(name)
		l.m.rotations.WithLabelValues(name)
		l.files = append(l.files, followedFile{
			f: logfollow.New(filepath.Join(dir, name), logfollow.Options{
				MaxLine:     maxLogLine,
				ArchiveDirs: []string{logArchiveDir},
				Line:        func(line []byte) { l.line(name, line) },
				Rotated:     func() { l.m.rotations.WithLabelValues(name).Inc() },
				Problem:     func(kind string, err error) { problems.Add("rocketmq_log_"+kind, 1, err) },
			}),
			state: collector.NewStateLog(logger.With("file", filepath.Join(dir, name))),
		})
	}
	return l
}

// run polls the files every logPollInterval until ctx is done.
func (l *logFollower) run(ctx context.Context) {
	l.poll()
	for collector.Sleep(ctx, logPollInterval) {
		l.poll()
	}
	for _, lf := range l.files {
		lf.f.Close()
	}
}

// poll reads whatever the files gained since the last poll. A directory
// that cannot be read is one state for both files.
func (l *logFollower) poll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	var dirErr error
	for _, lf := range l.files {
		err := lf.f.Poll()
		switch {
		case errors.Is(err, logfollow.ErrNoDir):
			dirErr = err
		case err != nil:
			lf.state.Failed("rocketmq log file cannot be read; its lines are not counted until it can", collector.ReadReason(err), err)
		default:
			lf.state.OK("rocketmq log file read again")
		}
	}
	if dirErr != nil {
		l.dirState.Failed("rocketmq log dir unreadable; nothing is counted from the broker logs until it can be read", collector.ReadReason(dirErr), dirErr)
	} else {
		l.dirState.OK("rocketmq log dir readable again")
	}
}

func (l *logFollower) send(ch chan<- prometheus.Metric) {
	m := l.m
	for _, c := range []prometheus.Collector{m.events, m.lines, m.rotations, m.lastTime,
		m.slow[lockHeld], m.slow[busyHeld], m.slow[putSlow], m.slow[mappedFile], m.queueSize, m.queueWait} {
		c.Collect(ch)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m.putWindows {
		buckets, count := cumulativeBuckets(l.m.putLatency[:], distBounds[:12])
		ch <- prometheus.MustNewConstHistogram(logPutLatencyDesc, count, math.NaN(), buckets)
	}
}
