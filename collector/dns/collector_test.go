package dns

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/procfs"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// testOptions parses args as the exporter's command line would, on an
// application of the test's own.
func testOptions(t testing.TB, args ...string) options {
	t.Helper()
	app := kingpin.New("test", "")
	f := registerFlags(app)
	if _, err := app.Parse(args); err != nil {
		t.Fatal(err)
	}
	o, err := f.validate()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// testConfig is the configuration the exporter gives the collector, on the
// machine's /proc; logs (nil: discarded) get its log lines.
func testConfig(t testing.TB, logs *collectortest.Logs) collector.Config {
	t.Helper()
	cfg := collectortest.Config("dns", logs)
	fs, err := procfs.NewFS(cfg.Paths.Procfs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ProcFS = fs
	return cfg
}

// gather scrapes the collector through a pedantic registry (which also
// checks the exposition is consistent) into the text exposition's sample
// lines, `name{label="value",...}` → value; a histogram gives its _count
// and _sum lines too.
func gather(t testing.TB, c *Collector) map[string]float64 {
	t.Helper()
	e := collectortest.Expose(t, context.Background(), c)
	out := map[string]float64{}
	for _, l := range strings.Split(e.Text, "\n") {
		i := strings.LastIndexByte(l, ' ')
		if l == "" || l[0] == '#' || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("exposition line %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// fakeSource is a capture that delivers the packets sent on pkts, or
// fails every read with fail.
type fakeSource struct {
	pkts chan []byte
	fail error
}

func (f *fakeSource) read(deadline time.Time, fn func([]byte, int64)) (time.Time, error) {
	if f.fail != nil {
		return time.Time{}, f.fail
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case p := <-f.pkts:
			fn(p, time.Now().UnixNano())
		case <-timer.C:
			return time.Now(), nil
		}
	}
}

func (f *fakeSource) stats() (uint64, uint64) { return 0, 0 }
func (f *fakeSource) Close() error            { return nil }

// runCollector runs c until the test ends.
func runCollector(t testing.TB, c *Collector) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestFlagsRefuseBadValues: every invalid value stops the start with an
// error naming its flag.
func TestFlagsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--dns.timeout=0s", "--dns.timeout must be positive"},
		{"--dns.proc-interval=-1s", "--dns.proc-interval must be positive"},
		{"--dns.max-pending=0", "--dns.max-pending must be at least 1"},
		{"--dns.max-tcp-flows=0", "--dns.max-tcp-flows must be at least 1"},
		{"--dns.max-resolvers=0", "--dns.max-resolvers must be at least 1"},
		{"--dns.max-processes=-3", "--dns.max-processes must be at least 1"},
	} {
		app := kingpin.New("test", "")
		f := registerFlags(app)
		if _, err := app.Parse([]string{tc.arg}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.arg, err, tc.want)
		}
	}
}

// TestCaptureReopensWithBackoff guards the reopen loop: a capture that
// cannot be opened is retried after 1 s, 2 s, 4 s … at most 1 min apart;
// one that opened and then failed is retried after 1 s again. The
// failures are logged through the state log: a warning at the first, and
// again when the reason changes a minute or more later.
func TestCaptureReopensWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &collectortest.Logs{}
		o := testOptions(t, "--dns.attribution=none")
		start := time.Now()
		var at []time.Duration
		o.open = func() (packetSource, error) {
			at = append(at, time.Since(start))
			switch len(at) {
			case 9:
				return &fakeSource{fail: errors.New("the interface went away")}, nil
			default:
				return nil, errors.New("no CAP_NET_RAW")
			}
		}
		c := newCollector(o, testConfig(t, logs))
		runCollector(t, c)
		collectortest.Advance(200 * time.Second)
		synctest.Wait()
		if got := gather(t, c)["stall_dns_capture_up"]; got != 0 {
			t.Errorf("stall_dns_capture_up %v while failing, want 0", got)
		}
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			gaps = append(gaps, (at[i]-at[i-1]).Round(time.Millisecond)/time.Second)
		}
		want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 1, 2, 4, 8}
		if len(gaps) != len(want) {
			t.Fatalf("%d attempts in 200 s at %v, want %d", len(at), at, len(want)+1)
		}
		for i := range want {
			if gaps[i] != want[i] {
				t.Fatalf("seconds between attempts %v, want %v", gaps, want)
			}
		}
		if n := logs.Count("warn"); n != 2 {
			t.Errorf("%d warnings, want 2 (cannot be opened, then stopped):\n%s", n, logs)
		}
	})
}

// TestTimeoutCountedWithoutTraffic guards the expiry of the capture loop:
// a query that gets no response counts as timed out within expiryPeriod
// of --dns.timeout, although no later packet wakes the capture.
func TestTimeoutCountedWithoutTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{pkts: make(chan []byte)}
		o := testOptions(t, "--dns.attribution=none", "--dns.timeout=5s")
		o.open = func() (packetSource, error) { return src, nil }
		c := newCollector(o, testConfig(t, nil))
		runCollector(t, c)
		src.pkts <- udpPacket("192.0.2.10", 40000, "192.0.2.53", 53, query(t, 1, "9.2.0.192.in-addr.arpa.", dnsmessage.TypePTR))
		timeouts := `stall_dns_timeouts_total{qtype="PTR"}`
		collectortest.Advance(5*time.Second - time.Millisecond)
		synctest.Wait()
		if got := gather(t, c); got[timeouts] != 0 || got["stall_dns_pending_queries"] != 1 {
			t.Fatalf("before --dns.timeout: timeouts %v, pending %v; want 0 and 1", got[timeouts], got["stall_dns_pending_queries"])
		}
		collectortest.Advance(expiryPeriod + time.Millisecond)
		synctest.Wait()
		if got := gather(t, c); got[timeouts] != 1 || got["stall_dns_pending_queries"] != 0 {
			t.Errorf("after --dns.timeout: timeouts %v, pending %v; want 1 and 0", got[timeouts], got["stall_dns_pending_queries"])
		}
	})
}
