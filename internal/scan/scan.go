// Package scan has the two byte-level helpers every zero-allocation parser
// of a kernel text file in this exporter uses: the next whitespace-separated
// field of a line, and an unsigned decimal integer.
package scan

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
// only, no sign, no base prefix.
func Uint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var x uint64
	for _, c := range b {
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
