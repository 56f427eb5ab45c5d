package resplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// TestConn: through a socket pair, the read carrying the oversized
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

// chunkConn hands out at most n bytes per Read, as a slow network does.
type chunkConn struct {
	net.Conn
	n int
}

func (c chunkConn) Read(p []byte) (int, error) { return c.Conn.Read(p[:min(len(p), c.n)]) }

// TestConnHold: a bulk string announced larger than HoldAbove reaches the
// reader only once complete — the reader (go-redis) allocates what a
// header announces when it reads the header's LF — and then unchanged;
// smaller ones pass at once. In a synctest bubble, the 50 ms read deadline
// that says "nothing more came" passes once the writer is done.
func TestConnHold(t *testing.T) { synctest.Test(t, testConnHold) }

func testConnHold(t *testing.T) {
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

// TestStreamThroughGoRedis: CLIENT LIST's payload goes to the sink as it
// arrives, in any cut of the stream, and go-redis reads an empty bulk
// string in its place and then the next replies as usual. Error replies,
// an unarmed stream and a pipeline reach go-redis unchanged; a reply over
// the stream's limit is refused.
func TestStreamThroughGoRedis(t *testing.T) {
	var body strings.Builder
	for i := range 300 { // 16 kB: four times go-redis' 4 KiB reads
		fmt.Fprintf(&body, "id=%d addr=10.0.%d.%d:4000 name=app-%d omem=0 cmd=get\n", i, i/256, i%256, i)
	}
	list := body.String()
	info := "# Server\r\nredis_version:7.0.15\r\n" + strings.Repeat("x", 100) + "\r\n"
	answering := redistest.NewPipe(redistest.Replies{"client list": redistest.Bulk(list), "info": redistest.Bulk(info)})
	refusing := redistest.NewPipe(redistest.Replies{
		"client list": redistest.Raw("-NOPERM this user has no permissions to run the 'client|list' command\r\n"),
	})
	client := func(srv *redistest.Server, chunk int, stream *Stream, limit int64, onLimit func()) *redis.Client {
		c := redis.NewClient(&redis.Options{
			Addr: "pipe:6379", Protocol: 2, DisableIdentity: true, MaxRetries: -1,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := srv.Dial(ctx, network, addr)
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
		c := client(answering, chunk, stream, 4096, nil)
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
	pipe := client(answering, 100, stream, 1<<20, nil).Pipeline()
	cl := pipe.ClientList(ctx)
	pipe.Ping(ctx)
	if _, err := pipe.Exec(ctx); err != nil || cl.Val() != list || sink.begins != 0 {
		t.Errorf("pipelined CLIENT LIST: %d bytes, %v, Begin called %d times", len(cl.Val()), err, sink.begins)
	}
	stream.Disarm()
	if got, err := client(answering, 100, stream, 1<<20, nil).ClientList(ctx).Result(); err != nil || got != list {
		t.Errorf("unarmed: %d bytes, %v", len(got), err)
	}

	hits := 0
	small := NewStream(1000, "client", "list")
	small.Arm(sink)
	if _, err := client(answering, 100, small, 1<<20, func() { hits++ }).ClientList(ctx).Result(); !errors.Is(err, ErrTooLarge) || hits != 1 {
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
				if feed(&l, data[i:i+1]) != nil {
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
		if feed(&whole, data) == nil && whole.AtBoundary() && (!armed || streamedWhole || want == nil) && errors.Is(err, io.EOF) && !bytes.Equal(got, want) {
			t.Fatalf("a complete stream: the reader got %q, want %q", got, want)
		}
	})
}

// TestConnBudget: connections share a budget that fits one held bulk
// string. The second waits while the first holds its bytes and fails with
// remote.ErrBudget at its read deadline, without reading its payload;
// once the first reader has taken its whole string, the budget is free
// again and a third connection reads at once. A connection closed in the
// middle of a held reply gives its bytes back, and one closed while it
// waits stops waiting. This is what keeps 40 concurrent /probe requests of
// 1 MiB replies from holding 40 × 2 MiB at once (61 MB of a 64 MiB cgroup
// without it). In a synctest bubble, so that the deadline is exact.
func TestConnBudget(t *testing.T) { synctest.Test(t, testConnBudget) }

func testConnBudget(t *testing.T) {
	budget := remote.NewBudget(150)
	refused := 0
	conn := func() (net.Conn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return NewConn(a, Options{Limit: 1 << 20, HoldAbove: 10, Budget: budget, OnBudget: func() { refused++ }}), b
	}
	reply := "$100\r\n" + strings.Repeat("x", 100) + "\r\n"
	c1, s1 := conn()
	go func() { _, _ = s1.Write([]byte(reply)) }()
	buf := make([]byte, 9)
	_ = c1.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := io.ReadFull(c1, buf); err != nil || string(buf[:n]) != "$100\r\nxxx" {
		t.Fatalf("first reply: %q %v", buf[:n], err)
	}
	// c1 has its 102 bytes and the reader has not taken them all.
	if got := budget.InUse(); got != 102 {
		t.Fatalf("in use %d, want 102", got)
	}
	c2, s2 := conn()
	go func() { _, _ = s2.Write([]byte(reply)) }()
	start := time.Now()
	_ = c2.SetReadDeadline(start.Add(200 * time.Millisecond))
	_, err := io.ReadFull(c2, buf)
	if !errors.Is(err, remote.ErrBudget) || refused != 1 {
		t.Fatalf("second reply while the budget is full: %v (refused %d)", err, refused)
	}
	if waited := time.Since(start); waited != 200*time.Millisecond {
		t.Errorf("gave up after %v, want at its deadline (200ms)", waited)
	}
	rest := make([]byte, len(reply)-len(buf))
	if _, err := io.ReadFull(c1, rest); err != nil || string(rest) != reply[len(buf):] {
		t.Fatalf("rest of the first reply: %v", err)
	}
	if got := budget.InUse(); got != 0 {
		t.Fatalf("in use %d after the reader took the whole reply, want 0", got)
	}
	c3, s3 := conn()
	go func() { _, _ = s3.Write([]byte(reply)) }()
	_ = c3.SetReadDeadline(time.Now().Add(time.Second))
	got := make([]byte, len(reply))
	if _, err := io.ReadFull(c3, got); err != nil || string(got) != reply {
		t.Fatalf("third reply: %v", err)
	}

	// Closing a connection in the middle of a held reply gives its bytes back.
	c4, s4 := conn()
	go func() { _, _ = s4.Write([]byte(reply[:50])) }()
	_ = c4.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c4.Read(buf)
	if budget.InUse() != 102 {
		t.Fatalf("in use %d while c4 holds part of its reply", budget.InUse())
	}
	// A connection waiting for the budget c4 holds stops at its Close.
	c5, s5 := conn()
	go func() { _, _ = s5.Write([]byte(reply)) }()
	waited := make(chan error)
	go func() {
		_, err := c5.Read(buf) // no deadline: waits as long as a read would
		waited <- err
	}()
	synctest.Wait()
	c5.Close()
	if err := <-waited; !errors.Is(err, net.ErrClosed) || refused != 1 {
		t.Errorf("a read waiting for budget, then closed: %v (refused %d, want 1)", err, refused)
	}
	c4.Close()
	if got := budget.InUse(); got != 0 {
		t.Errorf("in use %d after Close, want 0", got)
	}
}
