package rocketmqtest_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
)

// A Net's servers answer over net.Pipe inside a synctest bubble, where a
// slow reply and a silent server cost fake time only, a connection the
// server closed looks as it does over TCP, and an address without a
// server, or a closed one, refuses.
func TestNetUnderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := n.Broker("10.0.0.1:10911", rocketmqtest.Runtime49(), rocketmqtest.Config49)
		defer b.Close()
		silent := n.Silent("10.0.0.2:10911")
		defer silent.Close()
		client := func(addr string) *remoting.Client {
			return remoting.NewClient(addr, remoting.Options{Timeout: 3 * time.Second, Dial: n.Dial})
		}
		c := client(b.Addr())
		defer c.Close()
		if kv, err := c.RuntimeInfo(context.Background()); err != nil || kv["brokerVersionDesc"] != "V4_9_7" {
			t.Fatalf("runtime info: %v, %v", kv["brokerVersionDesc"], err)
		}
		b.Delay(2 * time.Second)
		b.Inject(rocketmqtest.Slow)
		start := time.Now()
		if _, err := c.RuntimeInfo(context.Background()); err != nil || time.Since(start) != 2*time.Second {
			t.Errorf("slow reply: %v after %v, want an answer after exactly 2s", err, time.Since(start))
		}
		s := client(silent.Addr())
		defer s.Close()
		start = time.Now()
		if _, err := s.RuntimeInfo(context.Background()); err == nil || time.Since(start) != 3*time.Second {
			t.Errorf("silent server: %v after %v, want a timeout after exactly 3s", err, time.Since(start))
		}
		if silent.RequestCount(remoting.GetBrokerRuntimeInfo) != 1 {
			t.Errorf("the silent server did not read the request")
		}
		// A restarted broker: the client's idle connection was closed, the
		// request goes out once more on a new one, as over TCP.
		b.CloseConns()
		if _, err := c.RuntimeInfo(context.Background()); err != nil || b.Accepted() != 2 {
			t.Errorf("after the server closed the connection: %v, %d connections accepted, want an answer on a second", err, b.Accepted())
		}
		b.Close()
		for _, addr := range []string{b.Addr(), "10.0.0.3:10911"} {
			r := client(addr)
			if _, err := r.RuntimeInfo(context.Background()); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s: err = %v, want ECONNREFUSED", addr, err)
			}
			r.Close()
		}
	})
}
