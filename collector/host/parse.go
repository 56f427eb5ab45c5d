package host

import "fmt"

// The line-oriented /proc parsers of this package (ParseVMStat,
// ParseZoneinfo and the diskstats scanner that the diskstats collector and
// the sampler share) describe the first malformed line of a read the same
// way, so the once-per-kind log line of Problems reads the same for every
// file. Their tokens come from internal/scan, which the Redis reply parsers
// share too.

// ParseError describes one malformed line of a /proc file: the file's name
// (vmstat, zoneinfo, diskstats), the 1-based line number, the line (cut to
// 80 bytes) and what is wrong with it.
type ParseError struct {
	File string
	Line int
	Text string
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s line %d %q: %s", e.File, e.Line, e.Text, e.Msg)
}

// truncate is the Text of a ParseError: at most 80 bytes of the line, so a
// garbage file cannot make one log line huge.
func truncate(b []byte) string {
	const max = 80
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
