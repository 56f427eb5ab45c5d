package collector

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLabelBytes is the length limit of every label value taken from a
// peer or a process (a Redis command, client group or key name, a broker
// name, version or config value, a process name): the peer chooses the
// length, and each distinct value is a series.
const MaxLabelBytes = 128

// Label makes a string that came from a peer or a process (a Redis command
// or key name, a broker name or version) safe as a label value: it is
// LabelValue(s, MaxLabelBytes), the call of every label taken from
// outside.
func Label(s string) string { return LabelValue(s, MaxLabelBytes) }

// LabelValue cleans s as Label does, under another length limit: invalid
// UTF-8, which client_golang refuses and MustNewConstMetric panics on,
// becomes U+FFFD, and so does every control character (C0 including tab
// and newline, DEL, C1: a NUL makes grep call the whole exposition binary,
// an escape sequence rewrites a terminal); then a value longer than maxLen
// bytes is cut at a rune boundary and marked with "…". A maxLen other than
// MaxLabelBytes only bounds a value that is not a peer's label (a quote of
// peer text in an error, a cgroup name), and maxLen <= 0 means no length
// limit. A value that needs none of this is returned as it is, without
// allocating.
func LabelValue(s string, maxLen int) string {
	if !plainASCII(s) {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return utf8.RuneError
			}
			return r
		}, strings.ToValidUTF8(s, "\uFFFD"))
	}
	if maxLen > 0 && len(s) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// plainASCII reports whether s is printable ASCII only (the common case of
// LabelValue, checked without decoding runes).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}
