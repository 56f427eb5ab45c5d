package redis

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// TestHostileReplySize: a server whose INFO reply announces 800 MB (the
// issue's capture took the exporter to 1.58 GB RSS after one scrape), an
// aggregate of 100 million elements, or a status line that never ends.
// None may cost more than a few MiB of heap over three scrapes
// (runtime.MemStats.TotalAlloc counts every allocation, freed or not);
// the refusal is counted, the target reported down with its reason, and
// the connection closed.
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
		info      redistest.Reply
		reason    string
		oversized float64
	}{
		{"800 MB bulk string", redistest.Raw("$838860800\r\n"), remote.ReasonTooLarge, 3}, // then silence
		{"100M-element array", redistest.Raw("*100000000\r\n"), remote.ReasonTooLarge, 3},
		{"endless status line", endless, remote.ReasonProtocol, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Replies{"info": c.info})
			cfg := collectortest.Config("redis", nil)
			sc := newTestScraper(t, testSettings(), cfg, srv.Addr)
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
			if c.reason == remote.ReasonProtocol && cfg.Problems.Count() == 0 {
				t.Error("a malformed reply is not counted in stall_collector_parse_errors_total")
			}
			collectortest.WaitFor(t, 10*time.Second, "the server to see its connections closed", func() error {
				if n := srv.Closed(); n < 3 {
					return fmt.Errorf("%d of 3 closed", n)
				}
				return nil
			})
		})
	}
}

// TestBadValues: an INFO value that is not a number is counted as bad
// input (stall_collector_parse_errors_total) and its series is absent,
// the others are exported; a CLIENT LIST answered with anything but a
// bulk string (a proxy's status line) is a protocol error after INFO
// answered: the target stays up, the scrape fails, it is counted, and no
// aggregate is made up from it.
func TestBadValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := redistest.NewPipe(redistest.Replies{
			"info":        redistest.Bulk("redis_version:7.0.15\r\nconnected_clients:lots\r\nused_memory:1000\r\nclient_recent_max_output_buffer:5242880\r\n"),
			"client list": redistest.Raw("+OK\r\n"),
		})
		cfg := collectortest.Config("redis", nil)
		c := newPipeScraper(t, testSettings(), cfg, srv)
		res := collectortest.Scrape(t, c, 5*time.Second)
		if v := res.Must(t, "stall_redis_up"); v != 1 {
			t.Errorf("up %v", v)
		}
		if res.Err == nil || !errors.Is(res.Err, resplimit.ErrProtocol) {
			t.Errorf("err %v, want the CLIENT LIST protocol error", res.Err)
		}
		if _, ok := res.Get("stall_redis_clients_connected"); ok {
			t.Error("connected_clients:lots exported")
		}
		if v := res.Must(t, "stall_redis_memory_used_bytes"); v != 1000 {
			t.Errorf("used_memory %v", v)
		}
		if _, ok := res.Get("stall_redis_client_list_clients"); ok {
			t.Error("CLIENT LIST aggregates from a status line")
		}
		if n := cfg.Problems.Count(); n != 2 {
			t.Errorf("%d problems counted, want 2 (the INFO value, the CLIENT LIST reply)", n)
		}
	})
}
