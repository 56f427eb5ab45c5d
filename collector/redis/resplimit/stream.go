package resplimit

import (
	"bytes"
	"fmt"
	"sync"
)

// A Sink receives the payload of a streamed reply.
type Sink interface {
	// Begin starts a reply of size payload bytes. It is called again when
	// the command is retried on another connection: the sink starts over.
	Begin(size int64)
	// Write takes the next payload bytes, in order; it must not keep p.
	// An error fails the read (and closes the connection).
	Write(p []byte) (int, error)
}

// Stream names the command whose bulk-string reply is streamed, and the
// Sink its next replies go to. A Conn recognises the command by one Write
// of exactly its RESP array, so a pipeline is never streamed. It is safe
// for concurrent use.
type Stream struct {
	cmd   []byte
	limit int64
	mu    sync.Mutex
	sink  Sink
}

// NewStream returns a Stream for the command args (e.g. "client", "list")
// whose reply may be up to limit payload bytes; a longer one is refused
// with ErrTooLarge.
func NewStream(limit int64, args ...string) *Stream {
	cmd := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		cmd = fmt.Appendf(cmd, "$%d\r\n%s\r\n", len(a), a)
	}
	return &Stream{cmd: cmd, limit: limit}
}

// Arm sends the replies to the command to sink until Disarm; an unarmed
// command's reply reaches go-redis like any other.
func (s *Stream) Arm(sink Sink) {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
}

func (s *Stream) Disarm() { s.Arm(nil) }

// sinkFor returns the armed sink when p is the command.
func (s *Stream) sinkFor(p []byte) Sink {
	if !bytes.Equal(p, s.cmd) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sink
}

// emptyBulk is what go-redis reads in place of a streamed reply.
var emptyBulk = []byte("$0\r\n\r\n")
