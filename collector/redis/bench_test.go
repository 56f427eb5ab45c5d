package redis

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// redisCounters reads the server-side totals the cost benchmark compares.
func redisCounters(b *testing.B, c *redis.Client) (cmds, in, out float64, replyLen int) {
	b.Helper()
	s, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	in0 := replies.ParseInfo(s)
	cmds, _, _ = in0.Number("total_commands_processed")
	in, _, _ = in0.Number("total_net_input_bytes")
	out, _, _ = in0.Number("total_net_output_bytes")
	return cmds, in, out, len(s)
}

// BenchmarkScrapeCost measures what one scrape costs the Redis server:
// commands it executes and bytes it reads and writes (from INFO stats
// deltas, minus the measuring INFO itself), plus the exporter-side time.
// "idle": a fresh instance, auto mode (CLIENT LIST every 10th scrape).
// "busy": 1,000 connected clients, 10 of them with a 5 MiB reply pending,
// so auto mode runs CLIENT LIST on every scrape.
func BenchmarkScrapeCost(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := "idle"
		if busy {
			name = "busy-1000-clients"
		}
		b.Run(name, func(b *testing.B) {
			r := startRedis(b)
			admin := r.client()
			ctx := context.Background()
			if busy {
				admin.Set(ctx, "big", strings.Repeat("x", bigValueSize), 0)
				for i := range 1000 {
					c, err := net.Dial("tcp", r.addr)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { c.Close() })
					cmd := fmt.Sprintf("CLIENT SETNAME app-%d\r\n", i%20)
					if i%100 == 0 {
						cmd += "GET big\r\n"
					}
					if _, err := c.Write([]byte(cmd)); err != nil {
						b.Fatal(err)
					}
				}
				collectortest.WaitFor(b, 10*time.Second, "a 5 MiB reply in an output buffer", func() error {
					if v := infoField(b, admin, "clients", "client_recent_max_output_buffer"); v < 1<<20 {
						return fmt.Errorf("client_recent_max_output_buffer %v", v)
					}
					return nil
				})
			}
			s := testSettings()
			c, err := newScraper(collectortest.Config("redis", nil), s, []string{r.addr})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			scrapeOnce := func() {
				res := collectortest.Scrape(b, c, 10*time.Second)
				if res.Err != nil {
					b.Fatal(res.Err)
				}
			}
			scrapeOnce() // connection, CONFIG GET: once per 5 minutes, not per scrape
			cmd0, in0, out0, reply0 := redisCounters(b, admin)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				scrapeOnce()
			}
			b.StopTimer()
			cmd1, in1, out1, _ := redisCounters(b, admin)
			// The first measuring INFO is counted in the second one's totals.
			infoReq := float64(len("*2\r\n$4\r\ninfo\r\n$5\r\nstats\r\n"))
			infoResp := float64(reply0 + len(fmt.Sprintf("$%d\r\n\r\n", reply0)))
			n := float64(b.N)
			b.ReportMetric((cmd1-cmd0-1)/n, "redis-cmds/scrape")
			b.ReportMetric((in1-in0-infoReq)/n, "redis-B-in/scrape")
			b.ReportMetric((out1-out0-infoResp)/n, "redis-B-out/scrape")
			// Main-thread time of one CLIENT LIST, from commandstats.
			cs, _ := admin.Info(ctx, "commandstats").Result()
			for _, st := range replies.ParseInfo(cs).Commands {
				if st.Name == "client|list" && st.Calls > 0 {
					b.ReportMetric(float64(st.Usec)/float64(st.Calls), "redis-us/client-list")
				}
			}
		})
	}
}
