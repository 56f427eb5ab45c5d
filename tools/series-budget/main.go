// Command series-budget measures the series the real exporter serves per
// host, scenario by scenario, for docs/capacity.md: the default collectors
// on this machine; with one Redis target (a real redis-server) at 100 and at
// 10,000 connected clients (opened by redis-benchmark's idle mode) after a
// round of redis-benchmark's default commands; with a broker (the RocketMQ
// test broker, store.log and watermark.log followed); and with the dns
// collector capturing lookups against a test resolver on loopback. Each
// scenario starts a fresh exporter; the numbers are the series of its second
// scrape, counted by family.
//
//	go build -o /tmp/stall_exporter . && go build -o /tmp/testbroker ./cmd/rocketmq-testbroker
//	cd tools && go run ./series-budget -exporter /tmp/stall_exporter -testbroker /tmp/testbroker
//
// Needs root for the dns scenario (CAP_NET_RAW, CAP_BPF, port 53), redis-server and redis-benchmark.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/dns/dnstest"
)

func main() {
	exporter := flag.String("exporter", "./stall_exporter", "exporter binary")
	broker := flag.String("testbroker", "", "rocketmq-testbroker binary (empty: skip the broker scenario)")
	flag.Parse()
	// 10,000 clients need as many descriptors in redis-server and redis-benchmark.
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max < 20100 {
		log.Printf("descriptor limit %d (%v): the 10,000-client scenario may fail", lim.Max, err)
	}
	dir, err := os.MkdirTemp("", "series-budget")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b := &budget{exporter: *exporter, dir: dir}
	defer b.stopAll()

	base := b.measure("default collectors (this machine)", nil)
	fmt.Printf("| Scenario | Series | Added | Largest families |\n|---|---|---|---|\n")
	b.row(base, counts{})

	redisAddr := b.redis()
	for _, n := range []int{100, 10000} {
		idle := b.start("redis-benchmark", "redis-benchmark", "-p", port(redisAddr), "-I", "-c", fmt.Sprint(n))
		b.waitClients(redisAddr, n)
		b.row(b.measure(fmt.Sprintf("+ one Redis target, %d clients", n), []string{"--redis.addr=redis://" + redisAddr}), base)
		b.row(b.measure(fmt.Sprintf("+ one Redis target, %d clients, CLIENT LIST every scrape", n),
			[]string{"--redis.addr=redis://" + redisAddr, "--redis.client-list.mode=always"}), base)
		b.stop(idle)
	}

	if *broker != "" {
		brokerAddr, namesrv, logDir := freeAddr(), freeAddr(), filepath.Join(dir, "rocketmqlogs")
		b.start("testbroker", *broker, "-listen", brokerAddr, "-namesrv", namesrv, "-stall-every", "2s", "-stall-for", "600ms", "-log-dir", logDir)
		waitTCP(brokerAddr)
		waitTCP(namesrv)
		b.row(b.measure("+ one RocketMQ broker (namesrv discovery, logs followed)",
			[]string{"--rocketmq.namesrv=" + namesrv, "--rocketmq.log-dir=" + logDir}), base)
	}

	if os.Geteuid() == 0 {
		b.row(b.measureDNS(), base)
	} else {
		log.Print("not root: dns scenario skipped")
	}
}

type counts struct {
	name     string
	total    int
	families map[string]int
}

type budget struct {
	exporter string
	dir      string
	procs    []*exec.Cmd
}

func (b *budget) start(name, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	b.procs = append(b.procs, cmd)
	return cmd
}

func (b *budget) stop(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (b *budget) stopAll() {
	for _, p := range b.procs {
		if p.ProcessState == nil {
			b.stop(p)
		}
	}
}

func (b *budget) redis() string {
	addr := freeAddr()
	b.start("redis-server", "redis-server", "--port", port(addr), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--maxclients", "20000", "--maxmemory", "256mb", "--protected-mode", "no", "--dir", b.dir)
	waitTCP(addr)
	// A round of the default benchmark commands, so commandstats has the usual variety.
	out, err := exec.Command("redis-benchmark", "-p", port(addr), "-q", "-n", "2000", "-c", "10").CombinedOutput()
	if err != nil {
		log.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	return addr
}

func (b *budget) waitClients(addr string, n int) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("redis-cli", "-p", port(addr), "info", "clients").Output()
		for _, l := range strings.Split(string(out), "\n") {
			var c int
			if _, err := fmt.Sscanf(strings.TrimSpace(l), "connected_clients:%d", &c); err == nil && c >= n {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Fatalf("redis-server never had %d clients connected", n)
}

// measure runs a fresh exporter with args and counts its second scrape.
func (b *budget) measure(name string, args []string) counts {
	return b.measureWith(name, args, nil)
}

func (b *budget) measureWith(name string, args []string, during func(url string)) counts {
	addr := freeAddr()
	cmd := b.start("exporter", b.exporter, append([]string{"--web.listen-address=" + addr}, args...)...)
	defer b.stop(cmd)
	url := "http://" + addr + "/metrics"
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := scrape(url); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("%s: the exporter never answered on %s", name, url)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if during != nil {
		during(url)
	}
	time.Sleep(3 * time.Second) // a few sampler ticks and background samples
	body, err := scrape(url)
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	return count(name, body)
}

// measureDNS runs the dns collector and makes lookups of every kind the
// test resolver answers (PTR found, NXDOMAIN, never answered; A, AAAA; a
// TXT truncated over UDP), from this process.
func (b *budget) measureDNS() counts {
	pid := os.Getpid()
	addr := net.JoinHostPort(fmt.Sprintf("127.53.%d.%d", pid>>8&255, pid%250+1), "53")
	srv, err := dnstest.Listen(addr)
	if err != nil {
		log.Fatalf("test resolver on %s: %v", addr, err)
	}
	defer srv.Close()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	return b.measureWith("+ dns collector (ebpf attribution), lookups of every type", []string{"--collector.dns"}, func(url string) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			body, _ := scrape(url)
			if strings.Contains(body, "\nstall_dns_capture_up 1\n") {
				break
			}
			if time.Now().After(deadline) {
				log.Fatal("dns collector never captured")
			}
			time.Sleep(200 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 1; i <= 5; i++ {
			_, _ = r.LookupAddr(ctx, fmt.Sprintf("192.0.2.%d", i))
		}
		_, _ = r.LookupAddr(ctx, "203.0.113.1")
		_, _ = r.LookupIPAddr(ctx, "ok.test.")
		_, _ = r.LookupTXT(ctx, "big.test.")
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancelShort()
		_, _ = r.LookupAddr(short, "198.51.100.1")
		time.Sleep(6 * time.Second) // the unanswered one times out (--dns.timeout 5s)
	})
}

func (b *budget) row(c, base counts) {
	type fam struct {
		name string
		n    int
	}
	var fams []fam
	for n, v := range c.families {
		if d := v - base.families[n]; d > 0 || base.name == "" {
			fams = append(fams, fam{n, v - base.families[n]})
		}
	}
	sort.Slice(fams, func(i, j int) bool {
		return fams[i].n > fams[j].n || fams[i].n == fams[j].n && fams[i].name < fams[j].name
	})
	var top []string
	for i, f := range fams {
		if i == 5 {
			break
		}
		top = append(top, fmt.Sprintf("`%s` %d", f.name, f.n))
	}
	added := "—"
	if base.name != "" {
		added = fmt.Sprint(c.total - base.total)
	}
	fmt.Printf("| %s | %d | %s | %s |\n", c.name, c.total, added, strings.Join(top, ", "))
}

func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", resp.Status)
	}
	return string(body), err
}

// count counts the series of an exposition by family (a histogram's
// _bucket, _sum and _count series under the histogram's name).
func count(name, body string) counts {
	c := counts{name: name, families: map[string]int{}}
	hist := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if f, ok := strings.CutPrefix(l, "# TYPE "); ok {
			if n, typ, _ := strings.Cut(f, " "); typ == "histogram" {
				hist[n] = true
			}
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		n := l[:strings.IndexAny(l, "{ ")]
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, s); ok && hist[base] {
				n = base
			}
		}
		c.families[n]++
		c.total++
	}
	return c
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func waitTCP(addr string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
