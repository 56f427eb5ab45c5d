package collector

import (
	"context"
	"time"
)

// maxDeadlineMargin bounds the time a scrape leaves unused at its end.
const maxDeadlineMargin = 250 * time.Millisecond

// ScrapeDeadline is when a collector's requests to a remote target must
// end: timeout after start (the collector's own --*.timeout), or earlier
// when ctx, the exporter's scrape, ends sooner — then a tenth of the time
// left before ctx's deadline, at most 250 ms, before it. That margin is
// left to emit what was gathered (the target's up 0 and the series of the
// targets that did answer) before the scrape's deadline: a request that
// runs to the deadline itself leaves the whole scrape empty.
func ScrapeDeadline(ctx context.Context, start time.Time, timeout time.Duration) time.Time {
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok {
		margin := min(d.Sub(start)/10, maxDeadlineMargin)
		if d = d.Add(-margin); d.Before(deadline) {
			deadline = d
		}
	}
	return deadline
}
