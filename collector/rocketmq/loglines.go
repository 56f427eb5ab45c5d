package rocketmq

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The broker log lines the follower turns into metrics (log.go follows the
// files).

// logTZ is the broker's log time zone: the logback pattern pins GMT+8
// whatever the host's zone.
var logTZ = time.FixedZone("GMT+8", 8*3600)

// logLine is one kind of broker log line: a message containing tag counts
// as event (when not empty) once handle, which gets the text after the
// tag, has measured it (when not nil).
type logLine struct {
	tag    []byte
	event  string // a value of stall_rocketmq_log_events_total's event label
	handle func(m *logMetrics, rest []byte) error
}

// logLines are the lines the follower turns into metrics, store.log's and
// watermark.log's alike, in match order (the first tag found in a message
// wins); a new warning or a new spelling is one row. Lines matching no tag
// are only counted in lines_total.
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
	{[]byte("putMessage in lock cost time(ms)="), "lock_slow", timed(lockHeld)},
	{[]byte("putMessages in lock cost time(ms)="), "lock_slow", timed(lockHeld)},
	{[]byte("putMessage in lock eclipse time(ms)"), "lock_slow", timed(lockHeld)},
	{[]byte("not in lock elapsed time(ms)="), "put_slow", timed(putSlow)},
	{[]byte("not in lock eclipse time(ms)"), "put_slow", timed(putSlow)},
	{[]byte("CommitLog#putMessage cost "), "put_slow", timed(putSlow)},
	{[]byte("create mappedFile spent time(ms) "), "mapped_file_slow", timed(mappedFile)},
	{[]byte("create mapedFile spent time(ms) "), "mapped_file_slow", timed(mappedFile)}, // 3.x
	{[]byte("TransientStorePool is not enough"), "transient_store_pool_exhausted", nil},
	{[]byte("page cache is busy"), "page_cache_busy", pageCacheBusy},
	{[]byte("[PAGECACHERT]"), "pagecache_rt", pageCacheRT},
	{[]byte("[WATERMARK] "), "", watermark},
}

// line handles one complete line of file.
func (l *logFollower) line(file string, line []byte) {
	l.m.lines.WithLabelValues(file).Inc()
	ts, msg, ok := splitLogLine(line)
	if !ok {
		return // a continuation line (stack trace) or another format
	}
	l.m.lastTime.WithLabelValues(file).Set(float64(ts.Unix()))
	if err := l.m.message(msg); err != nil {
		l.problems.Add("rocketmq_log_line_malformed", 1, fmt.Errorf("%s: %w: %.200q", file, err, line))
	}
}

// message counts and measures one log message by the first row of logLines
// whose tag it contains; other messages are ignored.
func (m *logMetrics) message(msg []byte) error {
	for _, ll := range logLines {
		_, rest, ok := bytes.Cut(msg, ll.tag)
		if !ok {
			continue
		}
		if ll.handle != nil {
			if err := ll.handle(m, rest); err != nil {
				return fmt.Errorf("%s: %w", ll.tag, err)
			}
		}
		if ll.event != "" {
			m.events.WithLabelValues(ll.event).Inc()
		}
		return nil
	}
	return nil
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

// timed handles a line whose tag is followed by a duration in milliseconds
// (after one '=' or ' ', for the spellings whose tag ends before it): it
// observes the duration in the histogram slow[hist].
func timed(hist int) func(*logMetrics, []byte) error {
	return func(m *logMetrics, rest []byte) error {
		if len(rest) > 0 && (rest[0] == '=' || rest[0] == ' ') {
			rest = rest[1:]
		}
		ms, err := leadingInt(rest)
		if err != nil {
			return fmt.Errorf("duration: %w", err)
		}
		m.slow[hist].WithLabelValues().Observe(float64(ms) / 1000)
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
	_, rest, ok := bytes.Cut(rest, tagBusyLockTime)
	if !ok {
		return errors.New("page cache busy without lock time(ms)")
	}
	ms, err := leadingInt(rest)
	if err != nil {
		return fmt.Errorf("page cache busy lock time: %w", err)
	}
	m.slow[busyHeld].WithLabelValues().Observe(float64(ms) / 1000)
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
	_, rest, ok := bytes.Cut(rest, tagDist)
	if !ok {
		return errors.New("[PAGECACHERT] without PutMessageDistributeTime")
	}
	dist, err := parseDistribution(string(rest))
	if err != nil {
		return fmt.Errorf("[PAGECACHERT]: %w", err)
	}
	for i, c := range dist {
		m.putLatency[i] += c
	}
	m.putWindows = true
	return nil
}

// logPools name the thread pools of [WATERMARK] lines, by the line's pool
// name lower-cased without spaces.
var logPools = map[string]string{"send": "send", "pull": "pull", "litepull": "lite_pull", "query": "query",
	"transaction": "transaction", "endtransaction": "transaction", "ack": "ack", "heartbeat": "heartbeat",
	"admin": "admin", "clientmanage": "client_manage", "consumermanage": "consumer_manage", "reply": "reply"}

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
	_, slowAt, ok := bytes.Cut(rest, tagSlowTime)
	if !ok {
		return errors.New("[WATERMARK] without SlowTimeMills")
	}
	slow, err := leadingInt(bytes.TrimPrefix(slowAt, []byte("-")))
	if err != nil {
		return fmt.Errorf("[WATERMARK] slow time: %w", err)
	}
	if slowAt[0] == '-' {
		slow = 0 // a clock step made the age negative
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
