package tcpqueues

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/tcpqueues/inetdiag"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

// queuedServer is a loopback server on a free port with n established
// connections, each holding queued bytes in its server-side send queue:
// the server writes written bytes to every client, and the clients, whose
// receive buffer is set to its minimum before connecting (a window of a
// few KiB), never read. What the windows do not take stays in the
// server's send queues, as replies that a shaped link or a slow client
// does not take do in Redis'. The clients are a child process (this test
// binary, see TestMain): 10,000 connections have 20,000 ends, more than
// one process may open without CAP_SYS_RESOURCE.
type queuedServer struct {
	port  uint16
	conns []net.Conn // the server's ends, closed at cleanup
}

// clientsEnv makes the test binary the clients of a queuedServer:
// ADDR,N.
const clientsEnv = "STALL_TCPQUEUES_CLIENTS"

func TestMain(m *testing.M) {
	if v := os.Getenv(clientsEnv); v != "" {
		os.Exit(runClients(v))
	}
	os.Exit(m.Run())
}

// runClients connects N clients to ADDR, says "ready" on stdout and holds
// them, never reading, until stdin closes.
func runClients(v string) int {
	addr, ns, _ := strings.Cut(v, ",")
	n, _ := strconv.Atoi(ns)
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1024) })
		return errors.Join(err, serr)
	}}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := dialer.Dial("tcp4", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			return 1
		}
		conns = append(conns, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(conns) // held open until here: a collected conn's fd is closed by its finalizer
	return 0
}

func startQueuedServer(t testing.TB, n, written int) *queuedServer {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &queuedServer{port: uint16(ln.Addr().(*net.TCPAddr).Port)}
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	payload := make([]byte, written)
	accepted := make(chan error, 1)
	go func() {
		for range n {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			mu.Lock()
			s.conns = append(s.conns, c)
			mu.Unlock()
			// Less than the socket's initial send buffer (tcp_wmem's
			// 16 KiB default): the write returns at once.
			if _, err := c.Write(payload); err != nil {
				accepted <- err
				return
			}
		}
		accepted <- nil
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientsEnv+"="+ln.Addr().String()+","+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Closing stdin ends the clients; registered after the listener's
	// cleanup, so it runs first.
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the clients did not connect: %q %v", line, err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
	return s
}

// ssTotals are what ss shows for the established sockets of a local port.
type ssTotals struct {
	sockets, nonEmpty int
	bytes, max        uint64
}

func ssQueues(t testing.TB, port uint16) ssTotals {
	t.Helper()
	out, err := exec.Command("ss", "-tnH", "state", "established", fmt.Sprintf("( sport = :%d )", port)).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	var s ssTotals
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		q, err := strconv.ParseUint(f[1], 10, 64) // Recv-Q Send-Q Local Peer
		if err != nil {
			t.Fatalf("ss line %q: %v", line, err)
		}
		s.sockets++
		if q > 0 {
			s.nonEmpty++
			s.bytes += q
			s.max = max(s.max, q)
		}
	}
	return s
}

// TestTotalsMatchSS: 10,000 established connections to one local port
// with data queued on the server side; the collector's four gauges equal
// ss's sums over the same sockets, read before and after the scrape with
// nothing moving in between (zero windows: the kernel only probes).
func TestTotalsMatchSS(t *testing.T) {
	collectortest.RequireTool(t, "ss")
	const n = 10000
	srv := startQueuedServer(t, n, 8<<10)
	other := startQueuedServer(t, 3, 8<<10) // a second port, summed apart
	q := newQueues(collectortest.Config("tcpqueues", nil), []service{{name: "redis", port: srv.port}, {name: "extra", port: other.port}})
	var res collectortest.Result
	var want ssTotals
	collectortest.WaitFor(t, 30*time.Second, "the queues to settle and the scrape to match ss", func() error {
		before := ssQueues(t, srv.port)
		res = collectortest.Scrape(t, q, 10*time.Second)
		want = ssQueues(t, srv.port)
		if res.Err != nil {
			return res.Err
		}
		if before != want || want.sockets != n {
			return fmt.Errorf("ss %+v, then %+v", before, want)
		}
		return nil
	})
	port := strconv.Itoa(int(srv.port))
	got := ssTotals{
		sockets:  int(res.Must(t, "stall_tcp_established_sockets", "service", "redis", "port", port)),
		nonEmpty: int(res.Must(t, "stall_tcp_send_queue_sockets", "service", "redis", "port", port)),
		bytes:    uint64(res.Must(t, "stall_tcp_send_queue_bytes", "service", "redis", "port", port)),
		max:      uint64(res.Must(t, "stall_tcp_send_queue_max_bytes", "service", "redis", "port", port)),
	}
	t.Logf("ss: %+v; exporter: %+v", want, got)
	if got != want {
		t.Errorf("exporter %+v, ss %+v", got, want)
	}
	// Most of each 8 KiB stays queued behind a window of a few KiB.
	if want.nonEmpty < n*9/10 || want.bytes < n*4<<10 || want.max > 8<<10 {
		t.Errorf("the test's queues are not what it meant to build: %+v", want)
	}
	if v := res.Must(t, "stall_tcp_established_sockets", "service", "extra", "port", strconv.Itoa(int(other.port))); v != 3 {
		t.Errorf("the second port has %v established sockets, want 3", v)
	}
	if len(res.Metrics) != 8 {
		t.Errorf("%d series for two ports, want 8 (never one per connection):\n%s", len(res.Metrics), res.Dump())
	}
}

// TestIdlePortAndNoPorts: a watched port without connections exports
// zeros; a collector without ports reports no data.
func TestIdlePortAndNoPorts(t *testing.T) {
	res := collectortest.Scrape(t, newQueues(collectortest.Config("tcpqueues", nil), []service{{name: "redis", port: 1}}), 5*time.Second)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, name := range []string{"stall_tcp_send_queue_bytes", "stall_tcp_send_queue_max_bytes", "stall_tcp_send_queue_sockets", "stall_tcp_established_sockets"} {
		if v := res.Must(t, name, "service", "redis", "port", "1"); v != 0 {
			t.Errorf("%s = %v on a port nobody uses", name, v)
		}
	}
	res = collectortest.Scrape(t, newQueues(collectortest.Config("tcpqueues", nil), nil), 5*time.Second)
	if !errors.Is(res.Err, collector.ErrNoData) || len(res.Metrics) != 0 {
		t.Errorf("no ports: err %v, %d series; want ErrNoData and none", res.Err, len(res.Metrics))
	}
}

// TestProblemsCounted: what a dump read around counts once per kind.
func TestProblemsCounted(t *testing.T) {
	q := newQueues(collectortest.Config("tcpqueues", nil), nil)
	q.count(inetdiag.Problems{Truncated: 3, UnknownAttrs: 100}, fmt.Errorf("x: %w", netlinkdump.ErrTruncated))
	q.count(inetdiag.Problems{}, nil)
	if n := q.problems.Count(); n != 3 {
		t.Errorf("%d problems counted, want 3 (datagram truncated, messages truncated, unknown attributes)", n)
	}
}

func TestParsePorts(t *testing.T) {
	got, err := parsePorts([]string{"memcached=11211", "rocketmq_namesrv=9876"})
	if err != nil || len(got) != 2 || got[0] != (service{"memcached", 11211}) || got[1] != (service{"rocketmq_namesrv", 9876}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"11211", "=1", "Memcached=1", "a b=1", "x=0", "x=65536", "x=port", strings.Repeat("a", 33) + "=1"} {
		if _, err := parsePorts([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLocalServices(t *testing.T) {
	local, err := localAddrs()
	if err != nil || len(local) == 0 {
		t.Fatalf("this host's addresses: %v %v", local, err)
	}
	var own string // an address of an interface, not loopback
	for _, a := range local {
		if !a.IsLoopback() {
			own = net.JoinHostPort(a.String(), "6380")
			break
		}
	}
	targets := map[string][]string{
		"redis": {"127.0.0.1:6379", "[::1]:6379", "localhost:7000", "192.0.2.10:6390"},
		// TEST-NET-1 is never this host's; 6379 is the redis' already.
		"rocketmq_broker": {"127.0.0.1:10911", "192.0.2.11:10911", "127.0.0.1:6379"},
	}
	if own != "" {
		targets["redis"] = append(targets["redis"], own)
	}
	got, err := localServices(context.Background(), collectortest.Config("tcpqueues", nil).Logger, targets, []service{{"memcached", 11211}, {"other", 10911}})
	if err != nil {
		t.Fatal(err)
	}
	want := []service{{"redis", 6379}, {"redis", 7000}}
	if own != "" {
		want = append(want, service{"redis", 6380})
	}
	want = append(want, service{"rocketmq_broker", 10911}, service{"memcached", 11211})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	var many []service
	for i := range inetdiag.MaxPorts + 1 {
		many = append(many, service{"x", uint16(1000 + i)})
	}
	if _, err := localServices(context.Background(), collectortest.Config("tcpqueues", nil).Logger, nil, many); err == nil {
		t.Errorf("%d ports accepted", len(many))
	}
}

// BenchmarkUpdate is one scrape with 10,000 established connections on
// the watched port (and their 10,000 client ends, which the filter leaves
// out): the cost per scrape in docs/benchmarks.md, with the ports
// filtered in the kernel (what the collector does) and, for comparison,
// every established socket dumped and filtered here (its fallback).
func BenchmarkUpdate(b *testing.B) {
	srv := startQueuedServer(b, 10000, 8<<10)
	for _, bc := range []struct {
		name     string
		noFilter bool
	}{{"filter=kernel", false}, {"filter=go", true}} {
		b.Run(bc.name, func(b *testing.B) {
			q := newQueues(collectortest.Config("tcpqueues", nil), []service{{name: "redis", port: srv.port}})
			q.noFilter = bc.noFilter
			ch := make(chan prometheus.Metric, 16)
			go func() {
				for range ch {
				}
			}()
			defer close(ch)
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Update(context.Background(), ch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIPv6AndIPv4Summed: a port's sockets are summed over both dumps:
// connections to one port on ::1 (IPv6) and on 127.0.0.1 (IPv4).
func TestIPv6AndIPv4Summed(t *testing.T) {
	// One port on both: a free IPv6 port that is free on 127.0.0.1 too
	// (another process may hold it there; a few tries find one).
	var ln6, ln4 net.Listener
	var port int
	for try := 0; ln4 == nil; try++ {
		var err error
		ln6, err = net.Listen("tcp6", "[::1]:0")
		collectortest.Require(t, "IPv6 on loopback (::1)", err)
		port = ln6.Addr().(*net.TCPAddr).Port
		if ln4, err = net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
			ln6.Close()
			if try == 10 {
				t.Fatalf("no port free on both ::1 and 127.0.0.1 in 10 tries: %v", err)
			}
		}
	}
	defer ln6.Close()
	defer ln4.Close()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, ln := range []net.Listener{ln6, ln6, ln4} {
		c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c, s)
	}
	res := collectortest.Scrape(t, newQueues(collectortest.Config("tcpqueues", nil), []service{{name: "redis", port: uint16(port)}}), 5*time.Second)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if v := res.Must(t, "stall_tcp_established_sockets", "service", "redis", "port", strconv.Itoa(port)); v != 3 {
		t.Errorf("%v established sockets on port %d, want 3 (two IPv6, one IPv4)", v, port)
	}
}
