package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/redistest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

func TestBigKeys(t *testing.T) {
	r := startRedis(t)
	ctx := context.Background()
	admin := r.client()
	sizes := map[string]int{"small": 100, "user:42:avatar": 300 << 10, "blob": 2 << 20, "mid": 100 << 10}
	for k, n := range sizes {
		if err := admin.Set(ctx, k, strings.Repeat("x", n), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		admin.Set(ctx, "filler:"+strconv.Itoa(i), "v", 0)
	}
	db3 := r.client(func(o *redis.Options) { o.DB = 3 })
	if err := db3.Set(ctx, "db3:big", strings.Repeat("y", 1<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}

	s := testSettings()
	s.bigkeys.enabled = true
	s.bigkeys.top = 3
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	b := c.bigkeys[0]
	if err := b.pass(ctx); err != nil {
		t.Fatal(err)
	}
	res := collectortest.Scrape(t, c, 3*time.Second)
	want := []struct {
		db, key string
		min     int
	}{{"0", "blob", 2 << 20}, {"3", "db3:big", 1 << 20}, {"0", "user:42:avatar", 300 << 10}}
	for _, w := range want {
		v := res.Must(t, "stall_redis_big_key_bytes", "db", w.db, "key", w.key)
		if v < float64(w.min) || v > float64(w.min)*1.3 {
			t.Errorf("%s: %v bytes, want about %d", w.key, v, w.min)
		}
	}
	if _, ok := res.Get("stall_redis_big_key_bytes", "key", "mid"); ok {
		t.Error("4th largest key exported with top 3")
	}
	if v := res.Must(t, "stall_redis_big_keys_scanned_total"); v != 205 {
		t.Errorf("scanned %v keys, want 205", v)
	}
	res.Must(t, "stall_redis_big_keys_last_pass_timestamp_seconds")

	// Hashed names: stable, no key name in the labels.
	s.bigkeys.hashNames = true
	c2 := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	if err := c2.bigkeys[0].pass(ctx); err != nil {
		t.Fatal(err)
	}
	res = collectortest.Scrape(t, c2, 3*time.Second)
	h := bigKeyLabel("blob", true)
	if !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+16 || h != bigKeyLabel("blob", true) {
		t.Fatalf("hash label %q", h)
	}
	res.Must(t, "stall_redis_big_key_bytes", "key", h)
	for _, m := range res.Metrics {
		if k := m.Labels["key"]; k != "" && !strings.HasPrefix(k, "sha256:") {
			t.Errorf("clear key name %q with hash-names", k)
		}
	}
}

// TestBigKeysPreferReplica: the scan runs on a replica and the master
// sees no MEMORY USAGE. The replica announces an address the exporter
// cannot reach (TEST-NET-1), as behind NAT: without ?bigkeys_replica= the
// scan falls back to the master, with it the replica is used.
func TestBigKeysPreferReplica(t *testing.T) {
	t.Parallel()
	master := startRedis(t, "--repl-diskless-sync-delay", "0")
	replica := startRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port), "--replica-announce-ip", "192.0.2.1")
	ctx := context.Background()
	madmin, radmin := master.client(), replica.client()
	if err := madmin.Set(ctx, "k", strings.Repeat("z", 64<<10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	collectortest.WaitFor(t, 10*time.Second, "the replica to be online with the key", func() error {
		info, _ := madmin.Info(ctx, "replication").Result()
		n, _ := radmin.Exists(ctx, "k").Result()
		if !strings.Contains(info, "state=online") || n != 1 {
			return fmt.Errorf("replica online: %v, key there: %v", strings.Contains(info, "state=online"), n == 1)
		}
		return nil
	})
	s := testSettings()
	s.bigkeys.enabled, s.bigkeys.preferReplica = true, true
	s.conn.dialTimeout = 300 * time.Millisecond

	unreachable := newTestScraper(t, s, collectortest.Config("redis", nil), master.addr)
	if err := unreachable.bigkeys[0].pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := commandCalls(t, madmin, "memory|usage"); n != 1 {
		t.Errorf("announced replica unreachable: master got %d MEMORY USAGE calls, want 1", n)
	}

	c := newTestScraper(t, s, collectortest.Config("redis", nil), "redis://"+master.addr+"?bigkeys_replica="+replica.addr)
	if err := c.bigkeys[0].pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := commandCalls(t, madmin, "memory|usage"); n != 1 {
		t.Errorf("master got %d MEMORY USAGE calls in total, want only the earlier 1", n)
	}
	if n := commandCalls(t, radmin, "memory|usage"); n != 1 {
		t.Errorf("replica got %d MEMORY USAGE calls, want 1", n)
	}
	res := collectortest.Scrape(t, c, 3*time.Second)
	// The series carry the target's addr, whichever server was scanned.
	res.Must(t, "stall_redis_big_key_bytes", "addr", "redis://"+master.addr, "key", "k")
}

// TestBigKeysRateLimit: the scan measures at most
// --redis.bigkeys.keys-per-second keys a second (a burst of one second's
// worth first): 30 keys at 20/s take half a second after the first 20. In a
// synctest bubble against a fake server, so the time is the limiter's
// alone.
func TestBigKeysRateLimit(t *testing.T) { synctest.Test(t, testBigKeysRateLimit) }

func testBigKeysRateLimit(t *testing.T) {
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	srv := redistest.NewPipe(redistest.Replies{
		"info":          redistest.Bulk("redis_version:7.0.15\r\nrole:master\r\n"),
		"info keyspace": redistest.Bulk("# Keyspace\r\ndb0:keys=30,expires=0,avg_ttl=0\r\n"),
		"scan":          redistest.Raw("*2\r\n$1\r\n0\r\n" + redistest.EncodeArray(keys...)), // cursor 0: one page
		"memory usage":  redistest.Raw(":100\r\n"),
	})
	s := testSettings()
	s.bigkeys.enabled = true
	s.bigkeys.keysPerSecond = 20
	c := newPipeScraper(t, s, collectortest.Config("redis", nil), srv)
	start := time.Now()
	if err := c.bigkeys[0].pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 501*time.Millisecond {
		t.Errorf("30 keys measured in %v at 20 keys/s, want 500ms", d)
	}
	if n := len(slices.DeleteFunc(srv.Commands(), func(c string) bool { return !strings.HasPrefix(c, "memory usage") })); n != 30 {
		t.Errorf("%d MEMORY USAGE sent, want 30", n)
	}
}

// TestBigKeysBackoff: failed passes in a row are tried again after
// bigKeysBackoff (10 s, doubling to a minute), and the state is warned
// once. In a synctest bubble against a fake server whose INFO keyspace
// fails, so the times are the scanner's alone.
func TestBigKeysBackoff(t *testing.T) { synctest.Test(t, testBigKeysBackoff) }

func testBigKeysBackoff(t *testing.T) {
	start := time.Now()
	var mu sync.Mutex
	var at []time.Duration // when each pass asked INFO keyspace, after start
	srv := redistest.NewPipe(redistest.Replies{
		"info": redistest.Bulk("redis_version:7.0.15\r\nrole:master\r\n"),
		"info keyspace": func(w io.Writer) error {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
			_, err := io.WriteString(w, "-ERR keyspace unavailable\r\n")
			return err
		},
	})
	s := testSettings()
	s.bigkeys.enabled = true
	s.bigkeys.interval = time.Hour
	logs := &collectortest.Logs{}
	c := newPipeScraper(t, s, collectortest.Config("redis", logs), srv)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		c.bigkeys[0].run(ctx)
		close(done)
	}()
	time.Sleep(200 * time.Second)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{0, 10 * time.Second, 30 * time.Second, 70 * time.Second, 130 * time.Second, 190 * time.Second}
	if fmt.Sprint(at) != fmt.Sprint(want) {
		t.Errorf("failed passes at %v, want %v (10 s, then doubling to a minute)", at, want)
	}
	if n := logs.Count("warn", "WARN big-key scan stopped; retrying with backoff"); n != 1 {
		t.Errorf("%d warnings for six failed passes, want 1:\n%s", n, logs)
	}
}

func TestBigKeyLabel(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	l := bigKeyLabel(long, false)
	if len(l) > collector.MaxLabelBytes+len("…") || !strings.HasSuffix(l, "…") {
		t.Errorf("long key label %d bytes", len(l))
	}
	if l := bigKeyLabel("a\xffb", false); l != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 label %q", l)
	}
	top := []bigKey(nil)
	for i, n := range []int64{5, 1, 9, 7, 3} {
		top = insertTop(top, bigKey{key: strconv.Itoa(i), bytes: n}, 3, func(s string) string { return s })
	}
	if len(top) != 3 || top[0].bytes != 9 || top[1].bytes != 7 || top[2].bytes != 5 {
		t.Errorf("top %+v", top)
	}
}

// TestBigKeysForbidden: a user without MEMORY USAGE stops the scanner
// with one clear error instead of scanning forever for nothing.
func TestBigKeysForbidden(t *testing.T) {
	r := startRedis(t, "--user", "default", "on", "nopass", "~*", "+@all", "-memory")
	r.client().Set(context.Background(), "k", "v", 0)
	s := testSettings()
	s.bigkeys.enabled = true
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	err := c.bigkeys[0].pass(context.Background())
	if !errors.Is(err, errBigKeysUnsupported) {
		t.Fatalf("pass: %v, want errBigKeysUnsupported", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { c.bigkeys[0].run(ctx); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("run kept going on a server that refuses MEMORY USAGE")
	}
}

// TestBigKeysOnlyBig: two 6 MB strings, a 300 KB
// list and 2,000 50-byte strings. Only the three keys a user calls big
// are exported — before, seven of the top 10 were arbitrary 120-byte keys
// — and two passes over the unchanged keyspace export the same set.
func TestBigKeysOnlyBig(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	ctx := context.Background()
	admin := r.client()
	for _, k := range []string{"blob:a", "blob:b"} {
		if err := admin.Set(ctx, k, strings.Repeat("x", 6_000_000), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	items := make([]any, 3000)
	for i := range items {
		items[i] = strings.Repeat("l", 100)
	}
	if err := admin.RPush(ctx, "queue", items...).Err(); err != nil {
		t.Fatal(err)
	}
	pipe := admin.Pipeline()
	for i := range 2000 {
		pipe.Set(ctx, "small:"+strconv.Itoa(i), strings.Repeat("s", 50), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	s := testSettings()
	s.bigkeys.enabled = true
	s.bigkeys.top = 10
	c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
	var sets []string
	for range 2 {
		if err := c.bigkeys[0].pass(ctx); err != nil {
			t.Fatal(err)
		}
		res := collectortest.Scrape(t, c, 3*time.Second)
		var keys []string
		for _, m := range res.Metrics {
			if m.Name == "stall_redis_big_key_bytes" {
				keys = append(keys, m.Labels["key"])
			}
		}
		sets = append(sets, strings.Join(keys, " "))
	}
	if sets[0] != "blob:a blob:b queue" {
		t.Errorf("exported %q, want the two blobs and the queue", sets[0])
	}
	if sets[1] != sets[0] {
		t.Errorf("second pass exported %q, first %q", sets[1], sets[0])
	}
}

// TestInsertTopStable: keys of equal size are kept in (db, name) order,
// so the exported set does not depend on the order SCAN returns them in;
// two keys with the same label are one series.
func TestInsertTopStable(t *testing.T) {
	id := func(s string) string { return s }
	var keys []bigKey
	for i := range 12 {
		keys = append(keys, bigKey{db: i % 2, key: fmt.Sprintf("k%02d", i), bytes: 100 << 10})
	}
	keys = append(keys, bigKey{key: "huge", bytes: 1 << 20})
	var want string
	for seed := range 5 {
		shuffled := slices.Clone(keys)
		rand.New(rand.NewPCG(uint64(seed), 1)).Shuffle(len(shuffled), reflect.Swapper(shuffled))
		var top []bigKey
		for _, k := range shuffled {
			top = insertTop(top, k, 5, id)
		}
		got := fmt.Sprint(top)
		if seed == 0 {
			want = got
		} else if got != want {
			t.Errorf("order %d: %s, order 0: %s", seed, got, want)
		}
	}
	if want != "[{0 huge 1048576} {0 k00 102400} {0 k02 102400} {0 k04 102400} {0 k06 102400}]" {
		t.Errorf("top 5: %s", want)
	}
	// Same label (names cut to the same 200 bytes): the larger wins.
	cut := func(string) string { return "same" }
	top := insertTop(nil, bigKey{key: "a", bytes: 5}, 3, cut)
	top = insertTop(top, bigKey{key: "b", bytes: 9}, 3, cut)
	top = insertTop(top, bigKey{key: "c", bytes: 7}, 3, cut)
	if len(top) != 1 || top[0].bytes != 9 {
		t.Errorf("same label: %+v", top)
	}
}
