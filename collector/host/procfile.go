package host

import (
	"fmt"
	"io"
	"os"
)

// procFileMaxBytes bounds a ProcFile's buffer (a /proc/diskstats with
// thousands of devices is ~1 MiB).
const procFileMaxBytes = 16 << 20

// ProcFile keeps one /proc file open and re-reads it from offset 0 with
// pread on every Read: no open and no allocation per read once the buffer
// fits. The hot /proc readers use it: the vmstat, zoneinfo and diskstats
// collectors and the sampler (procfs serves the files read less often or
// parsed by it). A read error closes the file so the next Read reopens it.
// Not safe for concurrent use.
type ProcFile struct {
	path string
	f    *os.File
}

// NewProcFile returns a reader of path; the file is opened on the first Read.
func NewProcFile(path string) *ProcFile { return &ProcFile{path: path} }

// Path is the file's path.
func (r *ProcFile) Path() string { return r.path }

// Read fills buf[:cap(buf)] with the whole file, growing buf (doubling, up
// to 16 MiB) when the file does not fit, and returns the filled slice. One
// pread that returns less than the buffer is one consistent snapshot: a
// seq_file hands over everything that fits in one call.
func (r *ProcFile) Read(buf []byte) ([]byte, error) {
	if r.f == nil {
		f, err := os.Open(r.path)
		if err != nil {
			return buf[:0], err
		}
		r.f = f
	}
	if cap(buf) == 0 {
		buf = make([]byte, 0, 16<<10)
	}
	for {
		buf = buf[:cap(buf)]
		n, err := r.f.ReadAt(buf, 0)
		if err == io.EOF || err == nil && n < len(buf) {
			return buf[:n], nil
		}
		if err != nil {
			r.Close()
			return buf[:0], err
		}
		if len(buf) >= procFileMaxBytes {
			return buf[:0], fmt.Errorf("%s is larger than %d bytes", r.path, procFileMaxBytes)
		}
		buf = make([]byte, 0, 2*len(buf)) // did not fit: grow and read again from the start
	}
}

// Close closes the file; the next Read reopens it.
func (r *ProcFile) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
