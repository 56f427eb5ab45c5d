package alerts

import (
	"regexp"
	"strconv"
)

// The replays run under two promtools, because users run both: Prometheus 2 (Debian's promtool,
// on PATH; what the end-to-end test's Prometheus is) and Prometheus 3 (kube-prometheus-stack
// ships it). Prometheus 3.0 made range selectors left-open: at an evaluation that falls on a
// scrape, as every one of a replay does (15 s scrapes and evaluations from 0), a 5-minute window
// holds 21 samples under 2 and 20 under 3, the oldest at exactly t-5m being left out. A live
// Prometheus scrapes at an offset from its rule evaluations, so the window holds 20 samples
// under either, and the replays under 3 are the closer of the two; under 2 they also pin what a
// user of 2.x would see at the moment a window's edge matters.
//
// An assertion holds under both, unless a comment line just above it says
// "# Prometheus N only: <why>": then it runs under version N alone. Where the two differ (an
// alert firing one evaluation apart, a value in a description), the replay states both, each
// pinned as exactly as the other. Package tools/internal/promtool finds each version's promtool.

// onlyComment is the comment that limits an assertion to one version, with the reason.
var onlyComment = regexp.MustCompile(`(?m)^# Prometheus ([0-9]+) only: \S`)

// onlyVersion returns the version an assertion's head comment limits it to, 0 for every version.
func onlyVersion(comment string) int {
	m := onlyComment.FindStringSubmatch(comment)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(m[1])
	return v
}
