package redis

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// oldVersion is a Redis version that cannot run on this machine (only
// redis-server 7.0 is installed), replayed by redistest from the fixtures
// under collector/redis/testdata: it checks which commands the collector
// chooses for old servers, and that their CLIENT LIST streams like 7.0's
// (the aggregates below exist only if it did). Real-server behaviour is
// covered by the other tests.
type oldVersion struct {
	info       string // INFO without arguments (commandstats section removed)
	cmdstats   string // INFO commandstats; "": INFO takes no argument (2.4)
	memStats   string // raw RESP reply of MEMORY STATS, "": unknown command
	clientList string
	noSetName  bool   // before 2.6.9: CLIENT has only LIST and KILL
	maxmemory  string // CONFIG GET maxmemory; "": 3221225472
}

func readFixtureFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fixtureVersion reads an INFO fixture (its commandstats section apart),
// a MEMORY STATS fixture ("": none) and a CLIENT LIST fixture.
func fixtureVersion(t *testing.T, infoFixture, memFixture, clientListFixture string) oldVersion {
	t.Helper()
	full := readFixtureFile(t, infoFixture)
	v := oldVersion{info: full, clientList: readFixtureFile(t, clientListFixture)}
	if i := strings.Index(full, "# Commandstats"); i >= 0 {
		j := strings.Index(full[i:], "# Keyspace")
		v.info = full[:i] + full[i+j:]
		v.cmdstats = full[i : i+j]
	}
	if memFixture != "" {
		v.memStats = readFixtureFile(t, memFixture)
	}
	return v
}

// start serves the version on a loopback port.
func (v oldVersion) start(t *testing.T) *redistest.Server {
	t.Helper()
	r := redistest.Replies{
		"info":                                  redistest.Bulk(v.info),
		"config get client-output-buffer-limit": redistest.Array("client-output-buffer-limit", "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"),
		"config get maxmemory":                  redistest.Array("maxmemory", cmp.Or(v.maxmemory, "3221225472")),
		"client list":                           redistest.Bulk(v.clientList),
		// 2.4's INFO has arity 1.
		"info commandstats": redistest.Raw("-ERR wrong number of arguments for 'info' command\r\n"),
	}
	if v.cmdstats != "" {
		r["info commandstats"] = redistest.Bulk(v.cmdstats)
	}
	if v.memStats != "" {
		r["memory stats"] = redistest.Raw(v.memStats)
	}
	if v.noSetName {
		// The real reply of 2.4 and 2.6.0–2.6.8.
		r["client setname"] = redistest.Raw("-ERR Syntax error, try CLIENT (LIST | KILL ip:port)\r\n")
	}
	return redistest.Start(t, r)
}

// TestOldVersions: the commands chosen for 2.8 and 4.0 servers, and
// what they yield (fixture values).
func TestOldVersions(t *testing.T) {
	t.Run("2.8", func(t *testing.T) {
		f := fixtureVersion(t, "info-2.8.txt", "", "clientlist-2.8.txt").start(t)
		c := newTestScraper(t, testSettings(), collectortest.Config("redis", nil), f.Addr)
		collectortest.Scrape(t, c, 3*time.Second)
		res := collectortest.Scrape(t, c, 3*time.Second)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		for _, cmd := range f.Commands() {
			if strings.HasPrefix(cmd, "memory") || strings.Count(cmd, " ") > 1 && strings.HasPrefix(cmd, "info") {
				t.Errorf("sent %q to a 2.8 server", cmd)
			}
		}
		if !f.Sent("config get maxmemory") {
			t.Error("maxmemory not read with CONFIG GET before 3.2")
		}
		if v := res.Must(t, "stall_redis_memory_max_bytes"); v != 3221225472 {
			t.Errorf("maxmemory %v", v)
		}
		if v := res.Must(t, "stall_redis_commands_total", "cmd", "cluster"); v != 12000 {
			t.Errorf("cluster calls %v", v)
		}
		if _, ok := res.Get("stall_redis_clients_memory_bytes"); ok {
			t.Error("2.8 has no client memory figures")
		}
		// client_longest_output_list:320 triggers CLIENT LIST in auto mode.
		if v := res.Must(t, "stall_redis_client_output_buffer_bytes"); v != 15<<20 {
			t.Errorf("omem %v", v)
		}
		if v := res.Must(t, "stall_redis_client_list_clients"); v != 4 {
			t.Errorf("clients %v (the replica line must be left out)", v)
		}
		if v := res.Must(t, "stall_redis_client_output_buffer_limit_unlimited", "class", "normal"); v != 1 {
			t.Errorf("normal unlimited %v", v)
		}
	})
	t.Run("4.0", func(t *testing.T) {
		f := fixtureVersion(t, "info-4.0.txt", "memorystats-4.0.resp", "clientlist-5.0.txt").start(t)
		s := testSettings()
		s.groupBy = replies.GroupByHost
		c := newTestScraper(t, s, collectortest.Config("redis", nil), f.Addr)
		collectortest.Scrape(t, c, 3*time.Second) // learns the version
		res := collectortest.Scrape(t, c, 3*time.Second)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if !f.Sent("memory stats") {
			t.Error("MEMORY STATS not used on 4.0")
		}
		if f.Sent("config get maxmemory") {
			t.Error("CONFIG GET maxmemory sent although INFO has maxmemory")
		}
		if v := res.Must(t, "stall_redis_clients_memory_bytes", "type", "normal"); v != 1073741824 {
			t.Errorf("clients.normal %v", v)
		}
		if v := res.Must(t, "stall_redis_memory_dataset_ratio"); v < 0.139 || v > 0.1393 {
			t.Errorf("dataset ratio %v", v)
		}
		// 1 GiB of normal-client memory ≥ the 512 MiB threshold: CLIENT
		// LIST ran although client_longest_output_list is small.
		if v := res.Must(t, "stall_redis_client_list_runs_total"); v < 1 {
			t.Error("auto mode did not run CLIENT LIST at 1 GiB of client memory")
		}
		if v := res.Must(t, "stall_redis_client_group_output_buffer_bytes", "group", "2001:db8::6"); v != 15<<20 {
			t.Errorf("IPv6 group %v", v)
		}
	})
}

// TestServersWithoutSetName: Redis 2.4 and 2.6.0–2.6.8 refuse CLIENT
// SETNAME, which the exporter sends when it connects; the target must be
// up anyway. 2.4's CLIENT LIST has no omem: the output buffer aggregates
// are absent, not 0, while the oll-based ones remain.
func TestServersWithoutSetName(t *testing.T) {
	t.Run("2.4", func(t *testing.T) {
		v := fixtureVersion(t, "info-2.4.txt", "", "clientlist-2.4.txt")
		v.noSetName = true
		f := v.start(t)
		res := scrapeOld(t, f)
		for _, name := range []string{"stall_redis_client_output_buffer_bytes", "stall_redis_client_max_output_buffer_bytes",
			"stall_redis_client_group_output_buffer_bytes", "stall_redis_client_group_clients", "stall_redis_client_output_buffer_by_command_bytes"} {
			if _, ok := res.Get(name); ok {
				t.Errorf("%s exported, but 2.4's CLIENT LIST has no omem", name)
			}
		}
		if v := res.Must(t, "stall_redis_client_pending_output_clients"); v != 2 {
			t.Errorf("pending clients (oll > 0) %v, want 2", v)
		}
		if v := res.Must(t, "stall_redis_client_output_list_blocks"); v != 3 {
			t.Errorf("oll %v, want 3", v)
		}
		if v := res.Must(t, "stall_redis_client_list_clients"); v != 4 {
			t.Errorf("clients %v, want 4", v)
		}
	})
	t.Run("2.6.0", func(t *testing.T) {
		v := fixtureVersion(t, "info-2.8.txt", "", "clientlist-2.6.txt")
		v.noSetName = true
		v.info = strings.Replace(v.info, "redis_version:2.8.24", "redis_version:2.6.0", 1)
		// name= came with CLIENT SETNAME in 2.6.9.
		v.clientList = regexp.MustCompile(` name=[^ ]*`).ReplaceAllString(v.clientList, "")
		f := v.start(t)
		res := scrapeOld(t, f)
		if v := res.Must(t, "stall_redis_client_output_buffer_bytes"); v != 15<<20 {
			t.Errorf("omem %v", v)
		}
		if v := res.Must(t, "stall_redis_commands_total", "cmd", "cluster"); v != 12000 {
			t.Errorf("cluster calls %v", v)
		}
	})
}

// scrapeOld scrapes a fake server twice with CLIENT LIST on every scrape
// and checks that it is up, named or not.
func scrapeOld(t *testing.T, f *redistest.Server) collectortest.Result {
	t.Helper()
	s := testSettings()
	s.clMode = "always"
	logs := &collectortest.Logs{}
	c := newTestScraper(t, s, collectortest.Config("redis", logs), f.Addr)
	collectortest.Scrape(t, c, 3*time.Second)
	res := collectortest.Scrape(t, c, 3*time.Second)
	if v := res.Must(t, "stall_redis_up"); v != 1 || res.Err != nil {
		t.Fatalf("up %v, err %v; commands %q\n%s", v, res.Err, f.Commands(), logs)
	}
	if !f.Sent("client setname stall_exporter") {
		t.Errorf("CLIENT SETNAME not tried: %q", f.Commands())
	}
	if v := res.Must(t, "stall_redis_uptime_seconds"); v <= 0 {
		t.Errorf("uptime %v", v)
	}
	return res
}

// TestHostileReplies: invalid UTF-8 in command and client names, a
// repeated commandstats line, a client really named "other" and names of
// 5,000 characters neither panic (client_golang refuses invalid label
// values) nor duplicate series, and every label is at most 128 bytes and
// "…".
func TestHostileReplies(t *testing.T) {
	long := strings.Repeat("x", 5000)
	v := fixtureVersion(t, "info-2.8.txt", "", "clientlist-2.8.txt")
	v.info = strings.Replace(v.info, "redis_version:2.8.24", "redis_version:2.8.24"+long, 1)
	v.cmdstats += "cmdstat_get:calls=1,usec=1,usec_per_call=1.00\r\ncmdstat_\xff\xfe:calls=2,usec=2,usec_per_call=1.00\r\n" +
		"cmdstat_" + long + "a:calls=3,usec=3,usec_per_call=1.00\r\ncmdstat_" + long + "b:calls=4,usec=4,usec_per_call=1.00\r\n"
	v.clientList += "id=9 addr=10.9.9.9:1 fd=20 name=bad\xffname age=1 idle=1 flags=N db=0 sub=0 psub=0 multi=-1 qbuf=0 qbuf-free=0 obl=0 oll=9 omem=99999999 events=rw cmd=g\xffet\n" +
		"id=10 addr=10.9.9.10:1 fd=21 name=other age=1 idle=1 flags=N db=0 sub=0 psub=0 multi=-1 qbuf=0 qbuf-free=0 obl=0 oll=1 omem=47000000 events=rw cmd=get\n" +
		"id=11 addr=10.9.9.11:1 fd=22 name=" + long + " age=1 idle=1 flags=N db=0 sub=0 psub=0 multi=-1 qbuf=0 qbuf-free=0 obl=0 oll=1 omem=1000 events=rw cmd=" + long + "\n"
	f := v.start(t)
	s := testSettings()
	s.groupBy = replies.GroupByName
	c := newTestScraper(t, s, collectortest.Config("redis", nil), f.Addr)
	collectortest.Scrape(t, c, 3*time.Second)
	res := collectortest.Scrape(t, c, 3*time.Second)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	seen := map[string]bool{}
	for _, m := range res.Metrics {
		key := m.Name + fmt.Sprint(m.Labels)
		if seen[key] {
			t.Errorf("duplicate series %s", key)
		}
		seen[key] = true
		for _, v := range m.Labels {
			if !utf8.ValidString(v) {
				t.Errorf("invalid UTF-8 label value %q in %s", v, m.Name)
			}
			if len(v) > collector.MaxLabelBytes+len("…") {
				t.Errorf("a label value of %d bytes in %s", len(v), m.Name)
			}
		}
	}
	if v := res.Must(t, "stall_redis_client_group_output_buffer_bytes", "group", "other"+replies.LiteralSuffix); v != 47000000 {
		t.Errorf("the group really named other: %v bytes", v)
	}
	if v := res.Must(t, "stall_redis_client_group_clients", "group", "other"+replies.LiteralSuffix); v != 1 {
		t.Errorf("the group really named other: %v clients", v)
	}
	if v := res.Must(t, "stall_redis_commands_total", "cmd", strings.Repeat("x", collector.MaxLabelBytes)+"…"); v != 3 {
		t.Errorf("two 5,000-character commands equal up to the cut: %v calls, want the first one's 3", v)
	}
	if v := res.Must(t, "stall_redis_commands_total", "cmd", "get"); v != 800000 {
		t.Errorf("first cmdstat_get line should win, got %v", v)
	}
	res.Must(t, "stall_redis_client_group_output_buffer_bytes", "group", "bad\uFFFDname")
	res.Must(t, "stall_redis_client_output_buffer_by_command_bytes", "cmd", "g\uFFFDet")
}

// TestUnreadableNumbers: an INFO number and a CONFIG GET maxmemory that
// do not parse are each counted as bad input, their series left out; a
// percentage INFO writes with its sign ("12.50%") is read.
func TestUnreadableNumbers(t *testing.T) {
	v := fixtureVersion(t, "info-2.8.txt", "", "clientlist-2.8.txt")
	v.info = strings.Replace(v.info, "connected_clients:103", "connected_clients:lots", 1) + "used_memory_dataset_perc:12.50%\r\n"
	v.maxmemory = "3 gigabytes"
	f := v.start(t)
	cfg := collectortest.Config("redis", nil)
	c := newTestScraper(t, testSettings(), cfg, f.Addr)
	// The first scrape reads CONFIG (cached for --redis.config-refresh-interval
	// after it), the second INFO only.
	var counts []uint64
	var res collectortest.Result
	for range 2 {
		if res = collectortest.Scrape(t, c, 3*time.Second); res.Err != nil {
			t.Fatal(res.Err)
		}
		counts = append(counts, cfg.Problems.Count())
	}
	if !f.Sent("config get maxmemory") || fmt.Sprint(counts) != "[2 3]" {
		t.Errorf("problems counted after each scrape %v, want [2 3] (connected_clients and maxmemory, then connected_clients)", counts)
	}
	for _, name := range []string{"stall_redis_clients_connected", "stall_redis_memory_max_bytes"} {
		if v, ok := res.Get(name); ok {
			t.Errorf("%s = %v from a value that is not a number", name, v)
		}
	}
	if v := res.Must(t, "stall_redis_memory_dataset_ratio"); v != 0.125 {
		t.Errorf("dataset ratio %v from used_memory_dataset_perc:12.50%%, want 0.125", v)
	}
}
