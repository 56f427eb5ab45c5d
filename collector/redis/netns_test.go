package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
// namespace behind a veth whose egress (Redis → clients) is shaped to
// 300 Mbit/s with tbf; 50 clients GET a 5 MiB key in a loop. The NIC is
// the bottleneck, so replies wait in Redis' client output buffers: clients
// memory and omem grow while the output byte rate stays at the cap. The
// test's hosts use the benchmarking range 198.18.0.0/15; it takes a few
// seconds.
func TestIncidentNetns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the network-namespace incident test")
	}
	redisServerPath(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN) to create a network namespace, a veth pair and a tbf qdisc")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (iproute2): cannot build the namespace", tool)
		}
	}
	pid := os.Getpid()
	ns := fmt.Sprintf("stallredis%d", pid)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here (%v: %s)", err, strings.TrimSpace(string(out)))
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
		"tbf", "rate", "300mbit", "burst", "256kb", "latency", "100ms")
	// Small kernel send buffers in the namespace, as on a busy host: what
	// the NIC cannot take stays in Redis' output buffers.
	_ = exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 262144").Run()

	r := &testRedis{t: t, port: 6379, dir: t.TempDir(), ns: ns}
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
	s.timeout = 5 * time.Second
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	before := collectortest.Scrape(t, c, 6*time.Second)
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _ := admin.Info(ctx, "clients").Result()
		if strings.Contains(n, fmt.Sprintf("connected_clients:%d", clients+2)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the backlog builds at the link rate; a real-time wait is the point here
	t0 := time.Now()
	first := collectortest.Scrape(t, c, 6*time.Second)
	time.Sleep(2 * time.Second)
	t1 := time.Now()
	second := collectortest.Scrape(t, c, 6*time.Second)
	if first.Err != nil || second.Err != nil {
		t.Fatalf("scrapes: %v / %v", first.Err, second.Err)
	}
	rate := (second.Must(t, "stall_redis_output_bytes_total") - first.Must(t, "stall_redis_output_bytes_total")) / t1.Sub(t0).Seconds()
	const capBytes = 300e6 / 8
	t.Logf("output %.1f MB/s (cap %.1f MB/s)", rate/1e6, capBytes/1e6)
	if rate > capBytes*1.05 || rate < capBytes*0.6 {
		t.Errorf("output rate %.1f MB/s, want the 300 Mbit/s cap (%.1f MB/s)", rate/1e6, capBytes/1e6)
	}
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
