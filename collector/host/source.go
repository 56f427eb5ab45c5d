package host

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// One source per kernel file. /proc/diskstats and /proc/vmstat are read by
// a scrape-time collector and by the sampler every --sampler.interval, and
// the diskstats device filter is used by the diskstats collector, the
// sampler and the kernel log reader. collector.Build calls each factory on
// its own, so the factories take what they share from process-wide maps
// (sourceAt by path, deviceFilterFor by paths and flags): every collector
// that reads one file reads it through one procSource.

var sources sync.Map // path → *procSource

// sourceAt returns the one source of the file at path.
func sourceAt(path string) *procSource {
	s, _ := sources.LoadOrStore(path, &procSource{path: path})
	return s.(*procSource)
}

// procSourceMaxBytes bounds a procSource's buffer (a /proc/diskstats with
// thousands of devices is ~1 MiB).
const procSourceMaxBytes = 16 << 20

// procSource is one /proc file read every scrape or every sampler tick
// (procfs serves the files read less often). The file stays open and each
// read is one pread from offset 0: no open and no allocation once the
// buffer fits, and one consistent snapshot, since a seq_file hands over
// everything that fits in one call. A read error closes the file, so the
// next read reopens it.
//
// While a sampler reads the file every interval (sampledEvery), a scrape
// (Read) takes the sampler's last read instead of reading again, when it
// is at most one interval old: the kernel generates the file once per
// interval, whatever the scrape rate. Reads are serialised and each one
// replaces the snapshot, so a reader never gets a snapshot older than one
// it got before, and a counter never goes backwards under rate(). Safe for
// concurrent use.
type procSource struct {
	path string

	mu       sync.Mutex
	f        *os.File
	buf      []byte    // the last read
	readAt   time.Time // when buf was read; zero after a failed read
	every    time.Duration
	samplers int
}

// Read copies the file's content into dst (grown as needed) and returns
// it: the sampler's last read when it is at most one interval old, else a
// read made now.
func (s *procSource) Read(dst []byte) ([]byte, error) { return s.copyTo(dst, false) }

// ReadNow is Read from a read made now: the sampler's tick.
func (s *procSource) ReadNow(dst []byte) ([]byte, error) { return s.copyTo(dst, true) }

func (s *procSource) copyTo(dst []byte, now bool) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now || s.every == 0 || s.readAt.IsZero() || time.Since(s.readAt) > s.every {
		if err := s.read(); err != nil {
			return dst[:0], err
		}
	}
	return append(dst[:0], s.buf...), nil
}

// sampledEvery tells the source that a sampler calls ReadNow every
// interval, until the returned function is called.
func (s *procSource) sampledEvery(interval time.Duration) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samplers++
	s.every = interval
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.samplers--; s.samplers == 0 {
			s.every = 0
		}
	}
}

// read fills s.buf with the whole file, doubling it (up to 16 MiB) when
// the file does not fit.
func (s *procSource) read() error {
	s.readAt = time.Time{}
	if s.f == nil {
		f, err := os.Open(s.path)
		if err != nil {
			return err
		}
		s.f = f
	}
	if cap(s.buf) == 0 {
		s.buf = make([]byte, 0, 16<<10)
	}
	for {
		buf := s.buf[:cap(s.buf)]
		n, err := s.f.ReadAt(buf, 0)
		if err == io.EOF || err == nil && n < len(buf) {
			s.buf, s.readAt = buf[:n], time.Now()
			return nil
		}
		if err != nil {
			s.f.Close()
			s.f = nil
			return err
		}
		if len(buf) >= procSourceMaxBytes {
			return fmt.Errorf("%s is larger than %d bytes", s.path, procSourceMaxBytes)
		}
		s.buf = make([]byte, 0, 2*len(buf)) // did not fit: grow and read again from the start
	}
}

// close closes the file of a source the caller made for itself (a
// watched cgroup's memory.stat): the sources of sourceAt live as long as
// the process.
func (s *procSource) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
