package collector

import (
	"context"
	"time"
)

// maxEmitMargin bounds the time ScrapeDeadline leaves at the end of a
// collector's scrape for emitting what was gathered.
const maxEmitMargin = 250 * time.Millisecond

// ScrapeDeadline is when a collector's requests to a remote target (Redis,
// RocketMQ: the only callers) must end: timeout after start (the
// collector's own --*.timeout), or earlier when ctx, the exporter's scrape,
// ends sooner — then a tenth of the time left before ctx's deadline, at
// most 250 ms, before it. That margin is left to emit what was gathered
// (the target's up 0 and the series of the targets that did answer) before
// the scrape's deadline: a request that runs to the deadline itself leaves
// the whole scrape empty.
//
// It is the second of the two margins a scrape's time goes through, and
// the only one inside the collectors: the exporter first takes its own
// offset off Prometheus' scrape timeout (X-Prometheus-Scrape-Timeout-Seconds)
// for writing the answer, in serve.go, and gives ctx the rest; this one
// is taken off ctx's deadline, never off Prometheus' timeout again. A
// collector of local files needs neither: it reads in far less than the
// margin.
func ScrapeDeadline(ctx context.Context, start time.Time, timeout time.Duration) time.Time {
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok {
		margin := min(d.Sub(start)/10, maxEmitMargin)
		if d = d.Add(-margin); d.Before(deadline) {
			deadline = d
		}
	}
	return deadline
}
