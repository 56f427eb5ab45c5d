package writeback

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatGenerations reads the balance_dirty_pages format files of
// both field-name generations (testdata/README.md: where each was
// captured): pause is at the same place in both, and the generation is
// told by the names 6.15 changed.
func TestFormatGenerations(t *testing.T) {
	for _, tc := range []struct {
		dir        string
		id         uint64
		generation string
		renamed    []string // fields of this generation only
	}{
		{"6.1.0-57-amd64", 840, "before 6.15 (bdi_setpoint, bdi_dirty)", []string{"bdi_setpoint", "bdi_dirty"}},
		{"6.18.44", 985, "6.15+ (wb_setpoint, wb_dirty)", []string{"wb_setpoint", "wb_dirty"}},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.dir, "format"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := parseFormat(string(b))
		if err != nil {
			t.Fatalf("%s: %v", tc.dir, err)
		}
		if f.name != "balance_dirty_pages" || f.id != tc.id || len(f.fields) != 19 {
			t.Errorf("%s: name %q id %d, %d fields", tc.dir, f.name, f.id, len(f.fields))
		}
		for _, n := range tc.renamed {
			if _, ok := f.fields[n]; !ok {
				t.Errorf("%s: no field %s", tc.dir, n)
			}
		}
		if bdi := f.fields["bdi"]; bdi.typ != "char" || bdi.offset != 8 || bdi.size != 32 {
			t.Errorf("%s: bdi %+v, want char[32] at 8", tc.dir, bdi)
		}
		if ino := f.fields["cgroup_ino"]; ino.typ != "ino_t" || ino.offset != 136 || ino.size != 8 || ino.signed {
			t.Errorf("%s: cgroup_ino %+v", tc.dir, ino)
		}
		l, err := layoutOf(f)
		if err != nil {
			t.Fatalf("%s: %v", tc.dir, err)
		}
		if l.pauseOff != 112 || l.pauseSize != 8 || l.id != tc.id || l.generation != tc.generation {
			t.Errorf("%s: layout %+v", tc.dir, l)
		}
	}
}

// TestFormatRefused guards what turns the pause source off: a record
// whose pause is missing, unsigned, misaligned or among the common
// fields, and files that are not format files. A later kernel that
// renames the other fields again is still counted, its generation
// "unknown".
func TestFormatRefused(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "6.18.44", "format"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	const pauseLine = "field:long pause;\toffset:112;\tsize:8;\tsigned:1;"
	if !strings.Contains(good, pauseLine) {
		t.Fatal("the fixture's pause line changed")
	}
	for name, tc := range map[string]struct {
		format  string
		wantErr string // "" accepts
	}{
		"renamed pause":    {strings.Replace(good, "long pause;", "long pause_ms;", 1), "no field named pause"},
		"unsigned pause":   {strings.Replace(good, pauseLine, "field:unsigned long pause;\toffset:112;\tsize:8;\tsigned:0;", 1), "want a signed long"},
		"misaligned pause": {strings.Replace(good, "offset:112;", "offset:116;", 1), "want a signed long"},
		"common pause":     {strings.Replace(good, "offset:112;", "offset:0;", 1), "want a signed long"},
		"32-bit long":      {strings.Replace(good, pauseLine, "field:long pause;\toffset:56;\tsize:4;\tsigned:1;", 1), ""},
		"no ID":            {strings.Replace(good, "ID: 985\n", "", 1), "no ID line"},
		"bad offset":       {strings.Replace(good, "offset:112;", "offset:x;", 1), "offset"},
		"no offset":        {strings.Replace(good, "\toffset:112;", "", 1), "want field:<type> <name>"},
		"other rename":     {strings.ReplaceAll(good, "wb_dirty", "domain_dirty"), ""},
		"empty":            {"", "no ID line"},
	} {
		f, err := parseFormat(tc.format)
		var l pauseLayout
		if err == nil {
			l, err = layoutOf(f)
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", name, err, tc.wantErr)
		}
		if name == "other rename" && l.generation != unknownGeneration {
			t.Errorf("other rename: generation %q", l.generation)
		}
		if name == "32-bit long" && (l.pauseOff != 56 || l.pauseSize != 4) {
			t.Errorf("32-bit long: layout %+v", l)
		}
	}
}

// TestNoTracepoint: a tracefs mounted without the event (a kernel built
// without it) is errNoTracepoint, not a search for another tracefs; the
// debugfs path is the second place looked at.
func TestNoTracepoint(t *testing.T) {
	sys := t.TempDir()
	sysPath := func(elem ...string) string { return filepath.Join(append([]string{sys}, elem...)...) }
	if err := os.MkdirAll(sysPath("kernel", "tracing", "events", "sched"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readEventFormat(sysPath); !errors.Is(err, errNoTracepoint) {
		t.Errorf("tracefs without the event: %v, want errNoTracepoint", err)
	}
	if err := os.RemoveAll(sysPath("kernel", "tracing")); err != nil {
		t.Fatal(err)
	}
	debug := sysPath("kernel", "debug", "tracing", "events", "writeback", "balance_dirty_pages")
	if err := os.MkdirAll(debug, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(debug, "format"), []byte("name: balance_dirty_pages\nID: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, from, err := readEventFormat(sysPath)
	if err != nil || from != sysPath("kernel", "debug", "tracing") || !strings.Contains(string(data), "ID: 7") {
		t.Errorf("debugfs tracing: %q from %s, %v", data, from, err)
	}
}
