package host

import "fmt"

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
