package logfollow

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
// the writer created and rotated away entirely between two polls (the
// middle one of two rotations) was never opened. So when the follower
// opens a file it notes the rotated-away files then present (File.seen),
// and after a rotation it reads whole every rotated-away file that is new
// since then, except the files it has already read: the one it was
// following, and the last few before it (File.done), which the writer may
// have compressed since.
//
// Rotated-away files are named after the file without its extension and a
// dot (store.log: store.1.log, store.2024-05-06.0.log, store.3.log.gz,
// store.log.1 …), in the file's directory and in Options.ArchiveDirs. A
// file is told apart by inode, size and modification time: a rename keeps
// all three (a fixed window's store.1 → store.2 shift), a new file reusing
// a freed inode does not. The followed file is recognised by its inode when
// it was renamed, and by the uncompressed size in its gzip trailer when it
// was compressed (then deleted, under a new inode).

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

// keepDone is how many read files a File remembers.
const keepDone = 4

// doneWith records a file read to its end.
func (t *File) doneWith(ino uint64, size int64) {
	t.done = append(t.done, readFile{ino, size})
	if len(t.done) > keepDone {
		t.done = t.done[len(t.done)-keepDone:]
	}
}

// alreadyRead reports whether a rotated-away file is one the follower has
// read: the same inode (renamed), or, for a gzip archive, the same size in
// its trailer (compressed, under a new inode).
func (t *File) alreadyRead(f rotatedFile) bool {
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

// rotatedFiles returns the rotated-away files now present.
func (t *File) rotatedFiles() map[fileID]bool {
	out := map[fileID]bool{}
	for _, f := range t.listRotated() {
		out[f.id] = true
	}
	return out
}

// listRotated lists the rotated-away files. A directory that cannot be
// read is a problem; a missing archive directory is not.
func (t *File) listRotated() []rotatedFile {
	prefix := strings.TrimSuffix(t.name, filepath.Ext(t.name)) + "."
	var out []rotatedFile
	dirs := []string{t.dir}
	for _, d := range t.o.ArchiveDirs {
		dirs = append(dirs, filepath.Join(t.dir, d))
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			if !os.IsNotExist(err) {
				t.o.Problem(ArchiveFailed, err)
			}
			continue
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), prefix) || d == t.dir && e.Name() == t.name {
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
func (t *File) middleFiles() []rotatedFile {
	var out []rotatedFile
	for _, f := range t.listRotated() {
		if !t.seen[f.id] && !t.alreadyRead(f) {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id.mtime < out[j].id.mtime })
	return out
}

// readWhole reads a rotated-away file (gzipped when it ends in .gz) from
// its start, handing its lines to Line, and records it as read.
func (t *File) readWhole(rf rotatedFile) {
	f, err := os.Open(rf.path)
	if err != nil {
		t.o.Problem(ArchiveFailed, err)
		return
	}
	defer f.Close()
	if !strings.HasSuffix(rf.path, ".gz") {
		t.doneWith(rf.id.ino, t.consume(f, rf.path))
		return
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.o.Problem(ArchiveFailed, fmt.Errorf("%s: %w", rf.path, err))
		return
	}
	defer zr.Close()
	t.doneWith(rf.id.ino, t.consume(zr, rf.path))
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
