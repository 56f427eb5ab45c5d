package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// netnsRun runs a command, failing the test with its output.
func netnsRun(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestIncidentNetns reproduces incident 7: Redis in its own network
// namespace behind a veth whose egress (Redis → clients) is shaped with
// tbf; 50 clients GET a 5 MiB key in a loop. The link is the bottleneck,
// so replies wait in Redis' client output buffers: clients memory and omem
// grow while the output byte rate stays flat at what the link delivers.
// The test's hosts use the benchmarking range 198.18.0.0/15; it takes a
// few seconds.
//
// What makes it hold on a loaded 2-core CI machine (it used to assert
// ≥ 60 % of a 300 Mbit/s ceiling and measured 55 % under load average 6):
//   - the ceiling is 100 Mbit/s (incident 7's was 300): the mechanism is
//     the same, and 50 reading goroutines starved of CPU still keep this
//     link saturated;
//   - the exporter's output counter is judged against the bytes the
//     shaper actually sent between the two INFO replies (tc -s, read
//     before and after each scrape), with the wire's headers and the
//     bytes buffered in between as the only slack — not against the
//     nominal rate — and saturation is checked, not assumed: the shaper
//     must have a backlog at 80 % of the readings taken between scrapes;
//   - the exporter scrapes over Redis' Unix socket, as a DaemonSet on the
//     Redis host does over loopback: through the shaped link its INFO
//     would queue behind 50 greedy flows and time out.
func TestIncidentNetns(t *testing.T) {
	const shapedMbit = 100
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the network-namespace incident test")
	}
	redisServerPath(t)
	collectortest.RequireRoot(t, "CAP_NET_ADMIN creates a network namespace, a veth pair and a tbf qdisc")
	collectortest.RequireTool(t, "ip")
	collectortest.RequireTool(t, "tc")
	pid := os.Getpid()
	ns := fmt.Sprintf("stallredis%d", pid)
	// Root without CAP_SYS_ADMIN (an unprivileged container) cannot create
	// one: a failure under make test like a missing tool, not a silent skip.
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		collectortest.Require(t, "network namespaces (`ip netns add` as root, CAP_SYS_ADMIN; not inside an unprivileged container)",
			fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	hostIf, nsIf := fmt.Sprintf("srh%d", pid%1000000), fmt.Sprintf("srn%d", pid%1000000)
	// A /30 of 198.18.0.0/15 chosen by pid, so parallel runs do not clash.
	subnet := fmt.Sprintf("198.%d.%d", 18+pid%2, (pid/2)%256)
	hostIP, nsIP := subnet+".1", subnet+".2"
	netnsRun(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	netnsRun(t, "ip", "addr", "add", hostIP+"/30", "dev", hostIf)
	netnsRun(t, "ip", "link", "set", hostIf, "up")
	netnsRun(t, "ip", "netns", "exec", ns, "ip", "addr", "add", nsIP+"/30", "dev", nsIf)
	netnsRun(t, "ip", "netns", "exec", ns, "ip", "link", "set", nsIf, "up")
	netnsRun(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	netnsRun(t, "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", nsIf, "root",
		"tbf", "rate", strconv.Itoa(shapedMbit)+"mbit", "burst", "256kb", "latency", "100ms")
	// Small kernel send buffers in the namespace, as on a busy host: what
	// the NIC cannot take stays in Redis' output buffers.
	_ = exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 65536").Run()

	dir := t.TempDir()
	sock := dir + "/redis.sock"
	r := &testRedis{t: t, port: 6379, dir: dir, ns: ns, args: []string{"--unixsocket", sock, "--unixsocketperm", "700"}}
	r.addr = nsIP + ":6379"
	r.start(nsIP)
	t.Cleanup(r.stop)

	ctx, cancel := context.WithCancel(context.Background())
	admin := redis.NewClient(&redis.Options{Addr: r.addr, Protocol: 2, DisableIdentity: true})
	defer admin.Close()
	if err := admin.Set(ctx, "big", strings.Repeat("v", 5<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	s := testSettings()
	s.timeout = 10 * time.Second
	c := newTestScraper(t, s, collectortest.Config("redis", nil), "unix://"+sock)
	before := collectortest.Scrape(t, c, 15*time.Second)
	if before.Err != nil {
		t.Fatal(before.Err)
	}

	const clients = 50
	var wg sync.WaitGroup
	// Stopping the server ends the clients' reads at once; a cancelled
	// context alone would wait for a 5 MiB reply at 0.75 MB/s.
	defer func() { cancel(); r.stop(); wg.Wait() }()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := redis.NewClient(&redis.Options{Addr: r.addr, Protocol: 2, DisableIdentity: true,
				ClientName: fmt.Sprintf("pod-%d", i%10), PoolSize: 1, ReadTimeout: -1, ContextTimeoutEnabled: true})
			defer cl.Close()
			for ctx.Err() == nil {
				_ = cl.Get(ctx, "big").Err()
			}
		}()
	}
	// Let the link saturate, then measure over two scrapes.
	collectortest.WaitFor(t, 10*time.Second, "the clients to connect", func() error {
		if n := infoField(t, admin, "clients", "connected_clients"); n < clients+2 {
			return fmt.Errorf("%v connected", n)
		}
		return nil
	})
	// Wait for the shaper to be the bottleneck: a backlog in its queue at
	// three readings in a row.
	run := 0
	collectortest.WaitFor(t, 20*time.Second, "the shaped link to saturate", func() error {
		if readTBF(t, ns, nsIf).Backlog > 0 {
			run++
		} else {
			run = 0
		}
		if run < 3 {
			return fmt.Errorf("a backlog at the last %d readings", run)
		}
		return nil
	})
	// Three scrapes about 3 s apart. Each is bracketed by readings of the
	// shaper's byte counter, since the INFO inside it may be answered at
	// any moment of the scrape (seconds on a loaded machine); between
	// scrapes the shaper's backlog is polled.
	type sample struct {
		start, end time.Time
		sent0      uint64 // bytes through the shaper before the scrape
		sent1      uint64 // and after
		res        collectortest.Result
	}
	var samples []sample
	polls, saturated := 0, 0
	for i := range 3 {
		if i > 0 {
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				polls++
				if readTBF(t, ns, nsIf).Backlog > 0 {
					saturated++
				}
			}
		}
		var sm sample
		sm.sent0, sm.start = readTBF(t, ns, nsIf).Bytes, time.Now()
		sm.res = collectortest.Scrape(t, c, 30*time.Second)
		sm.sent1, sm.end = readTBF(t, ns, nsIf).Bytes, time.Now()
		if sm.res.Err != nil {
			t.Fatalf("scrape %d: %v", i, sm.res.Err)
		}
		samples = append(samples, sm)
	}
	// Between two INFO replies, Redis' output counter and the bytes the
	// shaper sent differ by the TCP/IP headers on the wire (about 4 % at
	// a 1448-byte MSS; less with GSO) and by what sits in between: the 50
	// send buffers (tcp_wmem ≤ 64 KiB each) and the shaper's queue
	// (100 ms of the rate + its burst).
	const capBytes = shapedMbit * 1e6 / 8
	const slack = 50*64<<10 + capBytes/10 + 256<<10
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		out := b.res.Must(t, "stall_redis_output_bytes_total") - a.res.Must(t, "stall_redis_output_bytes_total")
		minSent, maxSent := float64(b.sent0)-float64(a.sent1), float64(b.sent1-a.sent0)
		minSecs, maxSecs := b.start.Sub(a.end).Seconds(), b.end.Sub(a.start).Seconds()
		t.Logf("interval %d: Redis wrote %.1f MB, the shaper sent %.1f–%.1f MB in %.1f–%.1f s (%.1f MB/s at most)",
			i, out/1e6, minSent/1e6, maxSent/1e6, minSecs, maxSecs, capBytes/1e6)
		if out < minSent*0.85-slack || out > maxSent*1.02+slack {
			t.Errorf("interval %d: Redis' output counter (%.1f MB) is not what the link delivered (%.1f–%.1f MB)", i, out/1e6, minSent/1e6, maxSent/1e6)
		}
		if out > capBytes*1.05*maxSecs+slack {
			t.Errorf("interval %d: %.1f MB in at most %.1f s is above the %d Mbit/s ceiling", i, out/1e6, maxSecs, shapedMbit)
		}
	}
	// The link was the bottleneck most of the time: the output rate above
	// is the ceiling's, not the clients'.
	t.Logf("shaper backlogged at %d of %d readings", saturated, polls)
	if saturated < polls*8/10 {
		t.Errorf("the shaper had a backlog at only %d of %d readings: the link was not the bottleneck", saturated, polls)
	}
	second := samples[len(samples)-1].res
	memBefore := before.Must(t, "stall_redis_clients_memory_bytes", "type", "normal")
	memAfter := second.Must(t, "stall_redis_clients_memory_bytes", "type", "normal")
	omem := second.Must(t, "stall_redis_client_output_buffer_bytes")
	pending := second.Must(t, "stall_redis_client_pending_output_clients")
	t.Logf("clients memory %.0f → %.0f MB, omem %.0f MB, pending %v", memBefore/1e6, memAfter/1e6, omem/1e6, pending)
	if memAfter < memBefore+50<<20 {
		t.Errorf("clients memory did not grow: %v → %v", memBefore, memAfter)
	}
	if omem < 50<<20 {
		t.Errorf("omem %v: the replies should be queued in output buffers", omem)
	}
	if pending < clients/2 {
		t.Errorf("pending clients %v of %d", pending, clients)
	}
	if v := second.Must(t, "stall_redis_client_output_buffer_by_command_bytes", "cmd", "get"); v < omem*0.9 {
		t.Errorf("cmd=get holds %v of %v", v, omem)
	}
	if v := second.Must(t, "stall_redis_client_list_runs_total"); v < 1 {
		t.Error("auto mode did not run CLIENT LIST on a backlogged instance")
	}
}

// tbfStats are the counters of the root qdisc of a device (tc -s -j).
type tbfStats struct {
	Bytes   uint64 `json:"bytes"`
	Backlog uint64 `json:"backlog"`
}

func readTBF(t *testing.T, ns, dev string) tbfStats {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev", dev).Output()
	if err != nil {
		t.Fatalf("tc -s qdisc: %v", err)
	}
	var qs []tbfStats
	if err := json.Unmarshal(out, &qs); err != nil || len(qs) == 0 {
		t.Fatalf("tc -s -j qdisc: %v: %s", err, out)
	}
	return qs[0]
}
