package collector

import (
	"context"
	"testing"
	"time"
)

// ScrapeDeadline: the collector's own timeout when the scrape leaves more
// than it, else the scrape's deadline less a tenth of the time left, at
// most 250 ms.
func TestScrapeDeadline(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		scrape      time.Duration // ctx's deadline after start; 0: none
		timeout     time.Duration
		wantAfterMS int64
	}{
		{"no scrape deadline", 0, 5 * time.Second, 5000},
		{"own timeout first", 10 * time.Second, 2 * time.Second, 2000},
		{"scrape first, margin capped", 9500 * time.Millisecond, 20 * time.Second, 9250},
		{"scrape first, a tenth", time.Second, 5 * time.Second, 900},
	} {
		ctx := context.Background()
		if tc.scrape > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, start.Add(tc.scrape))
			defer cancel()
		}
		if got := ScrapeDeadline(ctx, start, tc.timeout).Sub(start).Milliseconds(); got != tc.wantAfterMS {
			t.Errorf("%s: deadline %d ms after start, want %d", tc.name, got, tc.wantAfterMS)
		}
	}
}
