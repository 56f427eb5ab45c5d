package host

import (
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// This file holds the one /proc/diskstats parser of the exporter, used by the
// diskstats collector at scrape time and by the sampler every second.
// diskstatsScanner walks the bytes of one read in place and allocates
// nothing (procfs' blockdevice parses each line with fmt.Sscanf and builds
// a struct per device: a few kilobytes and ~80 % of a 1,000-disk scrape).

// The statistics the exporter reads, by their field number after the device
// name (Documentation/admin-guide/iostats.rst). The kernel prints the count
// fields as unsigned long (64 bits on 64-bit kernels, 32 on 32-bit ones)
// and the millisecond fields and the in-flight count as unsigned int (32
// bits everywhere), so the millisecond fields wrap at 2^32 ms (about 49.7
// days of accumulated time, much sooner on a busy device with a deep queue).
const (
	dsReads        = 1  // reads completed
	dsReadSectors  = 3  // 512-byte sectors read
	dsReadMs       = 4  // milliseconds spent reading (sum over requests)
	dsWrites       = 5  // writes completed
	dsWriteSectors = 7  // 512-byte sectors written
	dsWriteMs      = 8  // milliseconds spent writing (sum over requests)
	dsInFlight     = 9  // I/Os in flight now
	dsIOMs         = 10 // milliseconds with at least one request in flight
	dsWeightedMs   = 11 // milliseconds × requests in flight
	dsDiscards     = 12 // discards completed (4.18+)
	dsDiscardMs    = 15 // milliseconds spent discarding (4.18+)
	dsFlushes      = 16 // flush requests completed (5.5+)
	dsFlushMs      = 17 // milliseconds spent flushing (5.5+)
)

// diskstatsUsed are the statistics parsed; the others are not validated.
const diskstatsUsed = 1<<dsReads | 1<<dsReadSectors | 1<<dsReadMs | 1<<dsWrites | 1<<dsWriteSectors |
	1<<dsWriteMs | 1<<dsInFlight | 1<<dsIOMs | 1<<dsWeightedMs | 1<<dsDiscards | 1<<dsDiscardMs |
	1<<dsFlushes | 1<<dsFlushMs

// diskstatsLine is one /proc/diskstats line. Name aliases the scanned buffer
// and is valid until the next Next call. Stats is the number of statistics
// after the name: 11 (kernels before 4.18), 15 (4.18+, discards) or 17
// (5.5+, flushes). Stat holds the used statistics by field number (ds*);
// the others, and those a line lacks, are 0.
type diskstatsLine struct {
	Major, Minor uint64
	Name         []byte
	Stats        int
	Stat         [dsFlushMs + 1]uint64
}

// has reports whether the line's kernel generation has a statistic: the
// first 11 on every kernel, discards (12–15) with 15 statistics, flushes
// (16, 17) with 17.
func (l *diskstatsLine) has(field int) bool {
	switch {
	case field <= dsWeightedMs:
		return true
	case field <= dsDiscardMs:
		return l.Stats >= 15
	}
	return l.Stats >= 17
}

// diskstatsScanner iterates over the lines of one /proc/diskstats read
// without allocating. Lines have "major minor name" and then 11 statistics
// (kernels before 4.18; 14 fields in all), 15 (4.18+, discards; 18 fields)
// or 17 (5.5+, flushes; 20 fields); a future kernel's extra fields are
// ignored. Lines with 4 statistics (the pre-2.6.25 partition format, which
// has no timings) are skipped silently; any other shape is malformed and
// counted in bad.
type diskstatsScanner struct {
	data []byte
	line int
	Line diskstatsLine
	bad  badLines
}

func newDiskstatsScanner(data []byte) diskstatsScanner {
	return diskstatsScanner{data: data, bad: badLines{file: "diskstats"}}
}

// Next advances to the next well-formed line, reporting false at the end.
func (sc *diskstatsScanner) Next() bool {
	for len(sc.data) > 0 {
		var l []byte
		l, sc.data = scan.Line(sc.data)
		sc.line++
		switch msg := sc.parse(l); msg {
		case "":
			return true
		case "skip":
		default:
			sc.bad.add(sc.line, l, msg)
		}
	}
	return false
}

// parse decodes one line into sc.Line. It returns "" for a good line,
// "skip" for a line to pass over silently, else what is wrong. The messages
// are constants so a well-formed read does not allocate.
func (sc *diskstatsScanner) parse(l []byte) string {
	rest := l
	maj := scan.Field(&rest)
	if len(maj) == 0 {
		return "skip" // blank line
	}
	major, ok := scan.Uint(maj)
	if !ok {
		return "major number is not an unsigned integer"
	}
	minor, ok := scan.Uint(scan.Field(&rest))
	if !ok {
		return "minor number is missing or not an unsigned integer"
	}
	sc.Line = diskstatsLine{Major: major, Minor: minor, Name: scan.Field(&rest)}
	if len(sc.Line.Name) == 0 {
		return "device name missing"
	}
	if !utf8.Valid(sc.Line.Name) {
		return "device name is not valid UTF-8" // it would be an invalid label value
	}
	n := 0
	for f := scan.Field(&rest); len(f) > 0; f = scan.Field(&rest) {
		if n++; n < len(sc.Line.Stat) && diskstatsUsed&(1<<n) != 0 {
			if sc.Line.Stat[n], ok = scan.Uint(f); !ok {
				return "statistic is not an unsigned integer"
			}
		}
	}
	switch {
	case n == 4:
		return "skip"
	case n < 11:
		return "fewer than 11 statistics after the device name"
	}
	sc.Line.Stats = n
	return ""
}
