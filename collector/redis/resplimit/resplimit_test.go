package resplimit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replies as Redis 2.4 … 8.x and RESP3 servers send them.
var validReplies = []string{
	"+OK\r\n",
	"-ERR unknown command 'HELLO'\r\n",
	"-ERR Syntax error, try CLIENT (LIST | KILL ip:port)\r\n",
	":1024\r\n",
	"$-1\r\n",
	"*-1\r\n",
	"$0\r\n\r\n",
	"$5\r\nhello\r\n",
	"*2\r\n$26\r\nclient-output-buffer-limit\r\n$4\r\nx y \r\n",
	"*3\r\n$4\r\npeak\r\n:123\r\n*2\r\n:1\r\n$-1\r\n", // nested, as MEMORY STATS
	"%2\r\n+a\r\n:1\r\n+b\r\n,3.14\r\n",               // RESP3 map and double
	"~1\r\n#t\r\n",                                    // set, boolean
	"_\r\n",                                           // null
	"(3492890328409238509324850943850943825024385\r\n",
	"=15\r\ntxt:Some string\r\n",                    // verbatim
	"!21\r\nSYNTAX invalid syntax\r\n",              // blob error
	">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", // push
	"|1\r\n+key\r\n+val\r\n*0\r\n",                  // attribute then empty array
}

func TestLexerValid(t *testing.T) {
	all := strings.Join(validReplies, "")
	l := Lexer{Limit: 1 << 20}
	if err := l.Feed([]byte(all)); err != nil {
		t.Fatalf("valid stream refused: %v", err)
	}
	if l.st != stType {
		t.Errorf("stream ended mid-value (state %d)", l.st)
	}
	// Byte by byte: the same verdict and the same charge.
	b := Lexer{Limit: 1 << 20}
	for i := range len(all) {
		if err := b.Feed([]byte{all[i]}); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if b.charged != l.charged {
		t.Errorf("charged %d byte by byte, %d at once", b.charged, l.charged)
	}
}

func TestLexerLimits(t *testing.T) {
	cases := []struct {
		name  string
		limit int64
		in    string
		want  error
	}{
		{"800 MB bulk announced", 64 << 20, "$838860800\r\n", ErrTooLarge},
		{"bulk exactly at the limit", 14, "$8\r\n12345678\r\n", nil}, // 4 header bytes + 8 + CRLF
		{"bulk one byte over", 13, "$8\r\n12345678\r\n", ErrTooLarge},
		{"huge array", 64 << 20, "*100000000\r\n", ErrTooLarge},
		{"huge map counts pairs", 1000, "%20\r\n", ErrTooLarge},
		{"map within", 2000, "%20\r\n", nil},
		{"endless simple string", 1 << 30, "+" + strings.Repeat("a", MaxLine+1), ErrProtocol},
		{"bytes beyond the budget", 100, strings.Repeat(":1\r\n", 30), ErrTooLarge},
		{"unknown type", 100, "?x\r\n", ErrProtocol},
		{"streamed aggregate", 100, "*?\r\n", ErrProtocol},
		{"negative length", 100, "$-2\r\n", ErrProtocol},
		{"empty length", 100, "$\r\n", ErrProtocol},
		{"minus only", 100, "*-\r\n", ErrProtocol},
		{"no LF", 100, "$1\rx", ErrProtocol},
		{"long header", 1 << 40, "$0000000000000000000000001\r\n", ErrProtocol},
		{"length overflow", 1 << 62, "$9999999999999999999\r\n", ErrProtocol},
		{"HTTP answer", 1 << 20, "HTTP/1.1 400 Bad Request\r\n", ErrProtocol},
	}
	for _, c := range cases {
		l := Lexer{Limit: c.limit}
		err := l.Feed([]byte(c.in))
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if err != nil && !errors.Is(l.Feed([]byte("+OK\r\n")), c.want) {
			t.Errorf("%s: the error is not sticky", c.name)
		}
	}
}

// TestLexerReset: the budget is per command; a Write (Reset) between two
// replies gives each the whole budget, a pipeline shares it.
func TestLexerReset(t *testing.T) {
	reply := "$30\r\n" + strings.Repeat("x", 30) + "\r\n" // charged 5 + 32
	l := Lexer{Limit: 60}
	if err := l.Feed([]byte(reply)); err != nil {
		t.Fatal(err)
	}
	l.Reset()
	if err := l.Feed([]byte(reply)); err != nil {
		t.Fatalf("second command: %v", err)
	}
	if err := l.Feed([]byte(reply)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("two replies to one command within 60 bytes: %v", err)
	}
}

// TestConn: through a real socket pair, the read carrying the oversized
// header fails, the connection is closed and OnLimit runs once; a Write
// resets the budget.
func TestConn(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	hits := 0
	c := NewConn(a, Options{Limit: 100, OnLimit: func() { hits++ }})
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	send := func(s string) { go func() { _, _ = b.Write([]byte(s)) }() }

	buf := make([]byte, 256)
	for range 3 { // 3 × 87 bytes: fine with a Write before each
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		send("$80\r\n" + strings.Repeat("y", 80) + "\r\n")
		if _, err := io.ReadFull(c, buf[:87]); err != nil {
			t.Fatalf("reply within the budget: %v", err)
		}
	}
	send("$838860800\r\n")
	_, err := c.Read(buf)
	if !errors.Is(err, ErrTooLarge) || hits != 1 {
		t.Fatalf("oversized header: err %v, OnLimit ran %d times", err, hits)
	}
	if _, err := c.Write([]byte("PING\r\n")); err == nil {
		t.Error("the connection was not closed")
	}
	if _, err := c.Read(buf); err == nil || hits != 1 {
		t.Errorf("read after the refusal: %v, OnLimit %d", err, hits)
	}
}

func FuzzLexer(f *testing.F) {
	f.Add([]byte(strings.Join(validReplies, "")), uint16(7), uint32(1<<20))
	f.Add([]byte("$838860800\r\n"), uint16(3), uint32(1<<26))
	f.Add([]byte("*3\r\n$1\r\na\r\n%1\r\n+k\r\n:1\r\n_\r\n"), uint16(1), uint32(200))
	f.Add([]byte("$-1\r\n*-1\r\n$-2\r\n"), uint16(2), uint32(100))
	f.Fuzz(func(t *testing.T, data []byte, split uint16, limit uint32) {
		if limit == 0 {
			limit = 1
		}
		whole := Lexer{Limit: int64(limit)}
		errWhole := whole.Feed(data)
		if errWhole == nil && whole.charged > whole.Limit {
			t.Fatalf("charged %d over the limit %d without an error", whole.charged, whole.Limit)
		}
		if errWhole != nil && !errors.Is(errWhole, ErrTooLarge) && !errors.Is(errWhole, ErrProtocol) {
			t.Fatalf("unexpected error kind %v", errWhole)
		}
		// The verdict must not depend on how the stream is cut.
		step := int(split%64) + 1
		parts := Lexer{Limit: int64(limit)}
		var errParts error
		for i := 0; i < len(data) && errParts == nil; i += step {
			errParts = parts.Feed(data[i:min(i+step, len(data))])
		}
		if (errWhole == nil) != (errParts == nil) || errWhole != nil && errWhole.Error() != errParts.Error() {
			t.Fatalf("at once: %v; in %d-byte pieces: %v", errWhole, step, errParts)
		}
		if errWhole == nil && (whole.charged != parts.charged || whole.st != parts.st) {
			t.Fatalf("charged %d/%d, state %d/%d", whole.charged, parts.charged, whole.st, parts.st)
		}
	})
}

// BenchmarkLexer: the check on a 2.9 MB CLIENT LIST reply (10,000
// clients) fed in go-redis' 32 KiB reads — the cost the limit adds to the
// largest reply a scrape reads.
func BenchmarkLexer(b *testing.B) {
	line := "id=3 addr=10.1.0.6:40001 laddr=10.1.0.1:6379 fd=6 name=catalog-reader-5f7b9c8d6d-bqdkr age=10 idle=3 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=16384 obl=0 oll=1 omem=5242880 tot-mem=5280000 events=rw cmd=get user=app redir=-1 resp=2\n"
	body := strings.Repeat(line, 10000)
	reply := []byte("$" + strconv.Itoa(len(body)) + "\r\n" + body + "\r\n")
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		l := Lexer{Limit: 64 << 20}
		for p := reply; len(p) > 0; {
			n := min(len(p), 32<<10)
			if err := l.Feed(p[:n]); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
	}
}

// chunkConn hands out at most n bytes per Read, as a slow network does.
type chunkConn struct {
	net.Conn
	n int
}

func (c chunkConn) Read(p []byte) (int, error) { return c.Conn.Read(p[:min(len(p), c.n)]) }

// TestConnHold: a bulk string announced larger than HoldAbove reaches the
// reader only once complete — the reader (go-redis) allocates what a
// header announces when it reads the header's LF — and then unchanged;
// smaller ones pass at once.
func TestConnHold(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := NewConn(a, Options{Limit: 1 << 20, HoldAbove: 10})
	buf := make([]byte, 256)
	readUntilQuiet := func() string {
		var got []byte
		for {
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				return string(got)
			}
		}
	}
	write := func(s string) {
		go func() { _, _ = b.Write([]byte(s)) }()
	}
	write("$5\r\nsmall\r\n$100\r\n" + strings.Repeat("x", 50))
	if got := readUntilQuiet(); got != "$5\r\nsmall\r\n$100\r" {
		t.Fatalf("before the held bulk is complete the reader got %q", got)
	}
	write(strings.Repeat("x", 50) + "\r\n:1\r\n")
	if got, want := readUntilQuiet(), "\n"+strings.Repeat("x", 100)+"\r\n:1\r\n"; got != want {
		t.Fatalf("after it: %q, want %q", got, want)
	}
}

// listSink records a streamed reply.
type listSink struct {
	begins int
	size   int64
	got    strings.Builder
}

func (s *listSink) Begin(size int64) { s.begins++; s.size = size; s.got.Reset() }
func (s *listSink) Write(p []byte) (int, error) {
	return s.got.Write(p)
}

// fakeServer answers each command (matched by its lower-case words) with
// the reply in replies, or an unknown-command error.
func fakeServer(t *testing.T, replies map[string]string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
					var words []string
					for range n {
						h, _ := r.ReadString('\n')
						size, _ := strconv.Atoi(strings.TrimSpace(h[1:]))
						w := make([]byte, size+2)
						if _, err := io.ReadFull(r, w); err != nil {
							return
						}
						words = append(words, strings.ToLower(string(w[:size])))
					}
					reply, ok := replies[strings.Join(words, " ")]
					if !ok {
						reply = "-ERR unknown command '" + words[0] + "'\r\n"
					}
					if _, err := io.WriteString(c, reply); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestStreamThroughGoRedis: CLIENT LIST's payload goes to the sink as it
// arrives, in any cut of the stream, and go-redis reads an empty bulk
// string in its place and then the next replies as usual. Error replies,
// an unarmed stream and a pipeline reach go-redis unchanged; a reply over
// the stream's limit is refused.
func TestStreamThroughGoRedis(t *testing.T) {
	var body strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&body, "id=%d addr=10.0.%d.%d:4000 name=app-%d omem=0 cmd=get\n", i, i/256, i%256, i)
	}
	list := body.String()
	bulk := func(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }
	info := "# Server\r\nredis_version:7.0.15\r\n" + strings.Repeat("x", 100) + "\r\n"
	addr := fakeServer(t, map[string]string{
		"client list": bulk(list), "info": bulk(info), "ping": "+PONG\r\n",
	})
	refusing := fakeServer(t, map[string]string{
		"client list": "-NOPERM this user has no permissions to run the 'client|list' command\r\n",
	})
	client := func(addr string, chunk int, stream *Stream, limit int64, onLimit func()) *redis.Client {
		c := redis.NewClient(&redis.Options{
			Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return NewConn(chunkConn{nc, chunk}, Options{Limit: limit, HoldAbove: 64, Stream: stream, OnLimit: onLimit}), nil
			},
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := context.Background()
	for _, chunk := range []int{1, 7, 4096} {
		stream := NewStream(1<<20, "client", "list")
		sink := &listSink{}
		stream.Arm(sink)
		c := client(addr, chunk, stream, 4096, nil)
		for range 2 {
			got, err := c.ClientList(ctx).Result()
			if err != nil || got != "" {
				t.Fatalf("chunk %d: ClientList = %d bytes, %v; want an empty string", chunk, len(got), err)
			}
			if sink.got.String() != list || sink.size != int64(len(list)) {
				t.Fatalf("chunk %d: the sink got %d bytes (Begin %d), want %d", chunk, sink.got.Len(), sink.size, len(list))
			}
			if got, err := c.Info(ctx).Result(); err != nil || got != info {
				t.Fatalf("chunk %d: INFO after a streamed reply: %q, %v", chunk, got, err)
			}
		}
		if sink.begins != 2 {
			t.Errorf("chunk %d: Begin called %d times for 2 replies", chunk, sink.begins)
		}
	}

	stream := NewStream(1<<20, "client", "list")
	sink := &listSink{}
	stream.Arm(sink)
	if _, err := client(refusing, 5, stream, 4096, nil).ClientList(ctx).Result(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") || sink.begins != 0 {
		t.Errorf("error reply: %v (Begin called %d times)", err, sink.begins)
	}
	pipe := client(addr, 100, stream, 1<<20, nil).Pipeline()
	cl := pipe.ClientList(ctx)
	pipe.Ping(ctx)
	if _, err := pipe.Exec(ctx); err != nil || cl.Val() != list || sink.begins != 0 {
		t.Errorf("pipelined CLIENT LIST: %d bytes, %v, Begin called %d times", len(cl.Val()), err, sink.begins)
	}
	stream.Disarm()
	if got, err := client(addr, 100, stream, 1<<20, nil).ClientList(ctx).Result(); err != nil || got != list {
		t.Errorf("unarmed: %d bytes, %v", len(got), err)
	}

	hits := 0
	small := NewStream(1000, "client", "list")
	small.Arm(sink)
	if _, err := client(addr, 100, small, 1<<20, func() { hits++ }).ClientList(ctx).Result(); !errors.Is(err, ErrTooLarge) || hits != 1 {
		t.Errorf("a reply over the stream's limit: %v, OnLimit ran %d times", err, hits)
	}
}

// bytesConn serves data in reads of at most chunk bytes, then io.EOF;
// writes are discarded, Close does nothing.
type bytesConn struct {
	net.Conn // nil: only Read and Write are used
	data     []byte
	chunk    int
}

func (c *bytesConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *bytesConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *bytesConn) Close() error                { return nil }

// FuzzConn: whatever a server sends and however it is cut, the reader gets
// the stream's bytes in order — with an armed stream's bulk payload moved
// to the sink and an empty bulk string in its place — or a prefix of them
// and an error; never a panic, never bytes out of order.
func FuzzConn(f *testing.F) {
	f.Add([]byte(strings.Join(validReplies, "")), uint8(3), uint8(5), uint8(4), false)
	f.Add([]byte("$12\r\nid=1 addr=a\n\r\n+OK\r\n"), uint8(2), uint8(1), uint8(3), true)
	f.Add([]byte("-NOPERM no\r\n$3\r\nabc\r\n"), uint8(1), uint8(9), uint8(1), true)
	f.Add([]byte("$-1\r\n$20\r\n0123456789"), uint8(4), uint8(4), uint8(2), true)
	f.Add([]byte("*2\r\n$8\r\n01234567\r\n$2\r\nab\r\n"), uint8(0), uint8(0), uint8(3), false)
	f.Fuzz(func(t *testing.T, data []byte, chunk, rsize, hold uint8, armed bool) {
		const limit = 1 << 16
		// What the reader should see, from a lexer's reading of data.
		want, wantSink, streamedWhole := data, []byte(nil), false
		if armed {
			l := Lexer{Limit: limit}
			l.StreamNext(limit)
			for i := range data {
				if l.Feed(data[i:i+1]) != nil {
					break
				}
				if l.Streaming() {
					end := i + 1 + int(l.PayloadLeft())
					if end <= len(data) {
						want = append(append([]byte(nil), emptyBulk...), data[end:]...)
						wantSink, streamedWhole = data[i+1:end-2], true
					} else {
						want = nil
					}
					break
				}
			}
		}
		stream := NewStream(limit, "client", "list")
		sink := &listSink{}
		stream.Arm(sink)
		c := NewConn(&bytesConn{data: data, chunk: int(chunk) + 1}, Options{Limit: limit, HoldAbove: int64(hold), Stream: stream})
		if armed {
			_, _ = c.Write(stream.cmd)
		}
		var got []byte
		buf := make([]byte, int(rsize)+1)
		var err error
		for err == nil {
			var n int
			n, err = c.Read(buf)
			got = append(got, buf[:n]...)
		}
		if !bytes.HasPrefix(want, got) {
			t.Fatalf("the reader got %q, not a prefix of %q (err %v)", got, want, err)
		}
		if streamedWhole && sink.got.String() != string(wantSink) {
			t.Fatalf("the sink got %q, want %q", sink.got.String(), wantSink)
		}
		whole := Lexer{Limit: limit}
		if whole.Feed(data) == nil && whole.AtBoundary() && (!armed || streamedWhole || want == nil) && err == io.EOF && !bytes.Equal(got, want) {
			t.Fatalf("a complete stream: the reader got %q, want %q", got, want)
		}
	})
}
