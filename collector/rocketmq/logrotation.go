package rocketmq

import (
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// More than one rotation between two polls. The follower keeps the file it
// follows open, so the rest of that file is never lost; but a file that
// logback created and rotated away entirely between two polls (the middle
// one of two rotations) was never opened. So when the follower opens a
// file it notes the rotated-away files then present (tail.seen), and after
// a rotation it reads whole every rotated-away file that is new since then,
// except the files it has already read: the one it was following, and the
// last few before it (tail.done), which logback may have compressed since.
//
// Rotated-away files are <base>.* (store.1.log, store.2024-05-06.0.log,
// store.3.log.gz …) in the log directory and in its otherdays/ directory,
// where the broker's shipped logback configuration archives them
// (FixedWindowRollingPolicy, otherdays/store.%i.log.gz). A file is told
// apart by inode, size and modification time: a rename keeps all three (the
// window's store.1 → store.2 shift), a new file reusing a freed inode does
// not. The followed file is recognised by its inode when it was renamed, and
// by the uncompressed size in its gzip trailer when it was compressed (then
// deleted, under a new inode).

// logArchiveDir is where the broker's logback configuration puts rotated
// logs, under the log directory.
const logArchiveDir = "otherdays"

// fileID tells files apart across renames.
type fileID struct {
	ino   uint64
	size  int64
	mtime int64
}

// readFile is a file the follower has read to its end: its inode, and how
// many bytes it held (what a gzip trailer records for its archive).
type readFile struct {
	ino  uint64
	size int64
}

// keepDone is how many read files a tail remembers.
const keepDone = 4

// doneWith records a file read to its end.
func (t *tail) doneWith(ino uint64, size int64) {
	t.done = append(t.done, readFile{ino, size})
	if len(t.done) > keepDone {
		t.done = t.done[len(t.done)-keepDone:]
	}
}

// alreadyRead reports whether a rotated-away file is one the follower has
// read: the same inode (renamed), or, for a gzip archive, the same size in
// its trailer (compressed, under a new inode).
func (t *tail) alreadyRead(f rotatedFile) bool {
	var isize uint32
	gz := false
	if strings.HasSuffix(f.path, ".gz") {
		isize, gz = gzipSize(f.path)
	}
	for _, d := range t.done {
		if f.id.ino == d.ino || gz && isize == uint32(d.size) {
			return true
		}
	}
	return false
}

type rotatedFile struct {
	path string
	id   fileID
}

// rotatedFiles returns the rotated-away files of t now present. A directory
// that cannot be read is counted as a problem (a missing otherdays/ is not).
func (t *tail) rotatedFiles(l *logFollower) map[fileID]bool {
	out := map[fileID]bool{}
	for _, f := range t.listRotated(l) {
		out[f.id] = true
	}
	return out
}

func (t *tail) listRotated(l *logFollower) []rotatedFile {
	dir := filepath.Dir(t.path)
	prefix := strings.TrimSuffix(t.name, ".log") + "."
	var out []rotatedFile
	for _, d := range []string{dir, filepath.Join(dir, logArchiveDir)} {
		entries, err := os.ReadDir(d)
		if err != nil {
			if !os.IsNotExist(err) {
				l.problems.Add("rocketmq log archive dir unreadable", 1, err)
			}
			continue
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), prefix) || d == dir && e.Name() == t.name {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue // gone since the listing: rotated further, or deleted
			}
			out = append(out, rotatedFile{filepath.Join(d, e.Name()), fileID{inode(fi), fi.Size(), fi.ModTime().UnixNano()}})
		}
	}
	return out
}

// middleFiles returns the rotated-away files that are new since the
// followed file was opened and were not read already (the followed file
// itself must be in t.done), oldest first.
func (t *tail) middleFiles(l *logFollower) []rotatedFile {
	var out []rotatedFile
	for _, f := range t.listRotated(l) {
		if !t.seen[f.id] && !t.alreadyRead(f) {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id.mtime < out[j].id.mtime })
	return out
}

// readWhole reads a rotated-away file (gzipped when it ends in .gz) from
// its start, handing its lines to l.line, and records it as read.
func (t *tail) readWhole(l *logFollower, rf rotatedFile) {
	f, err := os.Open(rf.path)
	if err != nil {
		l.problems.Add("rocketmq log archive unreadable", 1, err)
		return
	}
	defer f.Close()
	if !strings.HasSuffix(rf.path, ".gz") {
		t.doneWith(rf.id.ino, t.consume(l, f, rf.path))
		return
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		l.problems.Add("rocketmq log archive unreadable", 1, fmt.Errorf("%s: %w", rf.path, err))
		return
	}
	defer zr.Close()
	t.doneWith(rf.id.ino, t.consume(l, zr, rf.path))
}

// gzipSize returns the uncompressed size modulo 2^32 that a gzip file's
// trailer records (RFC 1952 ISIZE, its last four bytes, little-endian).
func gzipSize(path string) (uint32, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var trailer [4]byte
	fi, err := f.Stat()
	if err != nil || fi.Size() < 18 { // 10-byte header, 8-byte trailer
		return 0, false
	}
	if _, err := f.ReadAt(trailer[:], fi.Size()-4); err != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint32(trailer[:]), true
}
