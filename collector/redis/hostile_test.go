package redis

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// scriptedRedis answers like a Redis server (PING, HELLO unknown, CLIENT
// SETNAME), except that the reply to INFO is written by info, and the
// reply to CLIENT LIST by clientList (unknown command when nil): a hostile
// or broken server. It counts the connections it saw closed by the
// client.
type scriptedRedis struct {
	addr       string
	info       func(w io.Writer) error
	clientList func(w io.Writer) error
	auth       string // the reply to AUTH; "": unknown command
	accepted   atomic.Int64
	closed     atomic.Int64
}

// open is the number of connections the client has not closed.
func (s *scriptedRedis) open() int64 { return s.accepted.Load() - s.closed.Load() }

func startScriptedRedis(t testing.TB, info func(w io.Writer) error, edit ...func(*scriptedRedis)) *scriptedRedis {
	t.Helper()
	s := &scriptedRedis{info: info}
	for _, e := range edit {
		e(s)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				defer func() { s.closed.Add(1); c.Close() }()
				r := bufio.NewReader(c)
				for {
					args, err := readRESPCommand(r)
					if err != nil {
						return
					}
					switch cmd := strings.ToLower(args[0]); cmd {
					case "info":
						err = s.info(c)
					case "client":
						if len(args) > 1 && strings.EqualFold(args[1], "list") && s.clientList != nil {
							err = s.clientList(c)
						} else {
							_, err = io.WriteString(c, "+OK\r\n")
						}
					case "ping":
						_, err = io.WriteString(c, "+PONG\r\n")
					case "auth":
						if s.auth == "" {
							s.auth = "-ERR unknown command 'AUTH'\r\n"
						}
						_, err = io.WriteString(c, s.auth)
					default:
						_, err = fmt.Fprintf(c, "-ERR unknown command '%s'\r\n", args[0])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// TestHostileReplySize: a server whose INFO reply announces 800 MB (the
// issue's capture took the exporter to 1.58 GB RSS after one scrape), an
// aggregate of 100 million elements, or a status line that never ends.
// None may cost more than a few MiB of heap over three scrapes
// (runtime.MemStats.TotalAlloc counts every allocation, freed or not);
// the refusal is counted, the target reported down with its reason, and
// the connection closed (issue 11, item 2).
//
// Not parallel: TotalAlloc is process-wide.
func TestHostileReplySize(t *testing.T) {
	endless := func(w io.Writer) error {
		if _, err := io.WriteString(w, "+"); err != nil {
			return err
		}
		chunk := []byte(strings.Repeat("a", 32<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
	}
	cases := []struct {
		name      string
		info      func(w io.Writer) error
		reason    string
		oversized float64
	}{
		{"800 MB bulk string", func(w io.Writer) error {
			_, err := io.WriteString(w, "$838860800\r\n") // then silence
			return err
		}, reasonTooLarge, 3},
		{"100M-element array", func(w io.Writer) error {
			_, err := io.WriteString(w, "*100000000\r\n")
			return err
		}, reasonTooLarge, 3},
		{"endless status line", endless, reasonProtocol, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := startScriptedRedis(t, c.info)
			cfg := collectortest.Config("redis", nil)
			sc := newTestScraper(t, testSettings(), cfg, srv.addr)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var res collectortest.Result
			for range 3 {
				res = collectortest.Scrape(t, sc, 3*time.Second)
			}
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %.1f MiB in 3 scrapes; heap in use %.1f MiB", float64(alloc)/(1<<20), float64(after.HeapAlloc)/(1<<20))
			if alloc > 16<<20 {
				t.Errorf("3 scrapes allocated %d bytes", alloc)
			}
			if v := res.Must(t, "stall_redis_up"); v != 0 {
				t.Errorf("up %v", v)
			}
			res.Must(t, "stall_redis_down_reason", "reason", c.reason)
			if v := res.Must(t, "stall_redis_oversized_replies_total"); v != c.oversized {
				t.Errorf("oversized replies %v, want %v", v, c.oversized)
			}
			if c.reason == reasonProtocol && cfg.Problems.Count() == 0 {
				t.Error("a malformed reply is not counted in stall_collector_parse_errors_total")
			}
			waitFor(t, "the server to see its connections closed", 10*time.Second, func() bool { return srv.closed.Load() >= 3 })
		})
	}
}
