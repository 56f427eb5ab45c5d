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
// except the one it was following.
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
// followed file was opened, other than the followed file itself (inode
// t.ino, t.off bytes long), oldest first. Must be called before t.ino and
// t.off move to the next file.
func (t *tail) middleFiles(l *logFollower) []string {
	var out []rotatedFile
	for _, f := range t.listRotated(l) {
		if t.seen[f.id] || f.id.ino == t.ino {
			continue
		}
		if strings.HasSuffix(f.path, ".gz") {
			if n, ok := gzipSize(f.path); ok && n == uint32(t.off) {
				continue // the followed file, compressed: already read through its descriptor
			}
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id.mtime < out[j].id.mtime })
	paths := make([]string, len(out))
	for i, f := range out {
		paths[i] = f.path
	}
	return paths
}

// readWhole reads a rotated-away file (gzipped when it ends in .gz) from
// its start, handing its lines to l.line.
func (t *tail) readWhole(l *logFollower, path string) {
	f, err := os.Open(path)
	if err != nil {
		l.problems.Add("rocketmq log archive unreadable", 1, err)
		return
	}
	defer f.Close()
	if !strings.HasSuffix(path, ".gz") {
		t.consume(l, f, path)
		return
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		l.problems.Add("rocketmq log archive unreadable", 1, fmt.Errorf("%s: %w", path, err))
		return
	}
	defer zr.Close()
	t.consume(l, zr, path)
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
