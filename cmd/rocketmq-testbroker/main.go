// Command rocketmq-testbroker runs the fake RocketMQ broker and name server
// of collector/rocketmq/rocketmqtest for a demo of stall_exporter's rocketmq
// collector without a real broker:
//
//	go run ./cmd/rocketmq-testbroker -listen 127.0.0.1:10911 -namesrv 127.0.0.1:9876
//	./stall_exporter --rocketmq.namesrv 127.0.0.1:9876
//
// The broker's runtime info moves like a loaded broker's: puts accumulate,
// the putMessageDistributeTime window rolls every 60 s ("null" during the
// first minute, as after a real boot), and every -stall-every a CommitLog
// lock stall of -stall-for holds pageCacheLockTimeMills up and lets the send
// queue back up. With -log-dir it also writes store.log and watermark.log
// lines (in GMT+8, as the broker does) for --rocketmq.log-dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
)

func main() {
	var (
		listen     = flag.String("listen", "127.0.0.1:10911", "broker (master) remoting address")
		slave      = flag.String("slave", "", "also run a slave (brokerId 1) on this address")
		namesrv    = flag.String("namesrv", "127.0.0.1:9876", "name server address; empty runs no name server")
		cluster    = flag.String("cluster", "DefaultCluster", "cluster name")
		name       = flag.String("name", "broker-a", "broker name")
		version    = flag.String("version", "4.9", "runtime-info key set: 4.9 (4.9.7) or 5 (5.3.3)")
		binary     = flag.Bool("binary", false, "answer with ROCKETMQ binary headers (as -Drocketmq.serialize.type=ROCKETMQ)")
		stallEvery = flag.Duration("stall-every", 45*time.Second, "start a CommitLog lock stall this often; 0 never")
		stallFor   = flag.Duration("stall-for", 1500*time.Millisecond, "how long each stall holds the lock")
		logDir     = flag.String("log-dir", "", "write store.log and watermark.log here (for --rocketmq.log-dir)")
		accessKey  = flag.String("acl-access-key", "", "require requests signed with this access key (and -acl-secret-key)")
		secretKey  = flag.String("acl-secret-key", "", "secret key for -acl-access-key")
	)
	flag.Parse()

	rt, err := keySet(*version)
	if err != nil {
		log.Fatal(err)
	}
	rt["putMessageDistributeTime"] = "null"
	config := fmt.Sprintf("brokerClusterName=%s\nbrokerName=%s\nbrokerId=%%d\n%s", *cluster, *name, rocketmqtest.Config49)

	var brokers []*rocketmqtest.Broker
	var topo []remoting.BrokerAddr
	for id, addr := range []string{*listen, *slave} {
		if addr == "" {
			continue
		}
		text := fmt.Sprintf(config, id)
		if id > 0 {
			text = strings.Replace(text, "brokerRole=ASYNC_MASTER", "brokerRole=SLAVE", 1)
		}
		b, err := rocketmqtest.NewBroker(addr, rt, text)
		if err != nil {
			log.Fatalf("broker on %s: %v", addr, err)
		}
		b.SetBinary(*binary)
		if *accessKey != "" {
			b.RequireACL(&remoting.Credentials{AccessKey: *accessKey, SecretKey: *secretKey})
		}
		brokers = append(brokers, b)
		topo = append(topo, remoting.BrokerAddr{Cluster: *cluster, Name: *name, ID: int64(id), Addr: b.Addr()})
		log.Printf("broker %s id %d listening on %s (key set %s, binary %v)", *name, id, b.Addr(), *version, *binary)
	}
	if *namesrv != "" {
		ns, err := rocketmqtest.NewNameServer(*namesrv, topo)
		if err != nil {
			log.Fatalf("name server on %s: %v", *namesrv, err)
		}
		ns.SetBinary(*binary)
		defer ns.Close()
		log.Printf("name server listening on %s", ns.Addr())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sim := &simulator{brokers: brokers, stallEvery: *stallEvery, stallFor: *stallFor, start: time.Now()}
	if *logDir != "" {
		if err := os.MkdirAll(*logDir, 0o755); err != nil {
			log.Fatal(err)
		}
		sim.store = openLog(filepath.Join(*logDir, "store.log"))
		sim.water = openLog(filepath.Join(*logDir, "watermark.log"))
		log.Printf("writing store.log and watermark.log in %s", *logDir)
	}
	sim.run(ctx)
	for _, b := range brokers {
		b.Close()
	}
}

// keySet is the runtime-info table of -version: rocketmqtest.Runtime49 for
// "4", "4.9", rocketmqtest.Runtime5 for "5", "5.x".
func keySet(name string) (map[string]string, error) {
	switch strings.TrimPrefix(strings.ToLower(name), "v") {
	case "4", "4.9", "4.9.x":
		return rocketmqtest.Runtime49(), nil
	case "5", "5.x", "5.3":
		return rocketmqtest.Runtime5(), nil
	}
	return nil, fmt.Errorf("unknown key set %q (want 4.9 or 5)", name)
}

func openLog(path string) *os.File {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	return f
}

// simulator moves the runtime info every 100 ms.
type simulator struct {
	brokers      []*rocketmqtest.Broker
	stallEvery   time.Duration
	stallFor     time.Duration
	start        time.Time
	store, water *os.File

	puts       uint64
	window     [13]uint64
	stallStart time.Time
	nextStall  time.Time
	lastRoll   time.Time
	lastWater  time.Time
}

var gmt8 = time.FixedZone("GMT+8", 8*3600)

func (s *simulator) logf(f *os.File, level, thread, format string, a ...any) {
	if f == nil {
		return
	}
	fmt.Fprintf(f, "%s %s %s - %s\n", time.Now().In(gmt8).Format("2006-01-02 15:04:05"), level, thread, fmt.Sprintf(format, a...))
}

func (s *simulator) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	s.lastRoll, s.lastWater = s.start, s.start
	if s.stallEvery > 0 {
		s.nextStall = s.start.Add(s.stallEvery)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.tick(now)
		}
	}
}

func (s *simulator) tick(now time.Time) {
	stalled := !s.stallStart.IsZero()
	if !stalled && !s.nextStall.IsZero() && now.After(s.nextStall) {
		s.stallStart, stalled = now, true
	}
	lockMs, headWait, queue := int64(0), int64(rand.IntN(5)), rand.IntN(3)
	if stalled {
		held := now.Sub(s.stallStart)
		lockMs, headWait, queue = held.Milliseconds(), held.Milliseconds(), int(held.Milliseconds()/2)
		if held >= s.stallFor {
			s.window[bucketOf(held)] += uint64(queue) + 1
			s.logf(s.store, "WARN", "SendMessageThread_1", "[NOTIFYME]putMessage in lock cost time(ms)=%d, bodyLength=512 AppendMessageResult=AppendMessageResult{status=PUT_OK}", held.Milliseconds())
			s.stallStart, s.nextStall = time.Time{}, now.Add(s.stallEvery)
		}
	} else {
		n := uint64(80 + rand.IntN(20))
		s.puts += n
		s.window[0] += n / 4
		s.window[1] += n - n/4 - 1
		s.window[2]++
	}
	rolled := ""
	if now.Sub(s.lastRoll) >= time.Minute {
		rolled = rocketmqtest.Distribution(s.window)
		s.logf(s.store, "INFO", "StoreStatsService", "[PAGECACHERT] TotalPut %d, PutMessageDistributeTime %s", total(s.window), rolled)
		s.window, s.lastRoll = [13]uint64{}, now
	}
	if now.Sub(s.lastWater) >= time.Second {
		s.logf(s.water, "INFO", "BrokerControllerScheduledThread1", "[WATERMARK] Send Queue Size: %d SlowTimeMills: %d", queue, headWait)
		s.logf(s.water, "INFO", "BrokerControllerScheduledThread1", "[WATERMARK] Pull Queue Size: 0 SlowTimeMills: 0")
		s.lastWater = now
	}
	for _, b := range s.brokers {
		b.Update(func(rt map[string]string) {
			rt["pageCacheLockTimeMills"] = strconv.FormatInt(lockMs, 10)
			rt["sendThreadPoolQueueHeadWaitTimeMills"] = strconv.FormatInt(headWait, 10)
			rt["sendThreadPoolQueueSize"] = strconv.Itoa(queue)
			rt["putMessageTimesTotal"] = strconv.FormatUint(s.puts, 10)
			rt["putMessageSizeTotal"] = strconv.FormatUint(s.puts*800, 10)
			rt["remainHowManyDataToFlush"] = fmt.Sprintf("%.1f MiB", float64(rand.IntN(400))/10)
			if rolled != "" {
				rt["putMessageDistributeTime"] = rolled
			}
		})
	}
}

func bucketOf(d time.Duration) int {
	ms := d.Milliseconds()
	for i, limit := range []int64{1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000} {
		if ms < limit {
			return i
		}
	}
	return 12
}

func total(w [13]uint64) uint64 {
	var n uint64
	for _, c := range w {
		n += c
	}
	return n
}
