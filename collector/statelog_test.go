package collector_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// messages returns the level and message of each record logs kept since
// the last call: its words up to the first key=value.
func messages(logs *collectortest.Logs) []string {
	var out []string
	for _, l := range logs.Take() {
		words := strings.Fields(l)
		i := slices.IndexFunc(words, func(w string) bool { return strings.Contains(w, "=") })
		if i < 0 {
			i = len(words)
		}
		out = append(out, strings.Join(words[:i], " "))
	}
	return out
}

// The first failure warns; the same reason again is debug; a new reason
// warns only once a minute has passed since the last warning, then for
// sure at its next failure; recovery is one info line.
func TestStateLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs, logger := collectortest.NewLogs(slog.LevelDebug)
		s := collector.NewStateLog(logger)
		s.OK("recovered")
		s.Failed("down", "timeout", errors.New("i/o timeout"))
		s.Failed("down", "timeout", errors.New("i/o timeout"))
		collectortest.Advance(10 * time.Second)
		s.Failed("down", "auth", errors.New("WRONGPASS"))
		collectortest.Advance(time.Minute)
		s.Failed("down", "auth", errors.New("WRONGPASS"))
		s.Failed("down", "auth", errors.New("WRONGPASS"))
		if !s.Failing() {
			t.Error("Failing() = false while failing")
		}
		s.OK("recovered")
		s.OK("recovered")
		s.Failed("down", "auth", errors.New("WRONGPASS"))
		want := []string{"WARN down", "DEBUG down", "DEBUG down", "WARN down", "DEBUG down", "INFO recovered", "WARN down"}
		if got := messages(logs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("log:\n%q\nwant\n%q", got, want)
		}
	})
}

// Retry waits Min after the first failure, doubles up to Max, starts
// from Min again once an attempt opened its source, and ends at ErrStop
// or when ctx is done, at once, whatever the wait.
func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs, logger := collectortest.NewLogs(slog.LevelDebug)
		state := collector.NewStateLog(logger)
		var starts []time.Duration
		begin := time.Now()
		n := 0
		collector.Retry(t.Context(), collector.Backoff{Min: time.Second, Max: 4 * time.Second}, state, "reader", func(_ context.Context, opened func()) error {
			starts = append(starts, time.Since(begin))
			n++
			switch n {
			case 5: // opens, reads for 10 s, fails
				opened()
				collectortest.Advance(10 * time.Second)
				return errors.New("EIO")
			case 7:
				return fmt.Errorf("read: %w", collector.ErrStop)
			}
			return errors.New("ENOENT")
		})
		// Waits: 1, 2, 4, 4 (capped), then open at 11 s, read until 21 s,
		// wait 1 (reset), fail, wait 2, stop.
		want := []time.Duration{0, 1, 3, 7, 11, 22, 24}
		for i := range want {
			want[i] *= time.Second
		}
		if fmt.Sprint(starts) != fmt.Sprint(want) {
			t.Errorf("attempts at %v, want %v", starts, want)
		}
		wantLog := []string{
			"WARN reader cannot be opened; retrying with backoff", "DEBUG reader cannot be opened; retrying with backoff",
			"DEBUG reader cannot be opened; retrying with backoff", "DEBUG reader cannot be opened; retrying with backoff",
			"INFO reader open again", "WARN reader stopped; reopening with backoff",
			"DEBUG reader cannot be opened; retrying with backoff",
		}
		if got := messages(logs); fmt.Sprint(got) != fmt.Sprint(wantLog) {
			t.Errorf("log:\n%q\nwant\n%q", got, wantLog)
		}

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(30*time.Second, cancel)
		start := time.Now()
		collector.Retry(ctx, collector.Backoff{Min: time.Hour, Max: time.Hour}, state, "reader", func(context.Context, func()) error {
			return errors.New("ENOENT")
		})
		if took := time.Since(start); took != 30*time.Second {
			t.Errorf("Retry returned %v after it started, want at cancel (30s)", took)
		}
	})
}

// ReadReason names a failed read the one way for every collector.
func TestReadReason(t *testing.T) {
	dir := t.TempDir()
	_, missing := os.ReadFile(filepath.Join(dir, "absent"))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{missing, "missing"},
		{&fs.PathError{Op: "open", Path: "/proc/vmstat", Err: fs.ErrPermission}, "permission"},
		{fmt.Errorf("poll: %w", syscall.EIO), "unreadable"},
	} {
		if got := collector.ReadReason(tc.err); got != tc.want {
			t.Errorf("ReadReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// Delay doubles from Min for each failure in a row and stops at Max, also
// when Min is above it.
func TestBackoffDelay(t *testing.T) {
	b := collector.Backoff{Min: 2 * time.Second, Max: 30 * time.Second}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, b.Delay(n))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Delay(1..6) = %v, want %v", got, want)
	}
	if d := (collector.Backoff{Min: time.Minute, Max: 30 * time.Second}).Delay(1); d != 30*time.Second {
		t.Errorf("Delay(1) with Min above Max = %v, want Max", d)
	}
}
