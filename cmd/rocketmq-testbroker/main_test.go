package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
)

// The simulator drives a stall, rolls the distribution window and writes
// the log lines the exporter's follower reads.
func TestSimulator(t *testing.T) {
	rt := rocketmqtest.Runtime49()
	rt["putMessageDistributeTime"] = "null"
	b, err := rocketmqtest.NewBroker("127.0.0.1:0", rt, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	t0 := time.Unix(1_800_000_000, 0)
	s := &simulator{brokers: []*rocketmqtest.Broker{b}, stallEvery: 10 * time.Second, stallFor: 1500 * time.Millisecond, start: t0,
		store: openLog(filepath.Join(dir, "store.log")), water: openLog(filepath.Join(dir, "watermark.log"))}
	s.lastRoll, s.lastWater, s.nextStall = t0, t0, t0.Add(10*time.Second)
	c := remoting.NewClient(b.Addr(), remoting.Options{})
	defer c.Close()
	get := func() map[string]string {
		kv, err := c.RuntimeInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	for now := t0; now.Before(t0.Add(11 * time.Second)); now = now.Add(100 * time.Millisecond) {
		s.tick(now)
	}
	kv := get()
	if kv["pageCacheLockTimeMills"] == "0" || kv["putMessageDistributeTime"] != "null" {
		t.Errorf("during the stall: lock %s, distribution %q", kv["pageCacheLockTimeMills"], kv["putMessageDistributeTime"])
	}
	for now := t0.Add(11 * time.Second); now.Before(t0.Add(61 * time.Second)); now = now.Add(100 * time.Millisecond) {
		s.tick(now)
	}
	kv = get()
	if !strings.HasPrefix(kv["putMessageDistributeTime"], "[<=0ms]:") || !strings.Contains(kv["putMessageDistributeTime"], "[1~2s]:") {
		t.Errorf("after a minute: distribution %q", kv["putMessageDistributeTime"])
	}
	store, _ := os.ReadFile(filepath.Join(dir, "store.log"))
	water, _ := os.ReadFile(filepath.Join(dir, "watermark.log"))
	if !strings.Contains(string(store), "[NOTIFYME]putMessage in lock cost time(ms)=15") || !strings.Contains(string(store), "[PAGECACHERT] TotalPut") {
		t.Errorf("store.log:\n%s", store)
	}
	if !strings.Contains(string(water), "[WATERMARK] Send Queue Size: ") {
		t.Errorf("watermark.log:\n%s", water)
	}
	for ms, want := range map[time.Duration]int{0: 0, 9 * time.Millisecond: 1, 10 * time.Millisecond: 2, 1500 * time.Millisecond: 7, 10 * time.Second: 12} {
		if got := bucketOf(ms); got != want {
			t.Errorf("bucketOf(%v) = %d, want %d", ms, got, want)
		}
	}
}
