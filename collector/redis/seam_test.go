package redis

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The seam between go-redis and the exporter (doc.go, "Following a reply")
// rests on what go-redis writes and returns, which no API promises. The
// tests here pin it against the go-redis of go.mod, through the options
// and dialer the collector builds, and each failure says what to change.

// clientListBytes is the RESP array the CLIENT LIST stream of newTarget
// recognises (resplimit.NewStream(_, "client", "list")) and go-redis
// writes.
const clientListBytes = "*2\r\n$6\r\nclient\r\n$4\r\nlist\r\n"

// recordingConn records each Write go-redis makes, under resplimit's Conn.
type recordingConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *[]string
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.writes = append(*c.writes, string(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// countingSink is a resplimit.Sink that counts what it was given.
type countingSink struct {
	begun   int
	payload strings.Builder
}

func (s *countingSink) Begin(int64)                 { s.begun++; s.payload.Reset() }
func (s *countingSink) Write(p []byte) (int, error) { return s.payload.Write(p) }

// goRedisVersion is the go-redis version go.mod requires, for the
// failure messages.
func goRedisVersion() string {
	b, _ := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/redis/go-redis/v9" {
			return f[1]
		}
	}
	return "(version not found in go.mod)"
}

// TestGoRedisWritesWhatTheStreamRecognises: a new connection authenticates
// with inSetup true from the credentials request to OnConnect (HELLO, then
// AUTH where HELLO is unknown: Redis before 6.0), and CLIENT LIST goes out
// in one Write of exactly clientListBytes, so its reply reaches the armed
// sink and go-redis reads "" in its place.
func TestGoRedisWritesWhatTheStreamRecognises(t *testing.T) {
	const list = "id=1 addr=10.0.0.1:5000 name=a omem=0 cmd=get\n"
	var setup atomic.Pointer[atomic.Bool] // the target's inSetup, read by the server's goroutine
	var duringSetup sync.Map              // command → setup's value when the server read it
	seen := func(cmd string, r redistest.Reply) redistest.Reply {
		return func(w io.Writer) error {
			duringSetup.Store(cmd, setup.Load().Load())
			return r(w)
		}
	}
	srv := redistest.Start(t, redistest.Replies{
		"hello":          seen("hello", redistest.Raw("-ERR unknown command 'HELLO'\r\n")),
		"auth":           seen("auth", redistest.Raw("+OK\r\n")),
		"client setname": seen("client setname", redistest.Raw("+OK\r\n")),
		"client list":    redistest.Bulk(list),
	})
	s := testSettings()
	t.Setenv("STALL_SEAM_TEST_PASSWORD", "pw")
	spec, err := parseTarget("redis://"+srv.Addr+"?password_env=STALL_SEAM_TEST_PASSWORD", s.conn)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var writes []string
	dial := spec.dial
	spec.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return recordingConn{Conn: c, mu: &mu, writes: &writes}, nil
	}
	// The client and stream a scrape uses (lockAndScrape).
	tg := newTarget(spec, s, collectortest.Config("redis", nil))
	stream := tg.clStream
	setup.Store(&tg.inSetup)
	client := spec.newClient(stream, &tg.inSetup)
	defer client.Close()
	var sink countingSink
	stream.Arm(&sink)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	reply, err := client.ClientList(ctx).Result()
	stream.Disarm()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v (server got %q)", err, srv.Commands())
	}

	mu.Lock()
	defer mu.Unlock()
	var listWrites []string
	for _, w := range writes {
		if strings.Contains(strings.ToLower(w), "list") {
			listWrites = append(listWrites, w)
		}
	}
	if len(listWrites) != 1 || listWrites[0] != clientListBytes || sink.begun != 1 || sink.payload.String() != list || reply != "" {
		t.Errorf("go-redis %s wrote CLIENT LIST as %q (every write of the connection: %q); the stream saw %d replies (%q) and go-redis read %q.\n"+
			"resplimit.Stream recognises a command by one Write of exactly its RESP array, %q, so that a pipeline is never streamed: "+
			"without it every CLIENT LIST reply is read whole by go-redis and the scrape fails with reason protocol "+
			"(\"the reply is not a bulk string\", clientlist.go). If go-redis now spells the command otherwise (case, extra "+
			"arguments), change the arguments of resplimit.NewStream in newTarget (target.go) and clientListBytes here; if it "+
			"splits the array over several writes or sends it with others, change Stream.sinkFor (resplimit/stream.go) to "+
			"recognise the command in the write stream.",
			goRedisVersion(), listWrites, writes, sink.begun, sink.payload.String(), reply, clientListBytes)
	}
	for cmd, want := range map[string]bool{"hello": true, "auth": true, "client setname": false} {
		got, ok := duringSetup.Load(cmd)
		if !ok || got != want {
			t.Errorf("go-redis %s: inSetup was %v (sent: %v) when the server read %s, want %v; the commands: %q.\n"+
				"inSetup tells an error reply to HELLO or AUTH (reason auth) from one to INFO; newClient (spec.go) sets it in "+
				"CredentialsProviderContext, which go-redis calls before HELLO and AUTH, and clears it in OnConnect, which it "+
				"calls after them. If go-redis now authenticates elsewhere (OnConnect first, credentials cached, HELLO "+
				"without asking), move the two stores in newClient to the hooks that bracket its authentication.",
				goRedisVersion(), got, ok, cmd, want, srv.Commands())
		}
	}
}

// TestGoRedisParseErrorText: a reply resplimit's lexer passes but go-redis
// cannot parse comes back without a type or sentinel of go-redis' own:
// ":abc" where an integer is due (MEMORY USAGE of the big-key scan) as
// strconv's error, an array there as go-redis' text. isGoRedisParseError
// matches both, so that such a target is down with reason protocol.
func TestGoRedisParseErrorText(t *testing.T) {
	for _, reply := range []string{":abc\r\n", "*1\r\n$1\r\na\r\n"} {
		srv := redistest.Start(t, redistest.Replies{"memory usage": redistest.Raw(reply)})
		spec, err := parseTarget(srv.Addr, testSettings().conn)
		if err != nil {
			t.Fatal(err)
		}
		client := spec.newClient(nil, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = client.MemoryUsage(ctx, "k").Result()
		cancel()
		client.Close()
		if err == nil {
			t.Errorf("go-redis %s read %q as an integer without an error: this test needs another unparsable reply", goRedisVersion(), reply)
			continue
		}
		if !isGoRedisParseError(err) || downReason(err) != remote.ReasonProtocol {
			t.Errorf("go-redis %s answered %q where an integer is due with %v (%T), reason %q.\n"+
				"isGoRedisParseError (reasons.go) matches *strconv.NumError and the texts \"redis: can't parse\" and "+
				"\"redis: invalid reply\": add what go-redis returns now (its internal/proto/reader.go), else such a target "+
				"is down with reason %q instead of protocol.",
				goRedisVersion(), reply, err, err, downReason(err), downReason(err))
		}
	}
}
