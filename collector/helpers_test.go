package collector

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
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

func TestPathsRerooting(t *testing.T) {
	p := Paths{Procfs: "/host/proc", Sysfs: "/host/sys", Rootfs: "/host"}
	if got := p.Proc("pressure", "io"); got != "/host/proc/pressure/io" {
		t.Errorf("Proc = %s", got)
	}
	if got := p.Sys("class", "block"); got != "/host/sys/class/block" {
		t.Errorf("Sys = %s", got)
	}
	if got := p.Root("/dev/kmsg"); got != "/host/dev/kmsg" {
		t.Errorf("Root = %s", got)
	}
	if got := (Paths{Rootfs: "/"}).Root("/dev/kmsg"); got != "/dev/kmsg" {
		t.Errorf("Root with / = %s", got)
	}
}

func TestDeclareDocumentsAndBuilds(t *testing.T) {
	h := DeclareHistogram("test_declared_seconds", "A test histogram.", []float64{1, 2}, "device")
	found := false
	for _, m := range Documented() {
		if m.Name == "stall_test_declared_seconds" {
			found = m.Type == "histogram" && len(m.Labels) == 1 && m.Labels[0] == "device"
		}
	}
	if !found {
		t.Errorf("DeclareHistogram did not document stall_test_declared_seconds as a histogram by device: %v", Documented())
	}
	v := h.HistogramVec()
	v.WithLabelValues("sda").Observe(1.5)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(v)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "stall_test_declared_seconds" || mfs[0].GetHelp() != "A test histogram." ||
		mfs[0].GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("built vector gathers as %v, %v", mfs, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("building a declared histogram as a counter did not panic")
		}
	}()
	h.CounterVec()
}
