package redis

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// autoInfo is an INFO reply whose client_recent_max_output_buffer makes
// auto mode run CLIENT LIST, as on an instance in incident 7.
const autoInfo = "# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:100\r\n# Clients\r\nconnected_clients:%d\r\n" +
	"client_recent_max_output_buffer:5242880\r\n# Memory\r\nused_memory:1000000\r\nmaxmemory:0\r\n# Replication\r\nrole:master\r\n" +
	"# Commandstats\r\ncmdstat_get:calls=1,usec=1,usec_per_call=1.00\r\n"

// podSuffix is the i-th five-character pod name suffix, in the alphabet
// Kubernetes draws them from.
func podSuffix(i int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for j := range b {
		b[j] = alphabet[i%len(alphabet)]
		i /= len(alphabet)
	}
	return string(b)
}

// podClientList is a CLIENT LIST reply of n clients in Redis 7.0's layout
// (about 300 bytes a line): pods of two Deployments, every 100th client
// of catalog-reader with a 5 MiB reply queued (oll=1, as in incident 7).
func podClientList(n int) (reply string, readers, readerOmem, consumers int) {
	var b strings.Builder
	for i := range n {
		pool, omem := "consumer", 0
		if i%2 == 0 {
			pool = "catalog-reader"
			readers++
			if i%100 == 0 {
				omem = 5 << 20
				readerOmem += omem
			}
		} else {
			consumers++
		}
		fmt.Fprintf(&b, "id=%d addr=10.%d.%d.%d:%d laddr=10.0.0.1:6379 fd=%d name=%s-5f7b9c8d6d-%s age=855 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "+
			"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=16384 obl=0 oll=%d omem=%d tot-mem=%d events=r cmd=get user=default redir=-1 resp=2\n",
			i+5, i>>16&255, i>>8&255, i&255, 40000+i%20000, i+10, pool, podSuffix(i), min(omem, 1), omem, omem+22000)
	}
	return b.String(), readers, readerOmem, consumers
}

// heapAfterGC is the live heap once garbage is collected.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// totalAlloc is every byte the process has allocated so far.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestClientListStreamed: a CLIENT LIST reply is aggregated as it arrives,
// so what a scrape allocates does not grow with the reply, and nothing of
// it is kept between scrapes (before, a 100,000-client reply of
// 29.5 MB cost 4 bytes of RSS per reply byte and OOM-killed the exporter
// under the shipped 64 MiB limit). 20,000 clients (6 MB) here; the 100,000
// case is measured by BenchmarkScrapeMemory.
//
// Not parallel: TotalAlloc and the heap are process-wide.
func TestClientListStreamed(t *testing.T) {
	list, readers, readerOmem, consumers := podClientList(20000)
	srv := redistest.Start(t, redistest.Replies{"info": redistest.Bulk(fmt.Sprintf(autoInfo, 20000)), "client list": redistest.Bulk(list)})
	sc := newTestScraper(t, testSettings(), collectortest.Config("redis", nil), srv.Addr)
	heapBefore := heapAfterGC()
	collectortest.Scrape(t, sc, 5*time.Second) // connection, CONFIG cache, maps
	allocBefore := totalAlloc()
	var res collectortest.Result
	for range 2 {
		res = collectortest.Scrape(t, sc, 5*time.Second)
	}
	alloc := (totalAlloc() - allocBefore) / 2
	retained := int64(heapAfterGC()) - int64(heapBefore)
	t.Logf("CLIENT LIST of %d bytes: %.2f MiB allocated per scrape, %d bytes retained", len(list), float64(alloc)/(1<<20), retained)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if v := res.Must(t, "stall_redis_client_list_clients"); v != 20000 {
		t.Errorf("clients %v", v)
	}
	if v := res.Must(t, "stall_redis_client_list_reply_bytes"); v != float64(len(list)) {
		t.Errorf("reply bytes %v, want %d", v, len(list))
	}
	if v := res.Must(t, "stall_redis_client_group_output_buffer_bytes", "group", "catalog-reader"); v != float64(readerOmem) {
		t.Errorf("catalog-reader omem %v, want %d", v, readerOmem)
	}
	if v := res.Must(t, "stall_redis_client_group_clients", "group", "catalog-reader"); v != float64(readers) {
		t.Errorf("catalog-reader clients %v, want %d", v, readers)
	}
	if v := res.Must(t, "stall_redis_client_group_clients", "group", "other"); v != float64(consumers) {
		t.Errorf("other clients %v, want %d", v, consumers)
	}
	if alloc > uint64(len(list))/8 {
		t.Errorf("a scrape allocated %d bytes for a CLIENT LIST of %d: the reply is held, not streamed", alloc, len(list))
	}
	if retained > 1<<20 {
		t.Errorf("%d bytes retained between scrapes", retained)
	}
}

// TestManyGroups: a CLIENT LIST with more distinct names than
// replies.MaxGroups, grouped by name, still ranks the client with the
// largest output buffer first, and warns once (a collector.StateLog; the
// scrapes after it log at debug level) that client counts are approximate.
func TestManyGroups(t *testing.T) {
	var b strings.Builder
	for i := range replies.MaxGroups + 100 {
		fmt.Fprintf(&b, "id=%d addr=10.0.%d.%d:1 name=c%d omem=0 cmd=get\n", i, i/256, i%256, i)
	}
	b.WriteString("id=99999 addr=10.9.9.9:1 name=late omem=6000000 oll=1 cmd=get\n")
	srv := redistest.Start(t, redistest.Replies{"info": redistest.Bulk(fmt.Sprintf(autoInfo, replies.MaxGroups+101)), "client list": redistest.Bulk(b.String())})
	s := testSettings()
	s.groupBy = replies.GroupByName
	logs := &collectortest.Logs{}
	sc := newTestScraper(t, s, collectortest.Config("redis", logs), srv.Addr)
	var res collectortest.Result
	for range 2 {
		res = collectortest.Scrape(t, sc, 5*time.Second)
	}
	if g := firstGroup(res, "stall_redis_client_group_output_buffer_bytes", "group"); g != "late" {
		t.Errorf("top group %q, want late", g)
	}
	if n := logs.Count("warn", "WARN CLIENT LIST has more than"); n != 1 {
		t.Errorf("%d warnings about the group bound in 2 scrapes, want 1:\n%s", n, logs)
	}
}

// TestStalledAnnouncement: a reply header announcing a bulk string within
// every limit, and then silence, costs nothing: go-redis allocates what a
// header announces before the bytes arrive, so such a bulk is handed to it
// only once it is complete (announcing 60 MB and stalling took the peak RSS
// from 20 to 79 MB before). In a synctest bubble: the server stalls until
// --redis.timeout, which passes at once.
//
// Not parallel: TotalAlloc is process-wide.
func TestStalledAnnouncement(t *testing.T) {
	for size, reason := range map[int]string{900_000: remote.ReasonTimeout, 60_000_000: remote.ReasonTooLarge} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Then silence until the client gives up.
				srv := redistest.NewPipe(redistest.Replies{"info": redistest.Raw("$" + strconv.Itoa(size) + "\r\n" + strings.Repeat("a", 1000))})
				sc := newPipeScraper(t, testSettings(), collectortest.Config("redis", nil), srv)
				before := totalAlloc()
				var res collectortest.Result
				for range 3 {
					res = collectortest.Scrape(t, sc, 5*time.Second)
				}
				alloc := totalAlloc() - before
				t.Logf("announced %d bytes: %.2f MiB allocated in 3 scrapes", size, float64(alloc)/(1<<20))
				if v := res.Must(t, "stall_redis_up"); v != 0 {
					t.Errorf("up %v", v)
				}
				res.Must(t, "stall_redis_down_reason", "reason", reason)
				if alloc > 1<<20 {
					t.Errorf("3 scrapes allocated %d bytes for an announcement that never arrived", alloc)
				}
			})
		})
	}
}

// TestHostileInfo: INFO is a few tens of kB on every real server, so a
// larger one is refused, and one within the limit cannot make parsing
// cost a multiple of it or export an unbounded number of series
// (before the limit, a 30 MB INFO of key:value lines took the exporter to
// 428 MB RSS).
//
// Not parallel: TotalAlloc is process-wide.
func TestHostileInfo(t *testing.T) {
	lines := func(size int, line func(i int) string) string {
		var b strings.Builder
		fmt.Fprintf(&b, autoInfo, 1)
		for i := 0; b.Len() < size; i++ {
			b.WriteString(line(i))
		}
		return b.String()
	}
	cases := []struct {
		name     string
		info     string
		up       float64
		reason   string
		maxAlloc uint64
	}{
		// The first scrape sends INFO and INFO commandstats (the version is
		// not known yet), which this server answers alike: two replies
		// within 1 MiB.
		{"500 kB of fields", lines(500_000, func(i int) string { return "f" + strconv.Itoa(i) + ":1\r\n" }), 1, "", 6 << 20},
		// 1,000 commands are 2,000 series (40,000 before the bound): the
		// metrics and their decoding by the test take most of it.
		{"500 kB of commands", lines(500_000, func(i int) string {
			return "cmdstat_c" + strconv.Itoa(i) + ":calls=1,usec=1,usec_per_call=1.00\r\n"
		}), 1, "", 8 << 20},
		{"2 MB", lines(2_000_000, func(i int) string { return "f" + strconv.Itoa(i) + ":1\r\n" }), 0, remote.ReasonTooLarge, 1 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Replies{"info": redistest.Bulk(c.info)})
			s := testSettings()
			s.clMode = "never"
			sc := newTestScraper(t, s, collectortest.Config("redis", nil), srv.Addr)
			before := totalAlloc()
			res := collectortest.Scrape(t, sc, 5*time.Second)
			alloc := totalAlloc() - before
			series := 0
			for _, m := range res.Metrics {
				if m.Name == "stall_redis_commands_total" {
					series++
				}
			}
			t.Logf("%d-byte INFO: %.2f MiB allocated, %d series", len(c.info), float64(alloc)/(1<<20), len(res.Metrics))
			if v := res.Must(t, "stall_redis_up"); v != c.up {
				t.Fatalf("up %v, want %v (%v)", v, c.up, res.Err)
			}
			if c.reason != "" {
				res.Must(t, "stall_redis_down_reason", "reason", c.reason)
			}
			if alloc > c.maxAlloc {
				t.Errorf("one scrape allocated %d bytes", alloc)
			}
			if series > replies.MaxInfoCommands {
				t.Errorf("%d commandstats series from one target", series)
			}
		})
	}
}

// uniqueClientList is a hostile CLIENT LIST of about size bytes in which
// every line has a new name and a new last command: the worst case for the
// group and command tables (replies.MaxGroups bounds them).
func uniqueClientList(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "id=%d addr=10.0.0.1:%d name=n%08x omem=%d cmd=c%08x\n", i, i%65536, i, i%2*4096, i)
	}
	return b.String()
}

// BenchmarkScrapeMemory: what one scrape allocates in the collector
// (runtime.MemStats, B/op) for a 100,000-client CLIENT LIST: 29.6 MB in
// Redis 7.0's layout with pod names, grouped by pool.
func BenchmarkScrapeMemory(b *testing.B) {
	list, _, _, _ := podClientList(100000)
	srv := redistest.Start(b, redistest.Replies{"info": redistest.Bulk(fmt.Sprintf(autoInfo, 100000)), "client list": redistest.Bulk(list)})
	sc := newTestScraper(b, testSettings(), collectortest.Config("redis", nil), srv.Addr)
	collectortest.Scrape(b, sc, 10*time.Second)
	b.ReportAllocs()
	b.SetBytes(int64(len(list)))
	for b.Loop() {
		if res := collectortest.Scrape(b, sc, 10*time.Second); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

// vmHWM reads the peak resident set size of process pid, in MiB.
func vmHWM(tb testing.TB, pid int) float64 { return procStatusMiB(tb, pid, "VmHWM:") }

// vmRSS reads the resident set size of process pid, in MiB.
func vmRSS(tb testing.TB, pid int) float64 { return procStatusMiB(tb, pid, "VmRSS:") }

// procStatusMiB reads a kB field of /proc/<pid>/status, in MiB.
func procStatusMiB(tb testing.TB, pid int, field string) float64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkExporterPeakRSS: the peak RSS (VmHWM) of the release binary,
// host collectors included, scraping one target that answers as named,
// b.N scrapes with CLIENT LIST on each (-benchtime 20x in
// docs/benchmarks.md). This is what the 64 MiB limit of the deploy kit
// (systemd MemoryMax, DaemonSet limits.memory) has to hold.
func BenchmarkExporterPeakRSS(b *testing.B) {
	bin := e2etest.Build(b, ".")
	stall := func(size int) func(w io.Writer) error {
		return func(w io.Writer) error {
			_, err := io.WriteString(w, "$"+strconv.Itoa(size)+"\r\n")
			return err
		}
	}
	small, _, _, _ := podClientList(100)
	pods, _, _, _ := podClientList(100000)
	var unique strings.Builder
	for i := range 100000 {
		fmt.Fprintf(&unique, "id=%d addr=10.%d.%d.%d:4000 laddr=10.0.0.1:6379 fd=9 name=client-%08x age=855 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "+
			"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=16384 obl=0 oll=0 omem=%d tot-mem=22000 events=r cmd=get user=default redir=-1 resp=2\n",
			i, i>>16&255, i>>8&255, i&255, i*2654435761, i%100/99*5242880)
	}
	var hostileInfo strings.Builder
	fmt.Fprintf(&hostileInfo, autoInfo, 1)
	for i := 0; hostileInfo.Len() < 480_000; i++ {
		hostileInfo.WriteString("f" + strconv.Itoa(i) + ":1\r\n")
	}
	cases := []struct {
		name       string
		info       redistest.Reply
		clientList string
		args       []string
		targets    int // servers answering alike; 0: 1
	}{
		{"healthy target, 100 clients", redistest.Bulk(fmt.Sprintf(autoInfo, 100)), small, nil, 0},
		{"CLIENT LIST 100k clients 29.6 MB pool", redistest.Bulk(fmt.Sprintf(autoInfo, 100000)), pods, nil, 0},
		{"CLIENT LIST 100k unique names group-by name", redistest.Bulk(fmt.Sprintf(autoInfo, 100000)), unique.String(), []string{"--redis.client-group-by=name"}, 0},
		{"CLIENT LIST 64 MiB of new names and commands", redistest.Bulk(fmt.Sprintf(autoInfo, 1)), uniqueClientList(64<<20 - 1024), []string{"--redis.client-group-by=name"}, 0},
		{"8 targets, CLIENT LIST 64 MiB of new names and commands", redistest.Bulk(fmt.Sprintf(autoInfo, 1)), uniqueClientList(64<<20 - 1024), []string{"--redis.client-group-by=name"}, 8},
		{"INFO 480 kB of fields", redistest.Bulk(hostileInfo.String()), "", nil, 0},
		{"INFO announces 900 kB and stalls", stall(900_000), "", []string{"--redis.timeout=300ms"}, 0},
		{"INFO announces 60 MB and stalls", stall(60_000_000), "", []string{"--redis.timeout=300ms"}, 0},
	}
	for _, c := range cases {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			var args []string
			replies := redistest.Replies{"info": c.info}
			if c.clientList != "" {
				replies["client list"] = redistest.Bulk(c.clientList)
			}
			for range max(c.targets, 1) {
				srv := redistest.Start(b, replies)
				args = append(args, "--redis.addr="+srv.Addr)
			}
			args = append(args, c.args...)
			if c.clientList != "" {
				args = append(args, "--redis.client-list.mode=always")
			}
			e := e2etest.StartExporter(b, bin, args...)
			base, pid := e.URL, e.Pid
			idle := vmHWM(b, pid)
			for b.Loop() {
				resp, err := http.Get(base + "/metrics")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.ReportMetric(idle, "idle-MiB")
			b.ReportMetric(vmHWM(b, pid), "peak-RSS-MiB")
		})
	}
}

// BenchmarkProbeCacheRSS: the release binary with an allowlist pattern
// over 2,000 listeners answering like Redis, each probed once per
// iteration, 8 at a time. Reported: the peak and
// current RSS, the file descriptors the exporter holds and the
// connections the servers still see open at the end.
func BenchmarkProbeCacheRSS(b *testing.B) {
	const n = 2000
	raiseOpenFiles(b, 3*n+256)
	list, _, _, _ := podClientList(50)
	info, clientList := redistest.Bulk(fmt.Sprintf(autoInfo, 50)), redistest.Bulk(list)
	servers := make([]*redistest.Server, n)
	for i := range servers {
		servers[i] = redistest.Start(b, redistest.Replies{"info": info, "client list": clientList})
	}
	e := e2etest.StartExporter(b, e2etest.Build(b, "."), `--redis.probe.allowed-targets-regexp=127\.0\.0\.1:[0-9]+`)
	base, pid := e.URL, e.Pid
	for b.Loop() {
		eachEightAtATime(servers, func(srv *redistest.Server) {
			resp, err := http.Get(base + "/probe?module=redis&target=" + srv.Addr)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	open := int64(0)
	collectortest.WaitFor(b, 10*time.Second, "the cache's closes to reach the servers", func() error {
		open = 0
		for _, srv := range servers {
			open += srv.Open()
		}
		if open > 64 { // main's /probe bound: the 64 most recently probed targets keep their connection
			return fmt.Errorf("%d connections open", open)
		}
		return nil
	})
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	b.ReportMetric(vmHWM(b, pid), "peak-RSS-MiB")
	b.ReportMetric(vmRSS(b, pid), "RSS-MiB")
	b.ReportMetric(float64(len(fds)), "fds")
	b.ReportMetric(float64(open), "open-conns")
}
