package collector

import (
	"bytes"
	"sync"
)

// LogBuffer collects log output, safe for concurrent use. Its user is the
// exporter's /probe?debug=true, whose answer holds the lines of its run (a
// run abandoned at its deadline may still write while the answer reads
// them); the end-to-end and collector tests read logs through it too.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
