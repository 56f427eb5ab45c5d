package collector

import (
	"errors"
	"io/fs"
	"log/slog"
	"sync"
	"time"
)

// stateLogInterval is the least time between two warnings of one
// StateLog while it keeps failing.
const stateLogInterval = time.Minute

// StateLog logs a state that fails and recovers — a collector's scrape, a
// Redis target or RocketMQ broker, a background reader — the same way
// everywhere: a warning at the first failure, and again when the reason
// changes (at most once a minute: a flapping target cannot flood the
// log); every other failure at debug level; one info line on recovery.
// reason is a short word from a fixed set (a down reason, "timeout");
// the error says the detail. The policy is documented once, for users,
// in README.md ("Logs"), not appended to each line: the warning says what
// happened. It is safe for concurrent use.
type StateLog struct {
	logger *slog.Logger

	mu           sync.Mutex
	failing      bool
	warnedReason string
	warnedAt     time.Time
}

// NewStateLog returns the log of one state; logger carries what names it
// (collector=…, addr=…).
func NewStateLog(logger *slog.Logger) *StateLog { return &StateLog{logger: logger} }

// Failed records a failure: msg says what failed and what it costs
// ("redis target refused the connection"), reason why, err the detail
// (nil when msg and reason say it all: a state, not an error), args more
// key-value pairs.
func (s *StateLog) Failed(msg, reason string, err error, args ...any) {
	now := time.Now()
	s.mu.Lock()
	warn := !s.failing || reason != s.warnedReason && now.Sub(s.warnedAt) >= stateLogInterval
	s.failing = true
	if warn {
		s.warnedReason, s.warnedAt = reason, now
	}
	s.mu.Unlock()
	args = append(args, "reason", reason)
	if err != nil {
		args = append(args, "err", err)
	}
	if warn {
		s.logger.Warn(msg, args...)
	} else {
		s.logger.Debug(msg, args...)
	}
}

// OK records a success; the first one after a failure logs msg at info
// level.
func (s *StateLog) OK(msg string, args ...any) {
	s.mu.Lock()
	was := s.failing
	s.failing = false
	s.mu.Unlock()
	if was {
		s.logger.Info(msg, args...)
	}
}

// Failing reports whether the last record was a failure.
func (s *StateLog) Failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

// ReadReason is the StateLog reason of a file or directory that cannot be
// read: "missing" (it does not exist), "permission" (the exporter may not
// read it), or "unreadable" (any other error).
func ReadReason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case errors.Is(err, fs.ErrPermission):
		return "permission"
	}
	return "unreadable"
}
