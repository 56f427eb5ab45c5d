package logfollow

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rig is a followed file in a temporary directory and what the follower
// handed over.
type rig struct {
	t        *testing.T
	dir      string
	f        *File
	lines    []string
	rotated  int
	problems []string // kinds
}

func newRig(t *testing.T, maxLine int) *rig {
	t.Helper()
	r := &rig{t: t, dir: filepath.Join(t.TempDir(), "logs")}
	r.f = New(filepath.Join(r.dir, "store.log"), Options{
		MaxLine:     maxLine,
		ArchiveDirs: []string{"otherdays"},
		Line:        func(l []byte) { r.lines = append(r.lines, string(l)) },
		Rotated:     func() { r.rotated++ },
		Problem:     func(kind string, err error) { r.problems = append(r.problems, kind) },
	})
	t.Cleanup(r.f.Close)
	return r
}

func (r *rig) mkdir(dirs ...string) {
	r.t.Helper()
	if err := os.MkdirAll(filepath.Join(append([]string{r.dir}, dirs...)...), 0o755); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) append(text string) {
	r.t.Helper()
	f, err := os.OpenFile(filepath.Join(r.dir, "store.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) rename(to string) {
	r.t.Helper()
	if err := os.Rename(filepath.Join(r.dir, "store.log"), filepath.Join(r.dir, to)); err != nil {
		r.t.Fatal(err)
	}
}

// poll polls once, which must succeed, and returns the lines handed over
// since the last poll.
func (r *rig) poll() []string {
	r.t.Helper()
	if err := r.f.Poll(); err != nil {
		r.t.Fatalf("Poll: %v", err)
	}
	got := r.lines
	r.lines = nil
	return got
}

func (r *rig) expect(what string, got []string, want ...string) {
	r.t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		r.t.Errorf("%s: lines %q, want %q", what, got, want)
	}
}

// The history before the first poll is not handed over (the rest of a
// line it cuts is a line of its own); a line written in two pieces is
// handed over whole once its newline comes.
func TestFromTheEnd(t *testing.T) {
	r := newRig(t, 1024)
	r.mkdir()
	r.append("old 1\nold 2\npart")
	r.expect("first poll", r.poll())
	r.append("ial\nnew\n")
	r.expect("second poll", r.poll(), "ial", "new")
	r.append("in two ")
	r.expect("a line without its newline", r.poll())
	r.append("pieces\n")
	r.expect("its newline", r.poll(), "in two pieces")
	if len(r.problems) != 0 || r.rotated != 0 {
		t.Errorf("problems %q, rotations %d", r.problems, r.rotated)
	}
}

// logback's rotation: the file is renamed away and a new one created. The
// rest of the old file is read — including what was written after the last
// poll — then the new one from its start; a last line cut short by the
// rotation is a problem.
func TestRenamed(t *testing.T) {
	r := newRig(t, 1024)
	r.mkdir()
	r.append("before start\n")
	r.poll()
	r.append("a\n")
	r.expect("before the rotation", r.poll(), "a")
	r.append("b\ncut short by the rotati")
	r.rename("store.2024-05-06.0.log")
	r.append("c\n")
	r.expect("across the rotation", r.poll(), "b", "c")
	if r.rotated != 1 || strings.Join(r.problems, ",") != LineCutShort {
		t.Errorf("rotations %d, problems %q; want 1 and %s", r.rotated, r.problems, LineCutShort)
	}

	// Renamed into the archive directory (5.x): the path is briefly
	// empty, and the renamed file is read on meanwhile.
	r.mkdir("otherdays")
	r.append("d\n")
	r.rename("otherdays/store.1.log")
	r.expect("renamed away, no new file yet", r.poll(), "d")
	r.append("e\n")
	r.expect("the new file", r.poll(), "e")
	if r.rotated != 2 {
		t.Errorf("rotations %d, want 2", r.rotated)
	}
}

// Two rotations between two polls: the middle file, created and rotated
// away entirely between them, is read too (its lines were lost once).
// Files already read are not read again when they are compressed later.
func TestTwoRotationsRenamed(t *testing.T) {
	r := newRig(t, 1024)
	r.mkdir()
	r.append("history\n")
	r.poll()
	r.append("a\n")
	r.poll()
	r.append("b\n") // the first file's last line, unread at the rotation
	r.rename("store.2024-05-06.0.log")
	r.append("c\nd\n") // the middle file
	r.rename("store.2024-05-06.1.log")
	r.append("e\n")
	r.expect("two rotations", r.poll(), "b", "c", "d", "e")
	if r.rotated != 2 {
		t.Errorf("rotations %d, want 2", r.rotated)
	}
	r.expect("nothing new", r.poll())
	// The renamed files are compressed later (a time-based policy gzips in
	// the background), then the current file rotates.
	for _, name := range []string{"store.2024-05-06.0.log", "store.2024-05-06.1.log"} {
		data, err := os.ReadFile(filepath.Join(r.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		gzipTo(t, filepath.Join(r.dir, name+".gz"), string(data))
		os.Remove(filepath.Join(r.dir, name))
	}
	r.rename("store.2024-05-06.2.log")
	r.append("f\n")
	r.expect("a third rotation, the earlier files compressed since", r.poll(), "f")
	if r.rotated != 3 || len(r.problems) != 0 {
		t.Errorf("rotations %d, problems %q; want 3 and none", r.rotated, r.problems)
	}
}

// The same with the broker's shipped logback configuration: each rotated
// file is gzipped into otherdays/store.N.log.gz (the older archives shifted
// up by one) and deleted before the new file is created, so the middle
// file exists only as an archive. An archive from before the start is
// never read.
func TestTwoRotationsGzipped(t *testing.T) {
	r := newRig(t, 1024)
	r.mkdir("otherdays")
	archives := filepath.Join(r.dir, "otherdays")
	r.append("history\n")
	gzipTo(t, filepath.Join(archives, "store.1.log.gz"), "older history\n")
	r.poll()
	r.append("a\n")
	r.poll()
	r.append("b\n")
	rollover := func() {
		t.Helper()
		for i := 9; i >= 1; i-- {
			os.Rename(filepath.Join(archives, fmt.Sprintf("store.%d.log.gz", i)), filepath.Join(archives, fmt.Sprintf("store.%d.log.gz", i+1)))
		}
		data, err := os.ReadFile(filepath.Join(r.dir, "store.log"))
		if err != nil {
			t.Fatal(err)
		}
		gzipTo(t, filepath.Join(archives, "store.1.log.gz"), string(data))
		if err := os.Remove(filepath.Join(r.dir, "store.log")); err != nil {
			t.Fatal(err)
		}
	}
	rollover()
	r.append("c\nd\n") // the middle file
	rollover()
	r.append("e\n")
	r.expect("two gzipped rotations", r.poll(), "b", "c", "d", "e")
	if r.rotated != 2 || len(r.problems) != 0 {
		t.Errorf("rotations %d, problems %q; want 2 and none", r.rotated, r.problems)
	}
}

// gzipTo writes text gzipped to path, as logback's compressor does.
func gzipTo(t *testing.T, path, text string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(text))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copytruncate: same inode, shorter, then new lines: read again from the
// start. (A file that grows back past the old offset between two polls
// cannot be told apart from one that grew: that case loses its first
// bytes.) A line over MaxLine is skipped, the next one read.
func TestTruncatedInPlaceAndOverlong(t *testing.T) {
	r := newRig(t, 64)
	r.mkdir()
	r.append(strings.Repeat("0123456789\n", 10))
	r.poll()
	if err := os.Truncate(filepath.Join(r.dir, "store.log"), 0); err != nil {
		t.Fatal(err)
	}
	r.append("after the truncation\n")
	r.expect("truncated in place", r.poll(), "after the truncation")
	r.append(strings.Repeat("x", 65) + "\n" + strings.Repeat("y", 64) + "\n")
	r.expect("overlong, then exactly MaxLine", r.poll(), strings.Repeat("y", 64))
	// An overlong line that arrives in pieces is skipped as a whole.
	r.append(strings.Repeat("z", 40))
	r.poll()
	r.append(strings.Repeat("z", 40))
	r.poll()
	r.append("zz\nnext\n")
	r.expect("overlong in pieces", r.poll(), "next")
	if want := TruncatedInPlace + "," + LineTooLong + "," + LineTooLong; strings.Join(r.problems, ",") != want {
		t.Errorf("problems %q, want %s", r.problems, want)
	}
	if cap(r.f.partial) > 64+readBuf {
		t.Errorf("partial line buffer grew to %d bytes", cap(r.f.partial))
	}
}

// A missing directory or file is a state, returned by Poll, not a problem;
// a file that appears later is new, read from its start.
func TestMissingIsAState(t *testing.T) {
	r := newRig(t, 1024)
	for range 2 {
		if err := r.f.Poll(); !errors.Is(err, ErrNoDir) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("no directory: Poll = %v, want ErrNoDir and fs.ErrNotExist", err)
		}
	}
	r.mkdir()
	if err := r.f.Poll(); errors.Is(err, ErrNoDir) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no file: Poll = %v, want fs.ErrNotExist only", err)
	}
	r.append("first\n")
	r.expect("a file that appears after the start", r.poll(), "first")

	// The directory goes (an unmounted home, say) and comes back with a
	// new file: that file is read whole.
	if err := os.RemoveAll(r.dir); err != nil {
		t.Fatal(err)
	}
	if err := r.f.Poll(); !errors.Is(err, ErrNoDir) {
		t.Fatalf("directory removed: Poll = %v, want ErrNoDir", err)
	}
	r.mkdir()
	r.append("again\n")
	r.expect("the directory back", r.poll(), "again")
	if len(r.problems) != 0 {
		t.Errorf("problems %q: a missing file or directory is a state", r.problems)
	}
}

// FuzzLines: whatever the bytes and however the reads cut them, the lines
// handed over are the input's lines of at most MaxLine bytes, in order,
// and every longer line is reported once.
func FuzzLines(f *testing.F) {
	f.Add([]byte("a\nbb\n"), uint8(1))
	f.Add([]byte("0123456789abcdefX\nshort\n\n"), uint8(7))
	f.Add([]byte("no newline at all, and longer than sixteen"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		const maxLine = 16
		var lines []string
		problems := 0
		fl := New("/nonexistent/store.log", Options{MaxLine: maxLine,
			Line:    func(l []byte) { lines = append(lines, string(l)) },
			Problem: func(string, error) { problems++ }})
		step := int(cut)%(len(data)+1) + 1
		for i := 0; i < len(data); i += step {
			fl.consume(bytes.NewReader(data[i:min(i+step, len(data))]), "store.log")
		}
		var want []string
		long := 0
		parts := strings.Split(string(data), "\n")
		for _, l := range parts[:len(parts)-1] { // the last part has no newline yet
			if len(l) > maxLine {
				long++
			} else {
				want = append(want, l)
			}
		}
		if len(parts[len(parts)-1]) > maxLine {
			long++ // reported as soon as it is too long, before its newline
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") || len(lines) != len(want) {
			t.Fatalf("lines %q, want %q", lines, want)
		}
		if problems != long {
			t.Fatalf("%d problems, want %d overlong lines", problems, long)
		}
		if len(fl.partial) > maxLine {
			t.Fatalf("partial line of %d bytes kept", len(fl.partial))
		}
	})
}
