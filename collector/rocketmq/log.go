package rocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

// The broker log follower: on the broker host (--rocketmq.log-dir) it reads
// store.log and watermark.log as they grow, from their end at exporter start,
// across rotation, and turns the few lines that matter into metrics.
//
// Rotation: logback renames the file away, or (the broker's shipped
// configuration) gzips it into otherdays/store.<n>.log.gz and deletes it,
// and creates a new one. The follower notices the new inode at the path,
// reads what is left in the old file (still open), then any file rotated
// away entirely since the last look (logrotation.go), and continues with the
// new one from its start. A file that shrinks under the same inode
// (truncated or rewritten in place) is read again from its start. A missing
// directory or file, a line cut short by rotation or longer than
// maxLogLine, and a matching line whose number cannot be read are each
// counted in stall_collector_parse_errors_total and logged once; none stops
// the follower.

// maxLogLine is the longest line kept; longer ones are counted as
// truncated and skipped. Broker lines are a few hundred bytes.
const maxLogLine = 64 << 10

// logTZ is the broker's log time zone: the logback pattern pins GMT+8
// whatever the host's zone.
var logTZ = time.FixedZone("GMT+8", 8*3600)

var logEvents = []string{"lock_slow", "put_slow", "mapped_file_slow", "transient_store_pool_exhausted", "pagecache_rt", "page_cache_busy"}

var logPools = map[string]string{"send": "send", "pull": "pull", "litepull": "lite_pull", "query": "query",
	"transaction": "transaction", "endtransaction": "transaction", "ack": "ack", "heartbeat": "heartbeat",
	"admin": "admin", "clientmanage": "client_manage", "consumermanage": "consumer_manage", "reply": "reply"}

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
	logLockHeldFamily = collector.DeclareHistogram("rocketmq_log_lock_held_seconds",
		"CommitLog put-lock holds over 500 ms, from store.log '[NOTIFYME]putMessage(s) in lock cost time(ms)=N'.",
		slowBuckets)
	logPageCacheBusyFamily = collector.DeclareHistogram("rocketmq_log_page_cache_busy_lock_held_seconds",
		"How long the put lock had been held when store.log reported '[NOTIFYME]page cache is busy'.",
		slowBuckets)
	logPutSlowFamily = collector.DeclareHistogram("rocketmq_log_put_slow_seconds",
		"Whole puts over 500 ms, from store.log's slow-put lines ('not in lock elapsed time', 'CommitLog#putMessage cost').",
		slowBuckets)
	logMappedFileFamily = collector.DeclareHistogram("rocketmq_log_mapped_file_create_seconds",
		"Creations of a CommitLog mapped file over 10 ms, from store.log 'create mappedFile spent time(ms) N'.",
		[]float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10})
	logQueueSizeFamily = collector.DeclareGauge("rocketmq_log_queue_size",
		"Requests queued for a broker thread pool at the last watermark.log '[WATERMARK] <Pool> Queue Size: N' line (written every second).",
		"pool")
	logQueueWaitFamily = collector.DeclareHistogram("rocketmq_log_queue_head_wait_seconds",
		"Age of the oldest queued request in each watermark.log [WATERMARK] line, by thread pool.",
		[]float64{0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.5, 1, 5}, "pool")
	// Sent as a const histogram (the broker logs whole windows, not
	// observations), so it has a Desc rather than a vector and no buckets
	// of its own.
	logPutLatencyFamily = collector.DeclareHistogram("rocketmq_log_put_latency_seconds",
		"Whole put latency from store.log's 60 s [PAGECACHERT] lines, cumulative since exporter start.",
		nil)
	logPutLatencyDesc = logPutLatencyFamily.Desc()
)

// logMetrics are the follower's metric vectors, created per follower so
// that tests and /probe instances never share counts.
type logMetrics struct {
	events     *prometheus.CounterVec
	lines      *prometheus.CounterVec
	rotations  *prometheus.CounterVec
	lastTime   *prometheus.GaugeVec
	lockHeld   *prometheus.HistogramVec
	busyHeld   *prometheus.HistogramVec
	putSlow    *prometheus.HistogramVec
	mappedFile *prometheus.HistogramVec
	queueSize  *prometheus.GaugeVec
	queueWait  *prometheus.HistogramVec
	putLatency [13]uint64 // cumulative PAGECACHERT buckets
	putWindows bool
}

func newLogMetrics() *logMetrics {
	m := &logMetrics{
		events:     logEventsFamily.CounterVec(),
		lines:      logLinesFamily.CounterVec(),
		rotations:  logRotationsFamily.CounterVec(),
		lastTime:   logLastTimeFamily.GaugeVec(),
		lockHeld:   logLockHeldFamily.HistogramVec(),
		busyHeld:   logPageCacheBusyFamily.HistogramVec(),
		putSlow:    logPutSlowFamily.HistogramVec(),
		mappedFile: logMappedFileFamily.HistogramVec(),
		queueSize:  logQueueSizeFamily.GaugeVec(),
		queueWait:  logQueueWaitFamily.HistogramVec(),
	}
	for _, e := range logEvents {
		m.events.WithLabelValues(e)
	}
	return m
}

// logFollower follows the broker logs of one directory.
type logFollower struct {
	dir      string
	problems *collector.Problems
	logger   *slog.Logger
	tails    []*tail

	mu         sync.Mutex // guards m.putLatency and dirMissing, serialises poll
	m          *logMetrics
	dirMissing bool
}

func newLogFollower(dir string, problems *collector.Problems, logger *slog.Logger) *logFollower {
	l := &logFollower{dir: dir, problems: problems, logger: logger, m: newLogMetrics()}
	for _, name := range []string{"store.log", "watermark.log"} {
		l.m.lines.WithLabelValues(name)
		l.m.rotations.WithLabelValues(name)
		l.tails = append(l.tails, &tail{name: name, path: filepath.Join(dir, name), buf: make([]byte, 32<<10)})
	}
	return l
}

func (l *logFollower) run(ctx context.Context, every time.Duration) {
	l.poll()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, tl := range l.tails {
				tl.close()
			}
			return
		case <-t.C:
			l.poll()
		}
	}
}

// poll reads whatever the files gained since the last poll.
func (l *logFollower) poll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := os.Stat(l.dir); err != nil {
		if !l.dirMissing {
			l.dirMissing = true
			l.problems.Add("rocketmq log dir unreadable", 1, err)
		}
		for _, t := range l.tails {
			t.close()
			t.opened = true // files that appear with the directory are new: read them whole
		}
		return
	}
	l.dirMissing = false
	for _, t := range l.tails {
		t.poll(l)
	}
}

func (l *logFollower) send(ch chan<- prometheus.Metric) {
	l.m.events.Collect(ch)
	l.m.lines.Collect(ch)
	l.m.rotations.Collect(ch)
	l.m.lastTime.Collect(ch)
	l.m.lockHeld.Collect(ch)
	l.m.busyHeld.Collect(ch)
	l.m.putSlow.Collect(ch)
	l.m.mappedFile.Collect(ch)
	l.m.queueSize.Collect(ch)
	l.m.queueWait.Collect(ch)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m.putWindows {
		buckets, count := cumulativeBuckets(l.m.putLatency[:], distBounds[:12])
		ch <- prometheus.MustNewConstHistogram(logPutLatencyDesc, count, math.NaN(), buckets)
	}
}

// tail follows one file.
type tail struct {
	name, path string
	f          *os.File
	ino        uint64
	off        int64
	opened     bool // a file was opened before: later files are read from their start
	missing    bool // currently absent (counted once per absence)
	partial    []byte
	skipping   bool // inside an overlong line, dropping bytes up to its newline
	buf        []byte
	seen       map[fileID]bool // rotated-away files present when the followed file was opened
	done       []readFile      // the last files read to their end, newest last
}

func (t *tail) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func (t *tail) poll(l *logFollower) {
	if t.f == nil && !t.open(l) {
		return
	}
	t.drain(l)
	fi, err := os.Stat(t.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return // renamed away, the new file is not there yet: keep the old one
	case err != nil:
		l.problems.Add("rocketmq log stat", 1, err)
		return
	case inode(fi) != t.ino:
		t.drain(l) // lines written between the read and the rename
		t.endOfFile(l, t.path)
		t.doneWith(t.ino, t.off)
		// Files created and rotated away since the last poll (more than one
		// rotation between two polls): read whole, oldest first.
		for _, f := range t.middleFiles(l) {
			t.readWhole(l, f)
			t.endOfFile(l, f.path)
			l.m.rotations.WithLabelValues(t.name).Inc()
		}
		t.close()
		l.m.rotations.WithLabelValues(t.name).Inc()
		if t.open(l) {
			t.drain(l)
		}
	case fi.Size() < t.off:
		l.problems.Add("rocketmq log file truncated in place", 1, fmt.Errorf("%s shrank from %d to %d bytes; reading it again from the start", t.path, t.off, fi.Size()))
		t.partial, t.skipping = t.partial[:0], false
		if _, err := t.f.Seek(0, io.SeekStart); err == nil {
			t.off = 0
			t.drain(l)
		}
	}
}

// open opens the file; the first file of the follower's life is read from
// its end, any later one from its start.
func (t *tail) open(l *logFollower) bool {
	f, err := os.Open(t.path)
	if err != nil {
		if !t.missing {
			t.missing = true
			l.problems.Add("rocketmq log file missing", 1, err)
		}
		t.opened = true // a file that appears later is new: read it whole
		return false
	}
	t.missing = false
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		l.problems.Add("rocketmq log stat", 1, err)
		return false
	}
	t.f, t.ino, t.off = f, inode(fi), 0
	if !t.opened {
		if off, err := f.Seek(0, io.SeekEnd); err == nil {
			t.off = off
		}
	}
	t.opened = true
	t.seen = t.rotatedFiles(l)
	return true
}

// endOfFile ends the file that was being read: a last line without its
// newline was cut short.
func (t *tail) endOfFile(l *logFollower, path string) {
	if len(t.partial) > 0 || t.skipping {
		l.problems.Add("rocketmq log line truncated", 1, fmt.Errorf("%s: last line of the rotated file has no newline", path))
	}
	t.partial, t.skipping = t.partial[:0], false
}

// drain reads to the current end of the open file, handing complete lines
// to l.line.
func (t *tail) drain(l *logFollower) {
	t.off += t.consume(l, t.f, t.path)
}

// consume reads r to its end, handing complete lines to l.line, and returns
// the number of bytes read. A line may continue from the previous call
// (t.partial).
func (t *tail) consume(l *logFollower, r io.Reader, path string) int64 {
	var total int64
	for {
		n, err := r.Read(t.buf)
		total += int64(n)
		data := t.buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if !t.skipping {
					if len(t.partial)+len(data) > maxLogLine {
						l.problems.Add("rocketmq log line truncated", 1, fmt.Errorf("%s: line over %d bytes skipped", path, maxLogLine))
						t.partial, t.skipping = t.partial[:0], true
					} else {
						t.partial = append(t.partial, data...)
					}
				}
				break
			}
			if t.skipping {
				t.skipping = false
			} else if len(t.partial) > 0 {
				t.partial = append(t.partial, data[:i]...)
				if len(t.partial) > maxLogLine {
					l.problems.Add("rocketmq log line truncated", 1, fmt.Errorf("%s: line over %d bytes skipped", path, maxLogLine))
				} else {
					l.line(t.name, t.partial)
				}
				t.partial = t.partial[:0]
			} else {
				l.line(t.name, data[:i])
			}
			data = data[i+1:]
		}
		if err != nil || n == 0 {
			if err != nil && err != io.EOF {
				l.problems.Add("rocketmq log read", 1, fmt.Errorf("%s: %w", path, err))
			}
			return total
		}
	}
}

// line handles one complete line of file.
func (l *logFollower) line(file string, line []byte) {
	l.m.lines.WithLabelValues(file).Inc()
	ts, msg, ok := splitLogLine(line)
	if !ok {
		return // a continuation line (stack trace) or another format
	}
	l.m.lastTime.WithLabelValues(file).Set(float64(ts.Unix()))
	if err := l.message(msg); err != nil {
		l.problems.Add("rocketmq log line malformed", 1, fmt.Errorf("%s: %w: %.200q", file, err, line))
	}
}

// splitLogLine splits "yyyy-MM-dd HH:mm:ss[,SSS] LEVEL thread - msg"
// into the GMT+8 timestamp and the message.
func splitLogLine(line []byte) (time.Time, []byte, bool) {
	if len(line) < 19 {
		return time.Time{}, nil, false
	}
	ts, err := time.ParseInLocation("2006-01-02 15:04:05", string(line[:19]), logTZ)
	if err != nil {
		return time.Time{}, nil, false
	}
	rest := line[19:]
	if len(rest) > 4 && rest[0] == ',' {
		if ms, err := strconv.Atoi(string(rest[1:4])); err == nil {
			ts = ts.Add(time.Duration(ms) * time.Millisecond)
			rest = rest[4:]
		}
	}
	i := bytes.Index(rest, []byte(" - "))
	if i < 0 {
		return ts, nil, true
	}
	return ts, rest[i+3:], true
}

// logLine is one kind of broker log line: a message containing tag is
// handled by handle, which gets the text after the tag.
type logLine struct {
	tag    []byte
	handle func(m *logMetrics, rest []byte) error
}

// logLines are the lines the follower turns into metrics, store.log's and
// watermark.log's alike, in match order (the first tag found in a message
// wins); a new spelling is one row. Lines matching no tag are only counted
// in lines_total.
//
// The slow-lock and slow-put warnings changed spelling over the versions
// (read from the broker's CommitLog.java and DefaultMessageStore.java):
// 3.x writes "putMessage in lock eclipse time(ms) N" (3.5+ with a
// [NOTIFYME] prefix) and "putMessage not in lock eclipse time(ms) N" (both
// over 1 s), 4.0–4.6 "[NOTIFYME]putMessage(s) in lock cost time(ms)=N" and
// "putMessage not in lock eclipse time(ms)=N", 4.7–4.9 "… not in lock
// elapsed time(ms)=N", 5.x "CommitLog#putMessage cost Nms" for single
// messages and still "not in lock eclipse time(ms)=N" for batches.
var logLines = []logLine{
	{[]byte("putMessage in lock cost time(ms)="), timed("lock_slow", lockHeldHist)},
	{[]byte("putMessages in lock cost time(ms)="), timed("lock_slow", lockHeldHist)},
	{[]byte("putMessage in lock eclipse time(ms)"), timed("lock_slow", lockHeldHist)},
	{[]byte("not in lock elapsed time(ms)="), timed("put_slow", putSlowHist)},
	{[]byte("not in lock eclipse time(ms)"), timed("put_slow", putSlowHist)},
	{[]byte("CommitLog#putMessage cost "), timed("put_slow", putSlowHist)},
	{[]byte("create mappedFile spent time(ms) "), timed("mapped_file_slow", mappedFileHist)},
	{[]byte("create mapedFile spent time(ms) "), timed("mapped_file_slow", mappedFileHist)}, // 3.x
	{[]byte("TransientStorePool is not enough"), counted("transient_store_pool_exhausted")},
	{[]byte("page cache is busy"), pageCacheBusy},
	{[]byte("[PAGECACHERT]"), pageCacheRT},
	{[]byte("[WATERMARK] "), watermark},
}

// The histograms timed lines observe into.
var (
	lockHeldHist   = func(m *logMetrics) *prometheus.HistogramVec { return m.lockHeld }
	putSlowHist    = func(m *logMetrics) *prometheus.HistogramVec { return m.putSlow }
	mappedFileHist = func(m *logMetrics) *prometheus.HistogramVec { return m.mappedFile }
)

// timed handles a line whose tag is followed by a duration in milliseconds
// (after one '=' or ' ', for the spellings whose tag ends before it): it
// counts event and observes the duration in the histogram hist returns.
func timed(event string, hist func(*logMetrics) *prometheus.HistogramVec) func(*logMetrics, []byte) error {
	return func(m *logMetrics, rest []byte) error {
		if len(rest) > 0 && (rest[0] == '=' || rest[0] == ' ') {
			rest = rest[1:]
		}
		ms, err := leadingInt(rest)
		if err != nil {
			return fmt.Errorf("%s: %w", event, err)
		}
		m.events.WithLabelValues(event).Inc()
		hist(m).WithLabelValues().Observe(float64(ms) / 1000)
		return nil
	}
}

// counted handles a line that is only counted, as event.
func counted(event string) func(*logMetrics, []byte) error {
	return func(m *logMetrics, _ []byte) error {
		m.events.WithLabelValues(event).Inc()
		return nil
	}
}

var tagBusyLockTime = []byte("lock time(ms)=")

// pageCacheBusy handles "[NOTIFYME]page cache is busy, CPUBusyFlag=…,
// OSPageCacheBusyFlag=…, lock time(ms)=N": the broker saw the put lock held
// for N ms and declared the page cache busy (incident 5). N is a hold still
// in progress; it goes to its own histogram, since the same hold is logged
// again, whole, by the "in lock cost" line when it ends.
func pageCacheBusy(m *logMetrics, rest []byte) error {
	rest, ok := after(rest, tagBusyLockTime)
	if !ok {
		return errors.New("page cache busy without lock time(ms)")
	}
	ms, err := leadingInt(rest)
	if err != nil {
		return fmt.Errorf("page cache busy lock time: %w", err)
	}
	m.events.WithLabelValues("page_cache_busy").Inc()
	m.busyHeld.WithLabelValues().Observe(float64(ms) / 1000)
	return nil
}

var (
	tagDist      = []byte("PutMessageDistributeTime ")
	tagQueueSize = []byte(" Queue Size: ")
	tagSlowTime  = []byte("SlowTimeMills: ")
)

// pageCacheRT handles the 60 s "[PAGECACHERT] TotalPut N,
// PutMessageDistributeTime [<=0ms]:a … [10s~]:m " line of store.log.
func pageCacheRT(m *logMetrics, rest []byte) error {
	rest, ok := after(rest, tagDist)
	if !ok {
		return errors.New("[PAGECACHERT] without PutMessageDistributeTime")
	}
	dist, err := parseDistribution(string(rest))
	if err != nil {
		return fmt.Errorf("[PAGECACHERT]: %w", err)
	}
	m.events.WithLabelValues("pagecache_rt").Inc()
	for i, c := range dist {
		m.putLatency[i] += c
	}
	m.putWindows = true
	return nil
}

// watermark handles watermark.log's "[WATERMARK] <Pool> Queue Size: N
// SlowTimeMills: M" (4.9 writes only "Send" for the send pool).
func watermark(m *logMetrics, rest []byte) error {
	i := bytes.Index(rest, tagQueueSize)
	if i < 0 {
		return errors.New("[WATERMARK] without Queue Size")
	}
	pool := logPools[strings.ToLower(strings.ReplaceAll(string(rest[:i]), " ", ""))]
	if pool == "" {
		pool = "other"
	}
	size, err := leadingInt(rest[i+len(tagQueueSize):])
	if err != nil {
		return fmt.Errorf("[WATERMARK] size: %w", err)
	}
	slowAt, ok := after(rest, tagSlowTime)
	if !ok {
		return errors.New("[WATERMARK] without SlowTimeMills")
	}
	// A clock step could make the age negative: clamp it to 0.
	neg := len(slowAt) > 0 && slowAt[0] == '-'
	if neg {
		slowAt = slowAt[1:]
	}
	slow, err := leadingInt(slowAt)
	if err != nil {
		return fmt.Errorf("[WATERMARK] slow time: %w", err)
	}
	if neg {
		slow = 0
	}
	m.queueSize.WithLabelValues(pool).Set(float64(size))
	m.queueWait.WithLabelValues(pool).Observe(float64(slow) / 1000)
	return nil
}

// leadingInt parses the decimal digits at the start of b.
func leadingInt(b []byte) (int64, error) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > 18 {
		return 0, fmt.Errorf("no number at %.20q", b)
	}
	return strconv.ParseInt(string(b[:n]), 10, 64)
}

func after(msg, tag []byte) ([]byte, bool) {
	i := bytes.Index(msg, tag)
	if i < 0 {
		return nil, false
	}
	return msg[i+len(tag):], true
}

// message counts and measures one log message by the first row of logLines
// whose tag it contains; other messages are ignored.
func (l *logFollower) message(msg []byte) error {
	for _, ll := range logLines {
		if rest, ok := after(msg, ll.tag); ok {
			return ll.handle(l.m, rest)
		}
	}
	return nil
}
