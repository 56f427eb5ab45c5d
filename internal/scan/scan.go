// Package scan has the three primitives of every zero-allocation parser of
// outside text here, so each rule (field separators, number syntax,
// overflow) is written once: Line cuts the next line, Field the next
// whitespace-separated field, Uint parses an unsigned decimal, from the
// kernel's bytes (/proc/vmstat, /proc/diskstats, /proc/zoneinfo, /dev/kmsg)
// or a Redis reply's string (INFO, CLIENT LIST, CONFIG GET).
package scan

import "bytes"

// Text is what Uint reads: the kernel's bytes or a Redis reply's string.
type Text interface{ ~string | ~[]byte }

// Line splits off the first line of data (without its '\n'); rest is what
// follows it, nil after the last line. A final line without '\n' is
// returned whole.
func Line(data []byte) (line, rest []byte) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return data, nil
	}
	return data[:i], data[i+1:]
}

// Field returns the next field of *b, separated by spaces, tabs or line
// breaks, and advances *b past it; an empty result means there is none.
// It is small enough to be inlined into the per-line loops.
func Field(b *[]byte) []byte {
	s := *b
	i := 0
	for i < len(s) && isSpace[s[i]] {
		i++
	}
	j := i
	for j < len(s) && !isSpace[s[j]] {
		j++
	}
	*b = s[j:]
	return s[i:j]
}

// isSpace is Field's separator set: a table inlines cheaper than four
// comparisons.
var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

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
