package host

import (
	"bytes"
	"fmt"

	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// ParseError describes one malformed line of a /proc file: the file's name
// (vmstat, zoneinfo, diskstats), the 1-based line number, the line (cut to
// 80 bytes, so a garbage file cannot make one log line huge) and what is
// wrong with it. The line-oriented parsers of this package describe the
// first malformed line of a read with it, so the once-per-kind log line of
// Problems reads the same for every file.
type ParseError struct {
	File string
	Line int
	Text string
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s line %d %q: %s", e.File, e.Line, e.Text, e.Msg)
}

// badLines counts the malformed lines of one read of a file and describes
// the first one.
type badLines struct {
	file  string
	n     int
	first error
}

func (b *badLines) add(line int, text []byte, msg string) {
	b.n++
	if b.first != nil {
		return
	}
	const shown = 80
	t := string(text)
	if len(text) > shown {
		t = string(text[:shown]) + "…"
	}
	b.first = &ParseError{File: b.file, Line: line, Text: t, Msg: msg}
}

// parseNameValues walks a file of "name value" lines (/proc/vmstat, a
// cgroup's memory.stat) and hands set the field and value of each line
// whose name fields knows. Unknown names are skipped (every kernel adds
// some); a line without a name and a value, or a known name whose value is
// not an unsigned decimal, is counted in bad and the first one described by
// firstErr (a ParseError of file). It does not allocate unless a line is
// malformed.
func parseNameValues[F ~uint8](data []byte, file string, fields map[string]F, set func(F, uint64)) (bad int, firstErr error) {
	errs := badLines{file: file}
	line := 0
	for len(data) > 0 {
		var l []byte
		l, data = scan.Line(data)
		line++
		if len(l) == 0 {
			continue
		}
		sp := bytes.IndexByte(l, ' ')
		if sp <= 0 {
			errs.add(line, l, `want "name value"`)
			continue
		}
		f, ok := fields[string(l[:sp])] // no allocation for a map index
		if !ok {
			continue
		}
		x, ok := scan.Uint(l[sp+1:])
		if !ok {
			errs.add(line, l, "value is not an unsigned integer")
			continue
		}
		set(f, x)
	}
	return errs.n, errs.first
}
