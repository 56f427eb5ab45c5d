package dns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector/dns/dnstest"
	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The tests in this file use real packets in network namespaces and, for
// attribution, the real eBPF hooks; they need root (CAP_SYS_ADMIN and
// CAP_NET_ADMIN), which CI has; without it they fail in CI and skip
// elsewhere, saying so.

const childEnv = "STALL_DNS_TEST_CHILD"

// shortNamesMode is childEnv's value for the child of
// TestEgressCountsShortQuestionNames.
const shortNamesMode = "short-names"

// TestMain turns the test binary into the Go-resolver child process of
// TestDNSNetns when childEnv is "1", into the sender of
// TestEgressCountsShortQuestionNames when it is shortNamesMode.
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "1":
		os.Exit(goResolverChild())
	case shortNamesMode:
		os.Exit(shortNamesChild())
	}
	os.Exit(m.Run())
}

// goResolverChild, started as "java" with a JVM's argv, looks up with Go's own resolver (PreferGo: UDP, and TCP
// after a truncated answer), as a Go service would: ok.test A+AAAA
// (NOERROR), nx.test A+AAAA (NXDOMAIN), big.test TXT (truncated over UDP,
// then over TCP).
func goResolverChild() int {
	r := &net.Resolver{PreferGo: true}
	ctx := context.Background()
	if _, err := r.LookupIPAddr(ctx, "ok.test."); err != nil {
		fmt.Fprintln(os.Stderr, "ok.test:", err)
		return 1
	}
	if _, err := r.LookupIPAddr(ctx, "nx.test."); err == nil {
		fmt.Fprintln(os.Stderr, "nx.test resolved")
		return 1
	}
	if txt, err := r.LookupTXT(ctx, "big.test."); err != nil || len(txt) == 0 {
		fmt.Fprintln(os.Stderr, "big.test:", txt, err)
		return 1
	}
	// Stay alive until the test has read the counts, as a JVM would: the
	// main label is read from a process still running.
	fmt.Println("done")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func needRoot(t *testing.T) {
	t.Helper()
	collectortest.RequireRoot(t, "network namespaces, AF_PACKET and eBPF")
	collectortest.RequireTool(t, "ip")
	collectortest.RequireTool(t, "getent")
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// addNetns creates a network namespace removed at cleanup.
func addNetns(t *testing.T, name string) {
	t.Helper()
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// inNetns runs fn on a thread moved into the named network namespace;
// sockets it creates stay there. The thread is never returned to the Go
// scheduler (the goroutine exits locked), so no other goroutine runs in
// the namespace.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/var/run/netns", name))
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		if err == nil {
			fn()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("entering network namespace %s: %v", name, err)
	}
}

// startResolver serves dnstest's answers on port 53 of addrs, inside the
// named namespace, until the test ends.
func startResolver(t *testing.T, ns string, addrs ...string) {
	var srv []*dnstest.Server
	inNetns(t, ns, func() {
		for _, a := range addrs {
			s, err := dnstest.Listen(net.JoinHostPort(a, "53"))
			if err != nil {
				t.Errorf("resolver: %v", err)
				return
			}
			srv = append(srv, s)
		}
	})
	t.Cleanup(func() {
		for _, s := range srv {
			s.Close()
		}
	})
	if t.Failed() {
		t.FailNow()
	}
}

// startCollector runs a collector capturing in netns ns, with the command
// line args, until the test ends.
func startCollector(t *testing.T, ns string, args ...string) *Collector {
	t.Helper()
	return startCollectorWith(t, ns, testOptions(t, args...))
}

func startCollectorWith(t *testing.T, ns string, o options) *Collector {
	t.Helper()
	o.open = func() (packetSource, error) {
		var s packetSource
		var err error
		inNetns(t, ns, func() { s, err = openCapture(o.iface, o.socketBuffer) })
		return s, err
	}
	c := newCollector(o, testConfig(t, nil))
	runCollector(t, c)
	waitUp(t, c, true)
	return c
}

// waitUp waits until the capture is open (up) or closed.
func waitUp(t *testing.T, c *Collector, up bool) {
	t.Helper()
	collectortest.WaitFor(t, 30*time.Second, fmt.Sprintf("stall_dns_capture_up %v", up), func() error {
		if c.up.Load() != up {
			return fmt.Errorf("capture up %v", c.up.Load())
		}
		return nil
	})
}

// clientServerNetns builds two namespaces joined by a veth pair: the
// client at 10.53.0.1 / fd53::1, the resolver at 10.53.0.2 / fd53::2,
// and the client's resolv.conf (used by `ip netns exec`) pointing at it
// with one attempt and resolverTimeout seconds to wait for it (generous, for a
// loaded CI machine).
func clientServerNetns(t *testing.T, tag string, resolverTimeout int) (client, server string) {
	pid := os.Getpid()
	client, server = fmt.Sprintf("stdns%sc%d", tag, pid), fmt.Sprintf("stdns%ss%d", tag, pid)
	addNetns(t, client)
	addNetns(t, server)
	cif, sif := fmt.Sprintf("sd%sc%d", tag, pid%100000), fmt.Sprintf("sd%ss%d", tag, pid%100000)
	run(t, "ip", "-n", client, "link", "add", cif, "type", "veth", "peer", "name", sif, "netns", server)
	run(t, "ip", "-n", client, "addr", "add", "10.53.0.1/24", "dev", cif)
	run(t, "ip", "-n", server, "addr", "add", "10.53.0.2/24", "dev", sif)
	run(t, "ip", "-n", client, "addr", "add", "fd53::1/64", "dev", cif, "nodad")
	run(t, "ip", "-n", server, "addr", "add", "fd53::2/64", "dev", sif, "nodad")
	run(t, "ip", "-n", client, "link", "set", cif, "up")
	run(t, "ip", "-n", server, "link", "set", sif, "up")
	dir := filepath.Join("/etc/netns", client)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"),
		fmt.Appendf(nil, "nameserver 10.53.0.2\noptions timeout:%d attempts:1\n", resolverTimeout), 0o644); err != nil {
		t.Fatal(err)
	}
	startResolver(t, server, "10.53.0.2", "fd53::2")
	return client, server
}

// getentCopy copies getent to a name of its own (at most 15 bytes, the
// kernel's comm length), so the test can count this process's children
// exactly even when other tests on the machine run getent.
func getentCopy(t *testing.T) string {
	t.Helper()
	src, err := exec.LookPath("getent")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), fmt.Sprintf("getent%d", os.Getpid()%100000000))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// testCgroup creates the cgroup v2 directory rel under the host's cgroup2
// mount, removed at cleanup, and returns it opened: a child started with
// inCgroup(cmd, f) begins its life there (clone3's CLONE_INTO_CGROUP), so
// its first lookup is already made from it.
func testCgroup(t *testing.T, rel string) *os.File {
	t.Helper()
	root, _, err := proclabel.FindCgroup2Root("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		// Innermost first; a directory still holding a process stays.
		for d := dir; d != root && strings.HasPrefix(d, root); d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	return f
}

// inCgroup makes cmd start in the cgroup cg (nil: the test's own).
func inCgroup(cmd *exec.Cmd, cg *os.File) *exec.Cmd {
	if cg != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	}
	return cmd
}

// getent runs `<getent> hosts <addr>` in the namespace (glibc's
// gethostbyaddr, the JDK's path), started in cgroup cg, and returns its
// output.
func getent(ns, bin, addr string, cg *os.File) string {
	out, _ := inCgroup(exec.Command("ip", "netns", "exec", ns, bin, "hosts", addr), cg).Output()
	return strings.TrimSpace(string(out))
}

// runGetents runs getent for every address concurrently, in cgroup cg,
// and returns the outputs in order.
func runGetents(ns, bin string, addrs []string, cg *os.File) []string {
	out := make([]string, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = getent(ns, bin, a, cg) }()
	}
	wg.Wait()
	return out
}

// TestDNSNetns is the end-to-end test: a Go resolver in one
// namespace, clients in another (glibc via getent, and Go's resolver in a
// child process), the capture in the client's namespace, eBPF attribution
// on the host's cgroup v2 root. It asserts exact query, response, timeout
// and truncation counts, plausible latencies, and per-process attribution
// by name and cgroup: the getent children start in a cgroup named like a
// systemd unit, the Go child in a nested cgroup of no known kind.
func TestDNSNetns(t *testing.T) {
	needRoot(t)
	client, _ := clientServerNetns(t, "e", 3)
	c := startCollector(t, client, "--dns.attribution=ebpf", "--dns.timeout=2s")
	if got := gather(t, c)[`stall_dns_attribution_mode{mode="ebpf"}`]; got != 1 {
		t.Fatalf("attribution mode ebpf = %v: eBPF attribution failed to attach on this host (see the log); it is required here", got)
	}

	var addrs []string
	for i := 1; i <= 10; i++ {
		addrs = append(addrs, fmt.Sprintf("192.0.2.%d", i))
	}
	for i := 1; i <= 5; i++ {
		addrs = append(addrs, fmt.Sprintf("203.0.113.%d", i))
	}
	addrs = append(addrs, "198.51.100.1", "198.51.100.2")
	pid := os.Getpid()
	unit := fmt.Sprintf("stall-dns-%d.scope", pid)
	plain := fmt.Sprintf("/stdns%d/child", pid)
	getentCg, childCg := testCgroup(t, unit), testCgroup(t, plain)
	bin := getentCopy(t)
	comm := filepath.Base(bin)
	outs := runGetents(client, bin, addrs, getentCg)
	for i := range 10 {
		if !strings.Contains(outs[i], "host.test") {
			t.Fatalf("getent hosts %s = %q, want host.test: the test resolver is not answering", addrs[i], outs[i])
		}
	}
	// The Go child runs as a JVM would look in /proc: comm java, the
	// launcher's options, a main class.
	java := filepath.Join(t.TempDir(), "java")
	if err := os.Link(os.Args[0], java); err != nil {
		t.Fatal(err)
	}
	child := inCgroup(exec.Command("ip", "netns", "exec", client, java, "-Xmx64m", "-cp", "lib/*", "com.example.PtrConsumer"), childCg)
	child.Env = append(os.Environ(), childEnv+"=1")
	childIn, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var childErr strings.Builder
	child.Stderr = &childErr
	childOut, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { childIn.Close(); _ = child.Wait() })
	if line, _ := bufio.NewReader(childOut).ReadString('\n'); line != "done\n" {
		childIn.Close()
		t.Fatalf("Go resolver child: %q, %v\n%s", line, child.Wait(), childErr.String())
	}

	want := map[string]float64{
		`stall_dns_queries_total{qtype="PTR",resolver="10.53.0.2"}`:  17,
		`stall_dns_queries_total{qtype="A",resolver="10.53.0.2"}`:    2,
		`stall_dns_queries_total{qtype="AAAA",resolver="10.53.0.2"}`: 2,
		`stall_dns_queries_total{qtype="TXT",resolver="10.53.0.2"}`:  2, // UDP, then TCP
		`stall_dns_responses_total{qtype="PTR",rcode="NOERROR"}`:     10,
		`stall_dns_responses_total{qtype="PTR",rcode="NXDOMAIN"}`:    5,
		`stall_dns_responses_total{qtype="A",rcode="NOERROR"}`:       1,
		`stall_dns_responses_total{qtype="A",rcode="NXDOMAIN"}`:      1,
		`stall_dns_responses_total{qtype="AAAA",rcode="NOERROR"}`:    1,
		`stall_dns_responses_total{qtype="AAAA",rcode="NXDOMAIN"}`:   1,
		`stall_dns_responses_total{qtype="TXT",rcode="NOERROR"}`:     2,
		`stall_dns_truncated_responses_total{qtype="TXT"}`:           1,
		`stall_dns_timeouts_total{qtype="PTR"}`:                      2,
		"stall_dns_reverse_queries_total":                            17,
		`stall_dns_lookup_duration_seconds_count{qtype="PTR"}`:       15,
		`stall_dns_lookup_duration_seconds_count{qtype="A"}`:         2,
		`stall_dns_lookup_duration_seconds_count{qtype="AAAA"}`:      2,
		`stall_dns_lookup_duration_seconds_count{qtype="TXT"}`:       2,
		"stall_dns_pending_queries":                                  0,
		"stall_dns_unmatched_responses_total":                        0,
		"stall_dns_late_responses_total":                             0,
		`stall_dns_retransmits_total{qtype="PTR"}`:                   0,
		"stall_dns_capture_drops_total":                              0,
		"stall_collector_parse_errors_total":                         0,
	}
	var got map[string]float64
	collectortest.WaitFor(t, 10*time.Second, "the lookups' counts", func() error {
		got = gather(t, c)
		got["stall_collector_parse_errors_total"] = float64(c.cfg.Problems.Count())
		var diff []string
		for k, v := range want {
			if got[k] != v {
				diff = append(diff, fmt.Sprintf("%s = %v, want %v", k, got[k], v))
			}
		}
		sort.Strings(diff)
		if len(diff) > 0 {
			return errors.New(strings.Join(diff, "\n"))
		}
		return nil
	})
	// Latency: a veth round trip through a Go server takes well under a
	// millisecond on an idle machine, and up to a few hundred on a loaded
	// CI machine; a mean outside (0, 1 s) means clocks or matching are wrong.
	for _, q := range []string{"PTR", "A", "AAAA", "TXT"} {
		n, sum := got[`stall_dns_lookup_duration_seconds_count{qtype="+q+"}`], got[`stall_dns_lookup_duration_seconds_sum{qtype="+q+"}`]
		if avg := sum / n; avg <= 0 || avg >= 1 {
			t.Errorf("mean %s lookup %v s, want (0, 1)", q, avg)
		}
	}
	// Attribution: every getent connect()s once per lookup; the copy's
	// name and both cgroups are this test's own, so the counts are exact.
	// Go's resolver connects at least once per query (6).
	geKey := fmt.Sprintf(`stall_dns_process_lookups_total{cgroup=%q,comm=%q,main=""}`, unit, comm)
	gcKey := fmt.Sprintf(`stall_dns_process_lookups_total{cgroup=%q,comm="java",main="PtrConsumer"}`, plain)
	ge, gc := got[geKey], got[gcKey]
	var geAll float64
	for k, v := range got {
		if strings.HasPrefix(k, "stall_dns_process_lookups_total{") && strings.Contains(k, fmt.Sprintf(`,comm=%q,`, comm)) {
			geAll += v
		}
	}
	t.Logf("attributed: %s in %s %v of 17 (%v in any cgroup), java PtrConsumer in %s %v of 6", comm, unit, ge, geAll, plain, gc)
	if ge < 0.9*17 || geAll > 17 {
		t.Errorf("getent (%s) lookups attributed to cgroup %s: %v, want at least 90%% of 17; in any cgroup %v, want at most 17", comm, unit, ge, geAll)
	}
	if gc < 0.9*6 {
		t.Errorf("Go child (java PtrConsumer) lookups attributed to cgroup %s: %v, want at least 90%% of 6", plain, gc)
	}
	// Query types per process, from the egress program: every UDP query
	// the children sent (the Go child's TCP query is not joined).
	for k, v := range map[string]float64{
		fmt.Sprintf(`stall_dns_process_queries_total{cgroup=%q,comm=%q,main="",qtype="PTR"}`, unit, comm):            17,
		fmt.Sprintf(`stall_dns_process_queries_total{cgroup=%q,comm="java",main="PtrConsumer",qtype="A"}`, plain):    2,
		fmt.Sprintf(`stall_dns_process_queries_total{cgroup=%q,comm="java",main="PtrConsumer",qtype="AAAA"}`, plain): 2,
		fmt.Sprintf(`stall_dns_process_queries_total{cgroup=%q,comm="java",main="PtrConsumer",qtype="TXT"}`, plain):  1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestDNSProcFallback runs the /proc sampling mode against lookups that
// hold their socket for the resolver timeout (5 s, the silent PTR ones; long
// enough for a sample to complete on a loaded machine):
// each is seen, and counted once, under getent and the cgroup it ran in.
func TestDNSProcFallback(t *testing.T) {
	needRoot(t)
	client, _ := clientServerNetns(t, "p", 5)
	// The sampler reads /proc/<pid>/net/*: a process in the client
	// namespace shows its sockets.
	holder := exec.Command("ip", "netns", "exec", client, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	collectortest.WaitFor(t, 10*time.Second, "sleep to enter the namespace", func() error {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", holder.Process.Pid))
		if comm := strings.TrimSpace(string(b)); comm != "sleep" {
			return fmt.Errorf("comm %q", comm)
		}
		return nil
	})
	netFS, err := procfs.NewFS(fmt.Sprintf("/proc/%d", holder.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, "--dns.attribution=proc", "--dns.proc-interval=50ms")
	o.netFS = &netFS
	c := startCollectorWith(t, client, o)
	if got := gather(t, c)[`stall_dns_attribution_mode{mode="proc"}`]; got != 1 {
		t.Fatalf("attribution mode proc = %v, want 1", got)
	}
	bin := getentCopy(t)
	unit := fmt.Sprintf("stall-dns-proc-%d.service", os.Getpid())
	key := fmt.Sprintf(`stall_dns_process_lookups_total{cgroup=%q,comm=%q,main=""}`, unit, filepath.Base(bin))
	runGetents(client, bin, []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"}, testCgroup(t, fmt.Sprintf("stdns%d.slice/%s", os.Getpid(), unit)))
	collectortest.WaitFor(t, 10*time.Second, "three sampled lookups", func() error {
		if n := gather(t, c)[key]; n < 3 {
			return fmt.Errorf("%s %v", key, n)
		}
		return nil
	})
	// The getents have exited, so one more sample is the last that could
	// count their sockets.
	c.attrMu.Lock()
	c.drainLocked()
	c.attrMu.Unlock()
	if got := gather(t, c)[key]; got != 3 {
		t.Errorf("getent lookups %v, want exactly 3 (each socket counted once)", got)
	}
}

// TestCaptureIgnoresOtherTraffic pushes a lot of non-DNS traffic over
// loopback (TCP bulk, UDP to other ports, IPv4 and IPv6, fragments of a
// large non-DNS datagram) in a namespace whose lo has a 1500-byte MTU, and
// asserts that not one packet passed the kernel filter or reached the
// parser; then one fragmented DNS query each over IPv4 and IPv6 arrive as
// exactly one packet (its first fragment) each, counted once though
// loopback shows every packet twice. A last query, sent after everything
// else, marks the end: once it is counted, so is all that came before.
func TestCaptureIgnoresOtherTraffic(t *testing.T) {
	needRoot(t)
	ns := fmt.Sprintf("stdnsq%d", os.Getpid())
	addNetns(t, ns)
	run(t, "ip", "-n", ns, "link", "set", "lo", "mtu", "1500")
	c := startCollector(t, ns, "--dns.attribution=none")

	var sent int
	inNetns(t, ns, func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Error(err)
			return
		}
		defer l.Close()
		go func() {
			s, err := l.Accept()
			if err != nil {
				return
			}
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				if _, err := s.Read(buf); err != nil {
					return
				}
			}
		}()
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Error(err)
			return
		}
		chunk := make([]byte, 64<<10)
		for range 160 { // 10 MiB in ~7,000 segments plus their ACKs
			if _, err := conn.Write(chunk); err != nil {
				t.Error(err)
				return
			}
		}
		conn.Close()
		for _, dst := range []string{"127.0.0.1:5353", "[::1]:9999", "127.0.0.1:54", "[::1]:52"} {
			u, err := net.Dial("udp", dst)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 2000 {
				_, _ = u.Write(chunk[:100+i%900])
				sent++
			}
			_, _ = u.Write(chunk[:4000]) // fragmented, not DNS
			u.Close()
		}
	})
	if t.Failed() {
		return
	}
	q := query(t, 99, "big.test.", dnsmessage.TypeA)
	big := append(append([]byte(nil), q...), make([]byte, 3000)...) // trailing bytes: fragmented
	inNetns(t, ns, func() {
		for _, m := range []struct {
			dst string
			msg []byte
		}{{"127.0.0.1:53", big}, {"[::1]:53", big}, {"127.0.0.1:53", query(t, 100, "end.test.", dnsmessage.TypeTXT)}} {
			u, err := net.Dial("udp", m.dst)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := u.Write(m.msg); err != nil {
				t.Error(err)
			}
			u.Close()
		}
	})
	end := `stall_dns_queries_total{qtype="TXT",resolver="127.0.0.1"}`
	var got map[string]float64
	collectortest.WaitFor(t, 10*time.Second, "the last query", func() error {
		if got = gather(t, c); got[end] != 1 {
			return fmt.Errorf("%s %v", end, got[end])
		}
		return nil
	})
	if passed, _ := c.captureStats(); passed != 3 {
		t.Errorf("after %d non-DNS datagrams and 10 MiB of TCP: %d packets passed the kernel filter; want 3, the DNS queries", sent, passed)
	}
	if n := c.tr.packets.Load(); n != 3 {
		t.Errorf("%d packets reached the parser, want 3 (the first fragment of each query, once, and the last query)", n)
	}
	if n := got[`stall_dns_queries_total{qtype="A",resolver="127.0.0.1"}`] + got[`stall_dns_queries_total{qtype="A",resolver="::1"}`]; n != 2 {
		t.Errorf("A queries %v, want 2 (%v)", n, got)
	}
	if n := c.cfg.Problems.Count(); n != 0 {
		t.Errorf("%d parse problems, want 0", n)
	}
}

// TestCaptureInterfaceGoesAway captures on one interface, deletes it and
// brings it back: the capture reports down, then reopens by itself.
func TestCaptureInterfaceGoesAway(t *testing.T) {
	needRoot(t)
	ns := fmt.Sprintf("stdnsi%d", os.Getpid())
	addNetns(t, ns)
	link := func(args ...string) { run(t, append([]string{"ip", "-n", ns, "link"}, args...)...) }
	link("add", "dnsa", "type", "veth", "peer", "name", "dnsb")
	link("set", "dnsa", "up")
	c := startCollector(t, ns, "--dns.attribution=none", "--dns.interface=dnsa")
	link("del", "dnsa")
	waitUp(t, c, false)
	link("add", "dnsa", "type", "veth", "peer", "name", "dnsb")
	link("set", "dnsa", "up")
	waitUp(t, c, true)
	if got := gather(t, c)["stall_dns_capture_up"]; got != 1 {
		t.Errorf("stall_dns_capture_up = %v, want 1", got)
	}
}

// noCgroup2Env, set to "<client netns>", makes TestAttributionWithoutCgroup2Mount
// the child it starts in a mount namespace of its own.
const noCgroup2Env = "STALL_DNS_TEST_NO_CGROUP2"

// TestAttributionWithoutCgroup2Mount guards exact attribution on a host
// where nothing mounts the cgroup v2 hierarchy (systemd's legacy mode, a
// cgroup v1-only host), where the /proc sampler saw 0 of 40 short lookups:
// the test runs itself again in a mount namespace of its own, unmounts
// every cgroup2 mount there, and in it the collector (auto mode) must
// attach its eBPF programs to the hierarchy opened privately, leave no
// mount behind, and attribute 40 of 40 answered `getent hosts` lookups.
func TestAttributionWithoutCgroup2Mount(t *testing.T) {
	if ns := os.Getenv(noCgroup2Env); ns != "" {
		noCgroup2Child(t, ns)
		return
	}
	needRoot(t)
	client, _ := clientServerNetns(t, "m", 3)
	child := exec.Command(os.Args[0], "-test.run=^TestAttributionWithoutCgroup2Mount$", "-test.v")
	child.Env = append(os.Environ(), noCgroup2Env+"="+client)
	child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // and / made private, by the Go runtime
	out, err := child.CombinedOutput()
	t.Logf("child in its own mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
}

func noCgroup2Child(t *testing.T, client string) {
	mounts := func() []string {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		var mps []string
		for _, l := range strings.Split(string(b), "\n") {
			if pre, post, ok := strings.Cut(l, " - "); ok && strings.HasPrefix(post, "cgroup2 ") {
				mps = append(mps, strings.Fields(pre)[4])
			}
		}
		return mps
	}
	for _, mp := range mounts() {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			t.Fatalf("unmounting %s: %v", mp, err)
		}
	}
	if mps := mounts(); len(mps) > 0 {
		t.Fatalf("cgroup2 still mounted at %v", mps)
	}
	c := startCollector(t, client, "--dns.attribution=auto")
	if got := gather(t, c)[`stall_dns_attribution_mode{mode="ebpf"}`]; got != 1 {
		t.Fatalf("attribution mode ebpf = %v without a cgroup2 mount, want 1", got)
	}
	if mps := mounts(); len(mps) > 0 {
		t.Errorf("the collector left cgroup2 mounted at %v", mps)
	}
	var addrs []string
	for i := 1; i <= 40; i++ {
		addrs = append(addrs, fmt.Sprintf("192.0.2.%d", i))
	}
	bin := getentCopy(t)
	for i, out := range runGetents(client, bin, addrs, nil) {
		if !strings.Contains(out, "host.test") {
			t.Fatalf("getent hosts %s = %q, want host.test", addrs[i], out)
		}
	}
	var got float64
	collectortest.WaitFor(t, 10*time.Second, "40 attributed lookups", func() error {
		got = 0
		for k, v := range gather(t, c) {
			if strings.HasPrefix(k, "stall_dns_process_lookups_total{") && strings.Contains(k, fmt.Sprintf(`,comm=%q,`, filepath.Base(bin))) {
				got += v
			}
		}
		if got < 40 {
			return fmt.Errorf("%v attributed", got)
		}
		return nil
	})
	t.Logf("%s: %v of 40 lookups attributed without a cgroup2 mount", filepath.Base(bin), got)
	if got != 40 {
		t.Errorf("%v lookups attributed, want exactly 40", got)
	}
}
