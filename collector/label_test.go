package collector

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"get", 0, "get"},
		{"a\xffb", 0, "a\uFFFDb"},
		{"abcdef", 4, "abcd…"},
		{"abcd", 4, "abcd"},
		{"ab€cd", 3, "ab…"},       // € is 3 bytes: never cut inside a rune
		{"\xff\xfe", 3, "\uFFFD"}, // one U+FFFD (3 bytes) for the invalid run
		// Control characters (C0, DEL, C1) from a peer: a NUL makes grep
		// call /metrics binary, a newline or ESC garbles whatever shows
		// the value.
		{"V4_9_7\x00\xed\xa0\x80", 0, "V4_9_7\uFFFD\uFFFD"}, // NUL, then a surrogate in UTF-8 (invalid)
		{"a\nb\rc\td\x1b[31me\x7ff\u0085g\u009fh", 0, "a\uFFFDb\uFFFDc\uFFFDd\uFFFD[31me\uFFFDf\uFFFDg\uFFFDh"},
		{"a\x00bcdef", 4, "a\uFFFD…"}, // replaced first, then cut at a rune boundary
		{"µs «ok» 日本 🙂", 0, "µs «ok» 日本 🙂"},
	} {
		got := LabelValue(tc.in, tc.max)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("LabelValue(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

// FuzzLabelValue: whatever comes in, the label value is valid UTF-8 without
// a control character, at most max bytes plus the "…" marker, and a clean
// short value is returned unchanged.
func FuzzLabelValue(f *testing.F) {
	f.Add("V4_9_7\x00", 8)
	f.Add("\xff\u0085abc", 2)
	f.Fuzz(func(t *testing.T, s string, maxLen int) {
		maxLen %= 300
		got := LabelValue(s, maxLen)
		if !utf8.ValidString(got) {
			t.Fatalf("LabelValue(%q, %d) = %q: invalid UTF-8", s, maxLen, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) {
				t.Fatalf("LabelValue(%q, %d) = %q: control character %U", s, maxLen, got, r)
			}
		}
		if maxLen > 0 && len(got) > maxLen+len("…") {
			t.Fatalf("LabelValue(%q, %d) = %q: %d bytes", s, maxLen, got, len(got))
		}
		clean := utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
		if clean && (maxLen <= 0 || len(s) <= maxLen) && got != s {
			t.Fatalf("LabelValue(%q, %d) = %q, want it unchanged", s, maxLen, got)
		}
	})
}

// Label is LabelValue at MaxLabelBytes: a peer's 200-byte name is cut to
// 128 bytes and marked.
func TestLabel(t *testing.T) {
	long := strings.Repeat("k", 200)
	if got, want := Label(long), strings.Repeat("k", MaxLabelBytes)+"…"; got != want {
		t.Errorf("Label(200 bytes) = %q, want %q", got, want)
	}
	if got := Label("get\x00"); got != "get\uFFFD" {
		t.Errorf("Label(%q) = %q", "get\x00", got)
	}
}
