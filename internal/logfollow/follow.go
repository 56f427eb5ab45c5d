// Package logfollow follows a log file that its writer rotates. A File
// reads what the file gains since the last Poll and hands over complete
// lines, from the file's end when the follower starts, across every way a
// logger replaces its file:
//
//   - renamed away and a new file created at the path (logback's and
//     logrotate's default): the rest of the old file, still open, is read,
//     then the new one from its start;
//   - compressed into an archive and deleted, then created anew;
//   - rotated more than once between two polls: the files created and
//     rotated away in between are read whole, oldest first (rotated.go);
//   - truncated or rewritten in place (same inode, smaller): read again from
//     its start.
//
// A missing file or directory is a state, which Poll returns; the file is
// picked up when it appears, read whole (it is new). Lines are bounded
// (Options.MaxLine: a longer one is skipped) and so is memory: one read
// buffer and at most one partial line per File. It polls — the caller calls
// Poll, once a second say — so it needs no inotify and behaves the same on
// every filesystem. It is not safe for concurrent use.
//
// No library kept up to date does this with these bounds: the tail
// packages (nxadm/tail and its forks) split overlong lines instead of
// bounding them, keep a goroutine and a channel per file, and lose the
// files rotated away between two looks.
package logfollow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Options configure a File. Every callback is required.
type Options struct {
	// MaxLine is the longest line handed to Line, in bytes; a longer one is
	// skipped up to its newline and reported (LineTooLong).
	MaxLine int
	// ArchiveDirs are directories, relative to the file's own, where the
	// writer also puts rotated files (logback's otherdays/); the file's own
	// directory is always searched.
	ArchiveDirs []string
	// Line is called with each complete line, without its newline; the
	// slice is valid only during the call.
	Line func(line []byte)
	// Rotated is called once for each file that took the followed one's
	// place at its path.
	Rotated func()
	// Problem is called for what could not be handed over (kind is one of
	// the constants below); the follower carries on.
	Problem func(kind string, err error)
}

// The kinds of Options.Problem.
const (
	LineTooLong      = "line_too_long"      // a line over MaxLine, skipped
	LineCutShort     = "line_cut_short"     // a rotated file's last line has no newline
	TruncatedInPlace = "truncated_in_place" // the file shrank under the same inode: read again from its start
	ArchiveFailed    = "archive_unreadable" // a rotated-away file or its directory could not be read
	ReadFailed       = "read_failed"        // reading an open file failed
)

// ErrNoDir wraps the error Poll returns when the file's directory cannot
// be read (missing, or not searchable); any other error of Poll is the
// file's own (fs.ErrNotExist when it is missing).
var ErrNoDir = errors.New("log directory cannot be read")

// readBuf is the size of a File's read buffer.
const readBuf = 32 << 10

// File follows the file at one path.
type File struct {
	path, dir, name string
	o               Options

	f        *os.File
	ino      uint64
	off      int64
	started  bool // a first Poll has run: files found from now on are new, read from their start
	partial  []byte
	skipping bool // inside an overlong line, dropping bytes up to its newline
	buf      []byte
	seen     map[fileID]bool // rotated-away files present when the followed file was opened
	done     []readFile      // the last files read to their end, newest last
}

// New returns a follower of path; nothing is opened before the first Poll.
func New(path string, o Options) *File {
	return &File{path: path, dir: filepath.Dir(path), name: filepath.Base(path), o: o, buf: make([]byte, readBuf)}
}

// Poll reads what the file gained since the last Poll, following a
// rotation. The first Poll that finds the file reads it from its end, if
// it is the first Poll; a file found later is read from its start. It
// returns nil while the file (or the one rotated away from its path, until
// a new one appears) is followed, and otherwise why not: an error wrapping
// ErrNoDir when the directory cannot be read, the open's or stat's error
// when the file cannot.
func (t *File) Poll() error {
	first := !t.started
	t.started = true
	if _, err := os.Stat(t.dir); err != nil {
		// The open file, if any, is no longer at the path; what appears
		// with the directory is new.
		t.Close()
		return fmt.Errorf("%w: %w", ErrNoDir, err)
	}
	if t.f == nil {
		if err := t.open(first); err != nil {
			return err
		}
	}
	t.drain()
	fi, err := os.Stat(t.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // renamed away, the new file is not there yet: keep the old one
	case err != nil:
		return err
	case inode(fi) != t.ino:
		t.drain() // lines written between the read and the rename
		t.endOfFile(t.path)
		t.doneWith(t.ino, t.off)
		// Files created and rotated away since the last poll (more than one
		// rotation between two polls): read whole, oldest first.
		for _, f := range t.middleFiles() {
			t.readWhole(f)
			t.endOfFile(f.path)
			t.o.Rotated()
		}
		t.Close()
		t.o.Rotated()
		if err := t.open(false); err != nil {
			return err
		}
		t.drain()
	case fi.Size() < t.off:
		t.o.Problem(TruncatedInPlace, fmt.Errorf("%s shrank from %d to %d bytes; reading it again from the start", t.path, t.off, fi.Size()))
		t.partial, t.skipping = t.partial[:0], false
		if _, err := t.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		t.off = 0
		t.drain()
	}
	return nil
}

// Close closes the open file, if any; the next Poll opens the path again
// and reads it from its start.
func (t *File) Close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	t.partial, t.skipping = t.partial[:0], false
}

// open opens the path, seeking to its end when atEnd.
func (t *File) open(atEnd bool) error {
	f, err := os.Open(t.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	t.f, t.ino, t.off = f, inode(fi), 0
	if atEnd {
		if t.off, err = f.Seek(0, io.SeekEnd); err != nil {
			t.Close()
			return err
		}
	}
	t.seen = t.rotatedFiles()
	return nil
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// endOfFile ends the file that was being read: a last line without its
// newline was cut short.
func (t *File) endOfFile(path string) {
	if len(t.partial) > 0 || t.skipping {
		t.o.Problem(LineCutShort, fmt.Errorf("%s: last line of the rotated file has no newline", path))
	}
	t.partial, t.skipping = t.partial[:0], false
}

// drain reads to the current end of the open file.
func (t *File) drain() {
	t.off += t.consume(t.f, t.path)
}

// consume reads r to its end, handing complete lines to Line, and returns
// the number of bytes read. A line may continue from the previous call
// (t.partial), which never holds more than MaxLine bytes.
func (t *File) consume(r io.Reader, path string) int64 {
	var total int64
	for {
		n, err := r.Read(t.buf)
		total += int64(n)
		data := t.buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			end := i
			if i < 0 {
				end = len(data)
			}
			switch {
			case t.skipping:
			case len(t.partial)+end > t.o.MaxLine:
				t.o.Problem(LineTooLong, fmt.Errorf("%s: line over %d bytes skipped", path, t.o.MaxLine))
				t.partial, t.skipping = t.partial[:0], true
			case i >= 0 && len(t.partial) == 0:
				t.o.Line(data[:i]) // the common case: no copy
			default:
				t.partial = append(t.partial, data[:end]...)
				if i >= 0 {
					t.o.Line(t.partial)
					t.partial = t.partial[:0]
				}
			}
			if i < 0 {
				break
			}
			t.skipping = false
			data = data[i+1:]
		}
		if err != nil || n == 0 {
			if err != nil && err != io.EOF {
				t.o.Problem(ReadFailed, fmt.Errorf("%s: %w", path, err))
			}
			return total
		}
	}
}
