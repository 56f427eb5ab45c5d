package live

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// TestRedisBehindShapedEgress is issue 28's live run, incident 7 on real parts: a redis-server on
// the host side of a veth whose egress (Redis → clients) is shaped with tbf at 100 Mbit/s, a 5 MiB
// key, 50 clients in a network namespace behind the veth pipelining GETs of it (redis-benchmark
// -P 3), arriving in groups of 5 over three minutes. Through the shipped chain (the exporter binary, Prometheus with the shipped rules,
// Alertmanager with the shipped routing): the exporter shows the tbf backlog and its drops, the
// send queues of Redis' port near their sockets' limit, the veth transmitting flat at the shaped
// rate; RedisClientOutputBuffersGrowing pages, and its description names the egress as the cause.
// It takes about 4 minutes; the test's hosts use the benchmarking range 198.18.0.0/15.
func TestRedisBehindShapedEgress(t *testing.T) {
	const (
		shapedMbit = 100
		clients    = 50
		groupSize  = 5
		pipeline   = 3
		keyBytes   = 5 << 20
		// limit: the page came 3m39s after the start on a machine at load average 10. The
		// package's tests run one after the other under make test's -timeout 15m, and
		// TestDirtyPagesApproach, after this one, needs 9 minutes of it.
		limit = 6*time.Minute + 30*time.Second
		alert = "RedisClientOutputBuffersGrowing"
	)
	collectortest.RequireRoot(t, "CAP_NET_ADMIN creates a network namespace, a veth pair and a tbf qdisc")
	collectortest.RequireTool(t, "ip")
	collectortest.RequireTool(t, "tc")
	collectortest.RequireTool(t, "ss")
	redisBin := collectortest.RequireTool(t, "redis-server")
	benchBin := collectortest.RequireTool(t, "redis-benchmark")
	promBin := collectortest.RequireTool(t, "prometheus")
	amBin := alertmanagerBinary(t)
	if dl, ok := t.Deadline(); ok && time.Until(dl) < limit+time.Minute {
		t.Fatalf("the test needs up to %s; -timeout leaves %s", limit+time.Minute, time.Until(dl).Round(time.Second))
	}

	pid := os.Getpid()
	ns := fmt.Sprintf("stallegress%d", pid)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		collectortest.Require(t, "network namespaces (`ip netns add` as root, CAP_SYS_ADMIN; not inside an unprivileged container)",
			fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	hostIf, nsIf := fmt.Sprintf("seh%d", pid%1000000), fmt.Sprintf("sen%d", pid%1000000)
	subnet := fmt.Sprintf("198.%d.%d", 18+pid%2, (pid/2+128)%256) // not netns_test.go's /30 of the same pid
	hostIP, nsIP := subnet+".1", subnet+".2"
	run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	run(t, "ip", "addr", "add", hostIP+"/30", "dev", hostIf)
	run(t, "ip", "link", "set", hostIf, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", nsIP+"/30", "dev", nsIf)
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", nsIf, "up")
	// Redis' side of the veth is the host's interface: its root qdisc shapes what Redis sends. Its
	// queue holds 20 ms of the rate plus the burst, about 0.5 MB (tbf's limit = rate × latency +
	// burst): less than what TCP small queues let 50 senders put in the qdisc (two GSO packets each,
	// 0.8 MB in the runs with a 100 ms queue, which then dropped 0 to 10,000 packets), so it drops
	// at every run, as a cloud's shaper does, and still never runs empty.
	run(t, "tc", "qdisc", "add", "dev", hostIf, "root", "tbf", "rate", strconv.Itoa(shapedMbit)+"mbit", "burst", "256kb", "latency", "20ms")

	dir := t.TempDir()
	ln, err := net.Listen("tcp", hostIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	redisAddr := net.JoinHostPort(hostIP, port)
	e2etest.Run(t, "redis-server", exec.Command(redisBin, "--port", port, "--bind", hostIP, "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--loglevel", "warning"))
	collectortest.WaitFor(t, 10*time.Second, "redis-server", func() error { return setKey(redisAddr, "big", keyBytes) })

	// The exporter watches the veth only (the host's other interfaces are not this test's) and the
	// Redis target, whose port it finds local: the tcpqueues collector sums its send queues.
	c := startChain(t, promBin, amBin, dir, "--redis.addr=redis://"+redisAddr, "--egress.device-include="+regexp.QuoteMeta(hostIf))
	began := time.Now()

	// The readers arrive over three minutes, a group of 5 every 20 s, as pods scaling out: each
	// group adds its replies to Redis' output buffers, so clients' memory grows (a single group of
	// 50 fills them in seconds and then holds flat, which is no growth to page on).
	stop := make(chan struct{})
	var mu sync.Mutex
	var benches []*exec.Cmd
	t.Cleanup(func() {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		for _, b := range benches {
			_ = b.Process.Kill()
			_ = b.Wait()
		}
	})
	go func() {
		for i := 0; i < clients/groupSize; i++ {
			b := exec.Command("ip", "netns", "exec", ns, benchBin, "-h", hostIP, "-p", port, "-c", strconv.Itoa(groupSize),
				"-P", strconv.Itoa(pipeline), "-n", "100000000", "-q", "GET", "big")
			mu.Lock()
			if err := b.Start(); err == nil {
				benches = append(benches, b)
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Second):
			}
		}
	}()

	// The page, with its cause.
	var desc string
	collectortest.WaitFor(t, limit, alert+" to page with the cause", func() error {
		if _, ok := c.hook.first(alert); !ok {
			s, _ := c.value(`sum(stall_redis_clients_memory_bytes{type="normal"})`)
			return fmt.Errorf("not notified after %s (clients memory %.0f MiB; notified: %v)", time.Since(began).Round(time.Second), s/(1<<20), c.hook.names())
		}
		var d struct {
			Alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				State       string            `json:"state"`
			} `json:"alerts"`
		}
		if err := c.prom.API("/api/v1/alerts", url.Values{}, &d); err != nil {
			return err
		}
		for _, a := range d.Alerts {
			if a.Labels["alertname"] == alert && a.State == "firing" {
				desc = a.Annotations["description"]
				return nil
			}
		}
		return fmt.Errorf("notified, but not firing in Prometheus")
	})
	t.Logf("%s paged %s after the clients started: %s", alert, time.Since(began).Round(time.Second), desc)
	if n, _ := c.hook.first(alert); n.receiver == "" {
		t.Errorf("%s notified no receiver", alert)
	}
	if !strings.Contains(desc, "Cause: the host's egress is at its limit (") || !strings.Contains(desc, " on "+hostIf) {
		t.Errorf("the page does not name the shaped veth as the cause: %q", desc)
	}

	// What the exporter shows now, next to what the kernel says.
	m := parseExposition(t, e2etest.Scrape(t, c.exporter))
	backlog := m.get(t, "stall_qdisc_backlog_bytes", "device", hostIf, "kind", "tbf")
	qlen := m.get(t, "stall_qdisc_backlog_packets", "device", hostIf, "kind", "tbf")
	dropped := m.get(t, "stall_qdisc_dropped_total", "device", hostIf, "kind", "tbf")
	t.Logf("tbf: backlog %.0f bytes in %.0f packets, %.0f dropped", backlog, qlen, dropped)
	if backlog <= 0 || qlen <= 0 {
		t.Errorf("the tbf qdisc had no backlog: %.0f bytes, %.0f packets", backlog, qlen)
	}
	if dropped <= 0 {
		t.Errorf("the tbf qdisc dropped nothing")
	}
	// Transmit flat at the shaped rate over the last two minutes: every one-minute rate within
	// 85-102 % of it (tbf counts the frames tx_bytes counts).
	rates, err := c.series(fmt.Sprintf(`rate(stall_network_transmit_bytes_total{device=%q}[1m])[2m:15s]`, hostIf))
	if err != nil || len(rates) != 1 {
		t.Fatalf("transmit rate: %v %v", rates, err)
	}
	const capBytes = shapedMbit * 1e6 / 8
	lo, hi := math.Inf(1), 0.0
	for _, s := range rates[0].Samples {
		lo, hi = min(lo, s[1]), max(hi, s[1])
	}
	t.Logf("transmit over the last 2 minutes: %.2f-%.2f MB/s (shaped at %.2f MB/s)", lo/1e6, hi/1e6, capBytes/1e6)
	if lo < 0.85*capBytes || hi > 1.02*capBytes {
		t.Errorf("transmit %.2f-%.2f MB/s is not flat at the shaped %.2f MB/s", lo/1e6, hi/1e6, capBytes/1e6)
	}
	// The send queues of Redis' port: most clients' sockets full, their queues together near the
	// send buffers the kernel gave them (ss -m's tb, summed over the port's sockets). Redis writes to
	// a socket again once its queue is down to two thirds of the buffer (sk_stream_is_writeable:
	// free space at least half of what is queued), so a socket behind a full wire holds two thirds
	// to all of its buffer; the queue counts payload and the buffer the memory of its packets, a few
	// per cent more with 64 KiB GSO packets. Half of the sum is the bound. One socket against the
	// largest buffer is not: the kernel autotunes each buffer, and the socket with the largest one
	// is not always the fullest at the moment of the scrape (a run had 1.35 MiB against 3.8 MiB).
	waiting := m.get(t, "stall_tcp_send_queue_sockets", "service", "redis", "port", port)
	established := m.get(t, "stall_tcp_established_sockets", "service", "redis", "port", port)
	maxQueue := m.get(t, "stall_tcp_send_queue_max_bytes", "service", "redis", "port", port)
	sumQueue := m.get(t, "stall_tcp_send_queue_bytes", "service", "redis", "port", port)
	sumBuf, maxBuf := sendBuffers(t, port)
	t.Logf("port %s: %.0f of %.0f established sockets waiting, %.1f MiB queued in send buffers of %.1f MiB, the largest queue %.0f KiB (largest send buffer %.0f KiB)",
		port, waiting, established, sumQueue/(1<<20), float64(sumBuf)/(1<<20), maxQueue/1024, float64(maxBuf)/1024)
	if established < clients || waiting < 0.8*clients {
		t.Errorf("%.0f of %.0f sockets of port %s waiting; want most of the %d clients'", waiting, established, port, clients)
	}
	if sumBuf == 0 || sumQueue < 0.5*float64(sumBuf) {
		t.Errorf("the send queues (%.0f bytes) are not near their send buffers (%d bytes)", sumQueue, sumBuf)
	}
}

// run runs a command, failing the test with its output.
func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// setKey stores a value of n bytes under key (RESP over a plain connection: the tools module has
// no Redis client).
func setKey(addr, key string, n int) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, n)
	if _, err := w.WriteString(strings.Repeat("v", n) + "\r\n"); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+OK\r\n" {
		return fmt.Errorf("SET: %q", line)
	}
	return nil
}

// sendBuffers sums and maxes the send buffers (ss -m's tb, sk_sndbuf) of the established
// sockets of local port port.
func sendBuffers(t *testing.T, port string) (sum, largest int) {
	t.Helper()
	out, err := exec.Command("ss", "-tmnH", "state", "established", "( sport = :"+port+" )").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	for _, m := range regexp.MustCompile(`,tb(\d+),`).FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.Atoi(m[1])
		sum += v
		largest = max(largest, v)
	}
	return sum, largest
}

// exposition is a scrape's samples by name and labels.
type exposition map[string][]sample

type sample struct {
	labels map[string]string
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	m := exposition{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		g := sampleLine.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		v, err := strconv.ParseFloat(g[3], 64)
		if err != nil {
			continue
		}
		s := sample{labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(g[2], -1) {
			s.labels[p[1]] = p[2]
		}
		m[g[1]] = append(m[g[1]], s)
	}
	return m
}

// get is the value of the series of name with the given label pairs, failing the test without one.
func (m exposition) get(t *testing.T, name string, pairs ...string) float64 {
	t.Helper()
	for _, s := range m[name] {
		ok := true
		for i := 0; i+1 < len(pairs); i += 2 {
			ok = ok && s.labels[pairs[i]] == pairs[i+1]
		}
		if ok {
			return s.value
		}
	}
	t.Fatalf("no series %s%v in the scrape: %v", name, pairs, m[name])
	return 0
}
