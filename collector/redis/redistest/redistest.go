// Package redistest is the fake Redis server of the redis collector's
// tests: a loopback listener (or, inside a testing/synctest bubble, an
// in-memory pipe) that answers each command from a table of replies. It
// stands in for what a real redis-server cannot be made to do here:
// versions that are not installed (2.4 … 4.0, replayed from fixtures), and
// hostile or broken peers (an announced 800 MB reply, an endless status
// line, a proxy that refuses AUTH).
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// A Reply writes the answer to one command; an error ends the connection.
type Reply func(w io.Writer) error

// Raw answers with s as it is, RESP or not.
func Raw(s string) Reply {
	b := []byte(s)
	return func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}
}

// Bulk answers with s as a RESP bulk string. The reply is built once, so
// that a test measuring allocations does not count the server's.
func Bulk(s string) Reply { return Raw("$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n") }

// Array answers with an array of bulk strings, as CONFIG GET does.
func Array(items ...string) Reply { return Raw(EncodeArray(items...)) }

// EncodeArray is the RESP array of bulk strings items, for replies that
// nest one (SCAN: a cursor and an array of keys).
func EncodeArray(items ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(items))
	for _, it := range items {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(it), it)
	}
	return b.String()
}

// Replies maps commands to their answers. A command is looked up by its
// words, lower case and joined by one space ("client setname x"), then by
// ever shorter prefixes of them ("client setname", "client"): "info"
// answers INFO with any sections. PING and CLIENT SETNAME answer as Redis
// does unless the table says otherwise; any other command gets Redis'
// unknown-command error.
type Replies map[string]Reply

var defaults = Replies{
	"ping":           Raw("+PONG\r\n"),
	"client setname": Raw("+OK\r\n"),
}

// Server is a fake Redis server. It records the commands it was sent and
// counts the connections it accepted and saw closed.
type Server struct {
	// Addr is the server's host:port on the loopback ("" for a server
	// made with NewPipe).
	Addr string

	replies  Replies
	mu       sync.Mutex
	commands []string
	conns    []net.Conn
	accepted atomic.Int64
	closed   atomic.Int64
}

// Start runs a server on a free loopback port until the test ends.
func Start(t testing.TB, replies Replies) *Server {
	t.Helper()
	s := NewPipe(replies)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.Serve(c)
		}
	}()
	return s
}

// NewPipe returns a server without a listener: its Dial serves each
// connection over net.Pipe, so that a test can run the collector and the
// server inside a testing/synctest bubble.
func NewPipe(replies Replies) *Server { return &Server{replies: replies} }

// Dial is a go-redis Dialer: the client end of a new net.Pipe the server
// serves.
func (s *Server) Dial(context.Context, string, string) (net.Conn, error) {
	client, server := net.Pipe()
	go s.Serve(server)
	return client, nil
}

// Serve answers the commands read from c until c is closed or a reply
// fails.
func (s *Server) Serve(c net.Conn) {
	s.accepted.Add(1)
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	defer func() {
		s.closed.Add(1)
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		args, err := ReadCommand(r)
		if err != nil {
			return
		}
		words := make([]string, len(args))
		for i, a := range args {
			words[i] = strings.ToLower(a)
		}
		s.mu.Lock()
		s.commands = append(s.commands, strings.Join(words, " "))
		s.mu.Unlock()
		if err := s.reply(words)(c); err != nil {
			return
		}
	}
}

func (s *Server) reply(words []string) Reply {
	for n := len(words); n > 0; n-- {
		key := strings.Join(words[:n], " ")
		if r := s.replies[key]; r != nil {
			return r
		}
		if r, ok := defaults[key]; ok {
			return r
		}
	}
	name := ""
	if len(words) > 0 {
		name = words[0]
	}
	return Raw(fmt.Sprintf("-ERR unknown command '%s'\r\n", name))
}

// Commands returns the commands received so far, in order, each as its
// lower-case words joined by one space.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Sent reports whether the server received cmd (Commands' spelling).
func (s *Server) Sent(cmd string) bool { return slices.Contains(s.Commands(), cmd) }

// Closed is the number of connections that ended.
func (s *Server) Closed() int64 { return s.closed.Load() }

// Open is the number of connections the client has not closed.
func (s *Server) Open() int64 { return s.accepted.Load() - s.closed.Load() }

// ReadCommand reads one command as clients send it, an array of bulk
// strings, and returns its words.
func ReadCommand(r *bufio.Reader) ([]string, error) {
	n, err := readLength(r, '*')
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, n)
	for range n {
		size, err := readLength(r, '$')
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:size]))
	}
	return args, nil
}

// readLength reads a "*3" or "$5" header of type typ.
func readLength(r *bufio.Reader, typ byte) (int, error) {
	h, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(h[1:]))
	if h[0] != typ || err != nil || n < 0 {
		return 0, fmt.Errorf("not a %c header: %q", typ, h)
	}
	return n, nil
}
