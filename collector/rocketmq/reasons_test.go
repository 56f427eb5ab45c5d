package rocketmq

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// A broker that is down says why, in stall_rocketmq_down_reason and in the
// one warning logged when it goes down: an ACL refusal is not "not
// answering" (NO_PERMISSION was once logged as "broker not answering").
func TestDownReasons(t *testing.T) {
	aclException := "org.apache.rocketmq.acl.common.AclException: [10003:signature-failed] unable to calculate a request signature. error=Check signature failed for accessKey=exporter, org.apache.rocketmq.acl.plain.PlainAccessValidator.validate(PlainAccessValidator.java:221)"
	for _, tc := range []struct {
		name   string
		setup  func(b *rocketmqtest.Broker) string // returns the address to scrape
		reason string
		log    string
	}{
		{"NO_PERMISSION", func(b *rocketmqtest.Broker) string {
			b.RequireACL(&remoting.Credentials{AccessKey: "exporter", SecretKey: "other"})
			return b.Addr()
		}, "permission", "rocketmq broker refused GET_BROKER_RUNTIME_INFO: access denied (ACL)"},
		{"4.x ACL hook exception", func(b *rocketmqtest.Broker) string {
			b.ErrorReply(remoting.SystemError, aclException)
			b.Inject(rocketmqtest.ErrorReply)
			return b.Addr()
		}, "permission", "rocketmq broker refused GET_BROKER_RUNTIME_INFO: access denied (ACL)"},
		{"SYSTEM_BUSY", func(b *rocketmqtest.Broker) string { b.Inject(rocketmqtest.Busy); return b.Addr() },
			"busy", "rocketmq broker answered GET_BROKER_RUNTIME_INFO with SYSTEM_BUSY"},
		{"not supported", func(b *rocketmqtest.Broker) string { b.Inject(rocketmqtest.Unsupported); return b.Addr() },
			"unsupported", "rocketmq broker does not support GET_BROKER_RUNTIME_INFO"},
		{"other error", func(b *rocketmqtest.Broker) string {
			b.ErrorReply(remoting.SystemError, "java.lang.NullPointerException")
			b.Inject(rocketmqtest.ErrorReply)
			return b.Addr()
		}, "error_reply", "rocketmq broker answered GET_BROKER_RUNTIME_INFO with an error"},
		{"garbage", func(b *rocketmqtest.Broker) string { b.Inject(rocketmqtest.Garbage); return b.Addr() },
			"protocol", "rocketmq broker sent a reply that is not a remoting frame"},
		{"huge", func(b *rocketmqtest.Broker) string { b.Inject(rocketmqtest.Huge); return b.Addr() },
			"reply_too_large", "rocketmq broker sent a reply frame over --rocketmq.max-frame-bytes"},
		{"slow", func(b *rocketmqtest.Broker) string { b.Inject(rocketmqtest.Slow); return b.Addr() },
			"timeout", "rocketmq broker not answering within --rocketmq.timeout"},
		{"refused", func(b *rocketmqtest.Broker) string { b.Close(); return b.Addr() },
			"refused", "rocketmq broker refused the connection"},
		{"dns", func(*rocketmqtest.Broker) string { return "no-such-broker.invalid:10911" },
			"dns", "rocketmq broker host name does not resolve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
			b.Delay(5 * time.Second)
			addr := tc.setup(b)
			cfg := collectortest.Config("rocketmq", nil)
			h := recordLogs(&cfg)
			c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+addr, "--rocketmq.timeout=500ms"))
			err := collectortest.Compare(t, c, `
stall_rocketmq_down_reason{broker="`+addr+`",broker_id="",reason="`+tc.reason+`",rocketmq_cluster=""} 1
stall_rocketmq_up{broker="`+addr+`",broker_id="",rocketmq_cluster=""} 0
`, "stall_rocketmq_up", "stall_rocketmq_down_reason")
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err = %v, want it to name the reason %s", err, tc.reason)
			}
			logs := h.Take()
			if len(logs) != 1 || !strings.HasPrefix(logs[0], "WARN "+tc.log) || !strings.Contains(logs[0], "reason="+tc.reason) {
				t.Errorf("logged %q, want one warning starting %q with reason=%s", logs, tc.log, tc.reason)
			}
		})
	}
}

// The reason is absent while the broker answers and follows it when it
// changes; a changed reason is logged (an ACL change on a broker that was
// also restarting), at most once a minute, and the same reason is not
// logged again.
func TestDownReasonFollowsTheBroker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n rocketmqtest.Net
		b := n.Broker("10.0.0.1:10911", rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\n")
		defer b.Close()
		cfg := collectortest.Config("rocketmq", nil)
		h := recordLogs(&cfg)
		c := newScraper(cfg, pipeOptions(t, &n, "--rocketmq.broker="+b.Addr(), "--rocketmq.timeout=500ms"))
		defer c.close()
		reasons := func() string {
			t.Helper()
			got := collectortest.Expose(t, context.Background(), c).Families("stall_rocketmq_down_reason")
			collectortest.Advance(15 * time.Second)
			return got
		}
		if got := strings.TrimSpace(reasons()); got != "" {
			t.Errorf("up: %s", got)
		}
		// busy, then alternating with unsupported every 15 s: the change is
		// logged once, then at most once a minute.
		b.Inject(rocketmqtest.Busy, rocketmqtest.Busy, rocketmqtest.Unsupported, rocketmqtest.Busy, rocketmqtest.Unsupported,
			rocketmqtest.Busy, rocketmqtest.Unsupported)
		for _, want := range []string{"busy", "busy", "unsupported", "busy", "unsupported", "busy", "unsupported"} {
			if got := reasons(); !strings.Contains(got, `reason="`+want+`",rocketmq_cluster="c"} 1`) {
				t.Errorf("got %s, want reason %s", got, want)
			}
		}
		if got := strings.TrimSpace(reasons()); got != "" {
			t.Errorf("recovered: %s", got)
		}
		checkLogs(t, "busy, then alternating with unsupported", h.Take(), []string{
			"WARN rocketmq broker answered GET_BROKER_RUNTIME_INFO with SYSTEM_BUSY;",                                                                                    // 15 s: down
			"WARN rocketmq broker does not support GET_BROKER_RUNTIME_INFO (REQUEST_CODE_NOT_SUPPORTED): is this a broker's remoting port, not a Proxy or name server?;", // 75 s
			"INFO rocketmq broker answering again",
		})
	})
}

// A broker's error remark is the peer's text: a 100 KB one must not become
// a 100 KB log line or error (lines of 100,270 and 101,285 characters were
// seen), and a control character in it stays escaped.
func TestLongRemarkIsBounded(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\n")
	b.ErrorReply(remoting.SystemError, "\x1b[2J"+strings.Repeat("x", 100_000))
	b.Inject(rocketmqtest.ErrorReply)
	cfg := collectortest.Config("rocketmq", nil)
	h := recordLogs(&cfg)
	c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+b.Addr()))
	e := collectortest.Expose(t, context.Background(), c)
	if e.Err == nil || len(e.Err.Error()) > 1000 || strings.Contains(e.Err.Error(), "\x1b") {
		t.Errorf("the scrape's error is %d bytes (or carries the raw ESC), want at most 1000", len(e.Err.Error()))
	}
	for _, r := range h.Take() {
		if len(r) > 1000 || strings.Contains(r, "\x1b") {
			t.Errorf("log record of %d bytes (or with the raw ESC): %.200q", len(r), r)
		}
	}
}

// An account that may read runtime info but not the config: the broker is
// up, the config series are absent, and that is said at warn, not hidden
// at debug, once while it lasts; the end of it is said at info.
func TestConfigRefusedByACL(t *testing.T) {
	b := startBroker(t, rocketmqtest.Runtime49(), "brokerName=b\nbrokerClusterName=c\nbrokerId=0\nwarmMapedFileEnable=true\n")
	b.ErrorReply(remoting.NoPermission, "no permission to GET_BROKER_CONFIG")
	cfg := collectortest.Config("rocketmq", nil)
	h := recordLogs(&cfg)
	c := newScraper(cfg, testOptions(t, "--rocketmq.broker="+b.Addr()))
	for range 2 {
		b.Inject(rocketmqtest.None, rocketmqtest.ErrorReply) // runtime info answered, config refused
		err := collectortest.Compare(t, c, `
stall_rocketmq_up{broker="`+b.Addr()+`",broker_id="",rocketmq_cluster=""} 1
`, "stall_rocketmq_up", "stall_rocketmq_down_reason", "stall_rocketmq_broker_config_info")
		if err != nil {
			t.Errorf("err = %v; a refused config read does not fail the broker", err)
		}
	}
	checkLogs(t, "config refused twice", h.Take(), []string{
		"WARN rocketmq broker refused GET_BROKER_CONFIG: access denied (ACL); stall_rocketmq_broker_config_* are absent until the account may read the config broker=" + b.Addr() + " reason=permission",
	})
	// Allowed again: the config is read and labels the broker.
	collectortest.Compare(t, c, `
stall_rocketmq_up{broker="b",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up")
	checkLogs(t, "config allowed again", h.Take(), []string{"INFO rocketmq broker answers GET_BROKER_CONFIG again broker=" + b.Addr()})
}

// Text a name server or broker chooses stays bounded and printable: a
// 100 KB broker address is bad input (counted, logged short), a version
// with a NUL becomes a label without it.
func TestPeerTextBounded(t *testing.T) {
	rt := rocketmqtest.Runtime49()
	rt["brokerVersionDesc"] = "V4_9_7\x00\x1b[0m" // a NUL and an escape sequence
	good := startBroker(t, rt, "")
	long := "10.0.0.1:" + strings.Repeat("9", 100_000)
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", []remoting.BrokerAddr{
		{Cluster: "c", Name: "a", ID: 0, Addr: good.Addr()}, {Cluster: "c", Name: "b", ID: 0, Addr: long}})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	cfg := collectortest.Config("rocketmq", nil)
	h := recordLogs(&cfg)
	c := newScraper(cfg, testOptions(t, "--rocketmq.namesrv="+ns.Addr()))
	e := collectortest.Expose(t, context.Background(), c)
	e.Compare(t, `
stall_rocketmq_broker_info{address="`+good.Addr()+`",broker="a",broker_id="0",rocketmq_cluster="c",version="V4_9_7`+"\uFFFD\uFFFD"+`[0m"} 1
stall_rocketmq_up{broker="a",broker_id="0",rocketmq_cluster="c"} 1
`, "stall_rocketmq_up", "stall_rocketmq_broker_info")
	if strings.ContainsRune(e.Text, 0) {
		t.Error("the exposition carries a NUL")
	}
	if e.Err != nil {
		t.Errorf("err = %v", e.Err)
	}
	if n := cfg.Problems.Count(); n != 1 {
		t.Errorf("%d problems, want 1 (the address)", n)
	}
	for _, r := range h.Take() {
		if len(r) > 1000 {
			t.Errorf("log record of %d bytes: %.200q", len(r), r)
		}
	}
}
