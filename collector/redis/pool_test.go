package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// raiseOpenFiles lifts this process's open-files limit (inherited by the
// redis-server it starts) to at least n, so the test does not depend on the
// shell's soft ulimit; raising the hard limit needs CAP_SYS_RESOURCE.
func raiseOpenFiles(t testing.TB, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= n {
		return
	}
	old := lim
	lim.Cur = n
	if lim.Max < n {
		lim.Max = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Logf("cannot raise the open-files limit to %d: %v", n, err)
		return
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// TestPoolGrouping3000: the pool grouping on a real server: 3,000
// connections named the way Kubernetes pods, StatefulSets, worker fleets,
// UUID-named processes and hosts name them. 40 of the 150 pods of one
// Deployment, catalog-reader, have a 5 MiB GET reply queued that they do
// not read (incident 7's shape: omem 5 MiB, oll 1), as have 10 of 300
// numbered consumers. With the default grouping, catalog-reader must be
// the top group with its 150 clients and consumer the second with 300 —
// by name each pod was its own group, by host all 3,000 were one.
func TestPoolGrouping3000(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 3,000-connection test")
	}
	raiseOpenFiles(t, 12000) // 3,000 connections on each side, and redis-server's own margin
	r := startRedis(t, "--maxclients", "5000")
	admin := r.client()
	ctx := context.Background()
	// redis-server lowers maxclients to what its open-files limit allows.
	if v, _ := admin.ConfigGet(ctx, "maxclients").Result(); v["maxclients"] != "5000" {
		t.Fatalf("redis-server runs with maxclients %s: raise the open-files limit (ulimit -n) above 12,000 to run this test", v["maxclients"])
	}
	if err := admin.Set(ctx, "big", strings.Repeat("c", bigValueSize), 0).Err(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 17))
	random := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	const k8s = "bcdfghjklmnpqrstvwxz2456789"
	pod := func(deployment, hash string) string { return deployment + "-" + hash + "-" + random(k8s, 5) }
	uuid := func() string {
		h := random("0123456789abcdef", 32)
		return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}
	open := func(name, key string, gets int) {
		if name == "" {
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return
		}
		stuckReader(t, r.addr, name, key, gets)
	}
	n := 0
	for i := range 150 {
		open(pod("catalog-reader", "5f7b9c8d6d"), "big", b2i(i < 40))
		n++
	}
	for i := range 300 {
		open(fmt.Sprintf("consumer-%d", i), "big", b2i(i < 10))
		n++
	}
	for range 600 { // two connections per pod
		name := pod("cart", "6b8f7d9c4d")
		open(name, "", 0)
		open(name, "", 0)
		n += 2
	}
	for i := range 300 {
		open(fmt.Sprintf("session-store-%d", i), "", 0) // StatefulSet
		n++
	}
	for i := range 300 {
		open(fmt.Sprintf("worker_%d", i), "", 0)
		n++
	}
	for range 200 {
		open("billing-"+uuid(), "", 0)
		n++
	}
	for i := range 200 {
		open(fmt.Sprintf("batch-%02d.dc1.example.com", i%50), "", 0)
		n++
	}
	for range 350 {
		open("", "", 0)
		n++
	}
	if n != 3000 {
		t.Fatalf("%d connections", n)
	}
	collectortest.WaitFor(t, 30*time.Second, "3,000 clients, 50 of them with a reply queued", func() error {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if st := clientListStats(list, replies.GroupByPool); st.Clients < 3000 || st.PendingClients < 50 {
			return fmt.Errorf("%d clients, %d with a reply queued", st.Clients, st.PendingClients)
		}
		return nil
	})

	// Every pool, not only the exported ones, is recovered from the names
	// Redis reports.
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m) name=(\S*)`).FindAllStringSubmatch(list, -1) {
		pools[replies.PoolOf(m[1])]++
	}
	for pool, want := range map[string]int{"catalog-reader": 150, "consumer": 300, "cart": 1200, "session-store": 300,
		"worker": 300, "billing": 200, "batch": 200} {
		if pools[pool] != want {
			t.Errorf("pool %s: %d clients, want %d (all pools: %v)", pool, pools[pool], want, pools)
		}
	}

	scrape := func(by replies.GroupBy) collectortest.Result {
		s := testSettings()
		s.clMode = "always"
		s.groupBy = by
		s.timeout = 10 * time.Second
		c := newTestScraper(t, s, collectortest.Config("redis", nil), r.addr)
		res := collectortest.Scrape(t, c, 15*time.Second)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res
	}
	res := scrape(testSettings().groupBy) // the default
	groups := 0
	for _, m := range res.Metrics {
		if m.Name == "stall_redis_client_group_output_buffer_bytes" {
			groups++
			t.Logf("group %-16s clients %5.0f  omem %6.1f MiB", m.Labels["group"],
				res.Must(t, "stall_redis_client_group_clients", "group", m.Labels["group"]), m.Value/(1<<20))
		}
	}
	if top := firstGroup(res, "stall_redis_client_group_output_buffer_bytes", "group"); top != "catalog-reader" {
		t.Errorf("top group %q, want catalog-reader", top)
	}
	if v := res.Must(t, "stall_redis_client_group_clients", "group", "catalog-reader"); v != 150 {
		t.Errorf("catalog-reader has %v clients, want 150", v)
	}
	if v := res.Must(t, "stall_redis_client_group_clients", "group", "consumer"); v != 300 {
		t.Errorf("consumer has %v clients, want 300", v)
	}
	if v := res.Must(t, "stall_redis_client_group_output_buffer_bytes", "group", "catalog-reader"); v < 40*bigValueSize {
		t.Errorf("catalog-reader holds %v output buffer bytes, want ≥ 40 × 5 MiB", v)
	}
	if groups > testSettings().topK+1 {
		t.Errorf("%d group series, more than top-k + other", groups)
	}

	// What the other groupings made of the same clients. By name, each
	// pod is a group of its own: every exported group is one stuck client
	// (a catalog-reader pod or a numbered consumer, 5 MiB queued each),
	// and the pools' size is lost.
	byName := scrape(replies.GroupByName)
	stuck := regexp.MustCompile(`^(catalog-reader-5f7b9c8d6d-[` + k8s + `]{5}|consumer-\d+)$`)
	named := 0
	for _, m := range byName.Metrics {
		if m.Name != "stall_redis_client_group_output_buffer_bytes" || m.Labels["group"] == replies.OtherGroup {
			continue
		}
		named++
		g := m.Labels["group"]
		if !stuck.MatchString(g) || m.Value < bigValueSize {
			t.Errorf("by name: group %q holds %v bytes, want a stuck reader's 5 MiB", g, m.Value)
		}
		if v := byName.Must(t, "stall_redis_client_group_clients", "group", g); v != 1 {
			t.Errorf("by name: group %q has %v clients, want 1", g, v)
		}
	}
	if named != testSettings().topK {
		t.Errorf("by name: %d groups exported, want the top %d", named, testSettings().topK)
	}
	// By host, every client is one group: they all connect from 127.0.0.1.
	byHost := scrape(replies.GroupByHost)
	for _, m := range byHost.Metrics {
		if m.Name == "stall_redis_client_group_clients" && m.Labels["group"] != "127.0.0.1" && m.Value != 0 {
			t.Errorf("by host: group %q has %v clients, want all of them in 127.0.0.1", m.Labels["group"], m.Value)
		}
	}
	connected := byHost.Must(t, "stall_redis_clients_connected")
	if v := byHost.Must(t, "stall_redis_client_group_clients", "group", "127.0.0.1"); v < 3000 || v != connected {
		t.Errorf("by host: 127.0.0.1 has %v clients, want all %v connected (at least 3,000)", v, connected)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
