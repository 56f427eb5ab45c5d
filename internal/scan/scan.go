// Package scan has the three primitives every zero-allocation parser of
// outside text in this exporter uses, so that each rule (what separates
// fields, what a number may look like, when it overflows) is written once:
// Line cuts the next line, Field the next whitespace-separated field, and
// Uint parses an unsigned decimal. The kernel-file parsers of package
// collector (/proc/vmstat, /proc/diskstats, /proc/zoneinfo, /dev/kmsg
// records) read bytes; the Redis reply parsers (INFO, CLIENT LIST, CONFIG
// GET) read strings, so Uint takes either without a conversion.
package scan

import "bytes"

// Text is what Uint reads: the kernel's bytes or a Redis reply's string.
type Text interface{ ~string | ~[]byte }

// Line splits off the first line of data (without its '\n'); rest is what
// follows it, nil after the last line. A final line without '\n' is
// returned whole.
func Line(data []byte) (line, rest []byte) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return data[:i], data[i+1:]
	}
	return data, nil
}

// Field returns the next field of *b, separated by spaces, tabs or line
// breaks, and advances *b past it; an empty result means there is none.
func Field(b *[]byte) []byte {
	s := *b
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	i := 0
	for i < len(s) && !isSpace(s[i]) {
		i++
	}
	*b = s[i:]
	return s[:i]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Uint parses an unsigned decimal integer that fits in 64 bits: digits
// only, no sign, no base prefix, at most 20 characters (neither the kernel
// nor Redis pads with zeros). Anything else, overflow included, is not ok.
func Uint[T Text](b T) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var x uint64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if x > (1<<64-1-d)/10 {
			return 0, false
		}
		x = x*10 + d
	}
	return x, true
}
