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

// diskstatsLine is one /proc/diskstats line. Name aliases the scanned buffer
// and is valid until the next Next call. Stats is the number of statistics
// after the name: 11 (kernels before 4.18), 15 (4.18+, discards) or 17
// (5.5+, flushes); fields a line lacks are 0.
//
// The kernel prints the count fields as unsigned long (64 bits on 64-bit
// kernels, 32 on 32-bit ones) and the millisecond fields and the in-flight
// count as unsigned int (32 bits everywhere), so the millisecond fields wrap
// at 2^32 ms (about 49.7 days of accumulated time, much sooner on a busy
// device with a deep queue).
type diskstatsLine struct {
	Major, Minor uint64
	Name         []byte
	Stats        int
	Reads        uint64 // field 1: reads completed
	ReadSectors  uint64 // field 3: 512-byte sectors read
	ReadMs       uint64 // field 4: milliseconds spent reading (sum over requests)
	Writes       uint64 // field 5: writes completed
	WriteSectors uint64 // field 7: 512-byte sectors written
	WriteMs      uint64 // field 8: milliseconds spent writing (sum over requests)
	InFlight     uint64 // field 9: I/Os in flight now
	IOMs         uint64 // field 10: milliseconds with at least one request in flight
	WeightedMs   uint64 // field 11: milliseconds × requests in flight
	Discards     uint64 // field 12: discards completed (4.18+)
	DiscardMs    uint64 // field 15: milliseconds spent discarding (4.18+)
	Flushes      uint64 // field 16: flush requests completed (5.5+)
	FlushMs      uint64 // field 17: milliseconds spent flushing (5.5+)
}

// diskstatsScanner iterates over the lines of one /proc/diskstats read
// without allocating. Lines have "major minor name" and then 11 statistics
// (kernels before 4.18; 14 fields in all), 15 (4.18+, discards; 18 fields)
// or 17 (5.5+, flushes; 20 fields); a future kernel's extra fields are
// ignored. Lines with 4 statistics (the pre-2.6.25 partition format, which
// has no timings) are skipped silently; any other shape is malformed and
// counted in Bad, the first one described by FirstErr.
type diskstatsScanner struct {
	data     []byte
	line     int
	Line     diskstatsLine
	Bad      int
	FirstErr error
}

func newDiskstatsScanner(data []byte) diskstatsScanner {
	return diskstatsScanner{data: data}
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
			continue
		default:
			sc.Bad++
			if sc.FirstErr == nil {
				sc.FirstErr = &ParseError{File: "diskstats", Line: sc.line, Text: truncate(l), Msg: msg}
			}
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
	var ok bool
	if sc.Line.Major, ok = scan.Uint(maj); !ok {
		return "major number is not an unsigned integer"
	}
	if sc.Line.Minor, ok = scan.Uint(scan.Field(&rest)); !ok {
		return "minor number is missing or not an unsigned integer"
	}
	sc.Line = diskstatsLine{Major: sc.Line.Major, Minor: sc.Line.Minor}
	sc.Line.Name = scan.Field(&rest)
	if len(sc.Line.Name) == 0 {
		return "device name missing"
	}
	if !utf8.Valid(sc.Line.Name) {
		return "device name is not valid UTF-8" // it would be an invalid label value
	}
	n := 0
	for {
		f := scan.Field(&rest)
		if len(f) == 0 {
			break
		}
		n++
		var dst *uint64
		switch n {
		case 1:
			dst = &sc.Line.Reads
		case 3:
			dst = &sc.Line.ReadSectors
		case 4:
			dst = &sc.Line.ReadMs
		case 5:
			dst = &sc.Line.Writes
		case 7:
			dst = &sc.Line.WriteSectors
		case 8:
			dst = &sc.Line.WriteMs
		case 9:
			dst = &sc.Line.InFlight
		case 10:
			dst = &sc.Line.IOMs
		case 11:
			dst = &sc.Line.WeightedMs
		case 12:
			dst = &sc.Line.Discards
		case 15:
			dst = &sc.Line.DiscardMs
		case 16:
			dst = &sc.Line.Flushes
		case 17:
			dst = &sc.Line.FlushMs
		}
		if dst != nil {
			if *dst, ok = scan.Uint(f); !ok {
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
