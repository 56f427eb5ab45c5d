package remoting_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/rocketmqtest"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The two worked examples of the reference: GET_BROKER_RUNTIME_INFO, opaque 1.
const (
	workedJSON = `00 00 00 3f 00 00 00 3b 7b 22 63 6f 64 65 22 3a 32 38 2c 22 66 6c 61 67 22 3a 30 2c 22 6c 61 6e 67 75
61 67 65 22 3a 22 47 4f 22 2c 22 6f 70 61 71 75 65 22 3a 31 2c 22 76 65 72 73 69 6f 6e 22 3a 30 7d`
	workedBinary = `00 00 00 19 01 00 00 15 00 1c 09 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00`
)

func TestEncodeWorkedExamples(t *testing.T) {
	for _, tc := range []struct {
		ser  remoting.Serialization
		want string
	}{{remoting.JSON, workedJSON}, {remoting.Binary, workedBinary}} {
		got, err := remoting.Encode(&remoting.Command{Code: 28, Language: "GO", Opaque: 1, Serialization: tc.ser})
		if err != nil {
			t.Fatal(err)
		}
		if want := unhex(t, tc.want); !bytes.Equal(got, want) {
			t.Errorf("%v: got\n% x\nwant\n% x", tc.ser, got, want)
		}
		c, err := remoting.ReadCommand(bytes.NewReader(got), 0)
		if err != nil {
			t.Fatalf("%v: %v", tc.ser, err)
		}
		if c.Code != 28 || c.Opaque != 1 || c.Language != "GO" || c.Flag != 0 || c.Serialization != tc.ser || c.Body != nil {
			t.Errorf("%v: decoded %+v", tc.ser, c)
		}
	}
}

func TestRoundTripBothSerializations(t *testing.T) {
	for _, ser := range []remoting.Serialization{remoting.JSON, remoting.Binary} {
		in := &remoting.Command{Code: 2, Language: "JAVA", Version: 453, Opaque: -7, Flag: remoting.FlagResponse,
			Remark: "[TIMEOUT_CLEAN_QUEUE]broker busy", ExtFields: map[string]string{"a": "1", "topic": "TopicTest"},
			Body: []byte(`{"table":{}}`), Serialization: ser}
		frame, err := remoting.Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := remoting.Decode(frame[4:])
		if err != nil {
			t.Fatalf("%v: %v", ser, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%v: round trip\n got %+v\nwant %+v", ser, out, in)
		}
		if !out.IsResponse() {
			t.Errorf("%v: response bit lost", ser)
		}
	}
}

func TestJSONHeaderIgnoresUnknownFieldsAndOrder(t *testing.T) {
	h := `{"serializeTypeCurrentRPC":"JSON","version":453,"remark":"x","opaque":9,"language":"JAVA","flag":1,"code":0,"extFields":{"k":"v"}}`
	frame := append([]byte{0, 0, 0, byte(len(h))}, h...)
	c, err := remoting.Decode(append(frame, "body"...))
	if err != nil {
		t.Fatal(err)
	}
	if c.Opaque != 9 || c.Version != 453 || c.Remark != "x" || c.ExtFields["k"] != "v" || string(c.Body) != "body" {
		t.Errorf("decoded %+v", c)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, frame := range map[string][]byte{
		"short":               {0, 0},
		"header beyond":       {0, 0, 0, 9, '{', '}'},
		"unknown type":        {2, 0, 0, 0},
		"json garbage":        {0, 0, 0, 4, 'n', 'o', 'p', 'e'},
		"binary too short":    {1, 0, 0, 3, 0, 0, 0},
		"binary remark long":  append([]byte{1, 0, 0, 21}, unhex(t, "0000 00 0000 00000001 00000001 000000ff 00000000")...),
		"binary ext mismatch": append([]byte{1, 0, 0, 21}, unhex(t, "0000 00 0000 00000001 00000001 00000000 00000005")...),
	} {
		if _, err := remoting.Decode(frame); !errors.Is(err, remoting.ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	// A length word over the limit is refused before reading further.
	_, err := remoting.ReadCommand(bytes.NewReader([]byte{0x40, 0, 0, 0}), 0)
	if !errors.Is(err, remoting.ErrFrameTooLarge) {
		t.Errorf("1 GiB frame: err = %v, want ErrFrameTooLarge", err)
	}
	// A stream that ends inside a frame or its length word is a bad reply
	// (ErrMalformed), and says so (io.ErrUnexpectedEOF); one that ends
	// before a frame starts is a clean io.EOF.
	for _, stream := range [][]byte{{0, 0, 0, 100, 0, 0}, {0, 0}} {
		_, err = remoting.ReadCommand(bytes.NewReader(stream), 0)
		if !errors.Is(err, remoting.ErrMalformed) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("truncated stream % x: err = %v", stream, err)
		}
	}
	if _, err = remoting.ReadCommand(bytes.NewReader(nil), 0); !errors.Is(err, io.EOF) {
		t.Errorf("empty stream: err = %v, want io.EOF", err)
	}
}

// Frames larger than the first read chunk arrive whole whatever the reads
// return at a time.
func TestReadCommandLargeFrameInPieces(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 40_000) // 640,000 bytes: several doublings
	frame, err := remoting.Encode(&remoting.Command{Code: 0, Flag: remoting.FlagResponse, Opaque: 5, Language: "JAVA", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]io.Reader{
		"half reads": iotest.HalfReader(bytes.NewReader(frame)),
		"one byte":   iotest.OneByteReader(bytes.NewReader(frame)),
	} {
		c, err := remoting.ReadCommand(r, 0)
		if err != nil || c.Opaque != 5 || !bytes.Equal(c.Body, body) {
			t.Errorf("%s: opaque %v, body equal %v, err %v", name, c != nil && c.Opaque == 5, c != nil && bytes.Equal(c.Body, body), err)
		}
	}
}

func TestQuoteBareKeys(t *testing.T) {
	for in, want := range map[string]string{
		`{0:"a",1:"b"}`:               `{"0":"a","1":"b"}`,
		`{ -1 : "x" , 12:"y"}`:        `{ "-1" : "x" , "12":"y"}`,
		`{"k":[1,2,3],"n":{0:"{1:"}}`: `{"k":[1,2,3],"n":{"0":"{1:"}}`,
		`{"s":"a,2:b"}`:               `{"s":"a,2:b"}`,
		`{"esc":"\",3:"}`:             `{"esc":"\",3:"}`,
	} {
		if got := string(remoting.QuoteBareKeys([]byte(in))); got != want {
			t.Errorf("QuoteBareKeys(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestParseClusterInfoUnquotedKeys(t *testing.T) {
	body := `{"brokerAddrTable":{"broker-b":{"brokerAddrs":{0:"10.0.0.2:10911"},"brokerName":"broker-b","cluster":"c2"},` +
		`"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.3:10911"},"brokerName":"broker-a","cluster":"c1","enableActingMaster":false,"zoneName":"z"}},` +
		`"clusterAddrTable":{"c1":["broker-a"],"c2":["broker-b"]}}`
	got, err := remoting.ParseClusterInfo([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []remoting.BrokerAddr{
		{Cluster: "c1", Name: "broker-a", ID: 0, Addr: "10.0.0.1:10911"},
		{Cluster: "c1", Name: "broker-a", ID: 1, Addr: "10.0.0.3:10911"},
		{Cluster: "c2", Name: "broker-b", ID: 0, Addr: "10.0.0.2:10911"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// Cluster missing from brokerData: taken from clusterAddrTable.
	got, err = remoting.ParseClusterInfo([]byte(`{"brokerAddrTable":{"b":{"brokerAddrs":{2:"h:1"}}},"clusterAddrTable":{"c":["b"]}}`))
	if err != nil || len(got) != 1 || got[0] != (remoting.BrokerAddr{Cluster: "c", Name: "b", ID: 2, Addr: "h:1"}) {
		t.Errorf("fallback: %+v, %v", got, err)
	}
}

func TestParseKVTableAndConfig(t *testing.T) {
	kv, err := remoting.ParseKVTable([]byte(`{"table":{"a":"1","b":"null","c":7,"d":null}}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "1", "b": "null", "c": "7", "d": "null"}; !reflect.DeepEqual(kv, want) {
		t.Errorf("kv = %v", kv)
	}
	kv, err = remoting.ParseKVTable([]byte(`{"table":{"a":"1","d":null}}`))
	if err != nil || kv["d"] != "null" || kv["a"] != "1" {
		t.Errorf("string values and a null: %v, %v", kv, err)
	}
	for _, body := range []string{`{"other":{}}`, `{"table":`, `{"table":{"k":"\x"}}`} {
		if _, err := remoting.ParseKVTable([]byte(body)); !errors.Is(err, remoting.ErrMalformed) {
			t.Errorf("runtime info body %s: err = %v, want one wrapping ErrMalformed", body, err)
		}
	}
	for _, body := range []string{`[]`, `{"brokerAddrTable":{"b":{"brokerAddrs":{x1:"h:1"}}}}`, `{"brokerAddrTable":{"b":{"brokerAddrs":{"x":"h:1"}}}}`} {
		if _, err := remoting.ParseClusterInfo([]byte(body)); !errors.Is(err, remoting.ErrMalformed) {
			t.Errorf("cluster info body %s: err = %v, want one wrapping ErrMalformed", body, err)
		}
	}
	cfg, bad := remoting.ParseConfig([]byte("b=2\r\nnamesrvAddr=h:1;h:2\n\nnoequals\na=x=y\n"))
	if want := map[string]string{"a": "x=y", "b": "2", "namesrvAddr": "h:1;h:2"}; !reflect.DeepEqual(cfg, want) || bad != 1 {
		t.Errorf("config = %v, bad %d", cfg, bad)
	}
}

func TestSignature(t *testing.T) {
	cr := &remoting.Credentials{AccessKey: "rocketmq2", SecretKey: "12345678"}
	got := cr.Sign(map[string]string{"topic": "T"}, []byte("body"))
	// HMAC-SHA1("12345678", "rocketmq2" + "T" + "body") computed with Python's hmac; keys AccessKey < topic.
	const want = "YxD0ZV4OXkTmdaZgdqUmy2tW3zU="
	if got["Signature"] != want || got["AccessKey"] != "rocketmq2" || got["topic"] != "T" {
		t.Errorf("Sign = %v, want Signature %s", got, want)
	}
}

func TestLoadCredentials(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "acl")
	os.WriteFile(p, []byte("# broker ACL\naccessKey=rocketmq2\nsecretKey: \"12345678\"\n"), 0o600)
	cr, err := remoting.LoadCredentials(p)
	if err != nil || cr.AccessKey != "rocketmq2" || cr.SecretKey != "12345678" {
		t.Errorf("LoadCredentials = %+v, %v", cr, err)
	}
	os.WriteFile(p, []byte("accessKey=x\n"), 0o600)
	if _, err := remoting.LoadCredentials(p); err == nil {
		t.Error("missing secretKey: want error")
	}
}

func newBroker(t *testing.T) *rocketmqtest.Broker {
	t.Helper()
	b, err := rocketmqtest.NewBroker("127.0.0.1:0", rocketmqtest.Runtime49(), rocketmqtest.Config49)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestClientReusesConnectionAndDecodesBinaryReplies(t *testing.T) {
	b := newBroker(t)
	c := remoting.NewClient(b.Addr(), remoting.Options{Timeout: 2 * time.Second})
	defer c.Close()
	ctx := context.Background()
	for i, bin := range []bool{false, true, false} {
		b.SetBinary(bin)
		kv, err := c.RuntimeInfo(ctx)
		if err != nil {
			t.Fatalf("request %d (binary %v): %v", i, bin, err)
		}
		if kv["brokerVersionDesc"] != "V4_9_7" || kv["putMessageTimesTotal"] != "1234567" {
			t.Errorf("request %d: runtime info %v", i, kv)
		}
	}
	cfg, bad, err := c.BrokerConfig(ctx)
	if err != nil || bad != 0 || cfg["warmMapedFileEnable"] != "true" {
		t.Errorf("config %v bad %d err %v", cfg, bad, err)
	}
	if got := b.Accepted(); got != 1 {
		t.Errorf("connections: server accepted %d, want 1 reused", got)
	}
	reqs := b.Requests()
	for i, r := range reqs {
		if r.Opaque != int32(i+1) || r.Serialization != remoting.JSON || r.Language != "GO" {
			t.Errorf("request %d: %+v", i, r)
		}
	}
}

func TestClientFaultsRedial(t *testing.T) {
	b := newBroker(t)
	b.Delay(3 * time.Second)
	c := remoting.NewClient(b.Addr(), remoting.Options{Timeout: 300 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()

	check := func(name string, wantErr func(error) bool) {
		t.Helper()
		_, err := c.RuntimeInfo(ctx)
		if !wantErr(err) {
			t.Errorf("%s: unexpected error %v", name, err)
		}
		// The next request works on a fresh or the same connection.
		if _, err := c.RuntimeInfo(ctx); err != nil {
			t.Errorf("after %s: %v", name, err)
		}
	}
	dials := 0
	expectDials := func(name string, n int) {
		t.Helper()
		dials += n
		if b.Accepted() != dials {
			t.Errorf("after %s: %d connections, want %d", name, b.Accepted(), dials)
		}
	}
	b.Inject(rocketmqtest.Interleave)
	check("interleaved frames", func(err error) bool { return err == nil })
	expectDials("interleave", 1)

	b.Inject(rocketmqtest.Slow)
	check("slow reply", func(err error) bool { return err != nil && strings.Contains(err.Error(), "timeout") })
	expectDials("slow", 1)

	// A reset on the reused connection looks like a restarted peer: the
	// read is sent once more on a fresh connection and succeeds.
	b.Inject(rocketmqtest.Reset)
	check("reset of a reused connection", func(err error) bool { return err == nil })
	expectDials("reset", 1)

	b.Inject(rocketmqtest.Garbage)
	check("garbage", func(err error) bool { return errors.Is(err, remoting.ErrMalformed) })
	expectDials("garbage", 1)

	b.Inject(rocketmqtest.Huge)
	check("huge", func(err error) bool { return errors.Is(err, remoting.ErrFrameTooLarge) })
	expectDials("huge", 1)

	// Half a frame, then a close: bad input, not a restarted peer, so it is
	// neither retried nor taken for a network failure.
	b.Inject(rocketmqtest.Truncated)
	check("truncated frame", func(err error) bool {
		return remoting.IsBadReply(err) && errors.Is(err, io.ErrUnexpectedEOF)
	})
	expectDials("truncated", 1)

	b.Inject(rocketmqtest.Noise)
	check("noise", remoting.IsBadReply)
	expectDials("noise", 1)

	b.Inject(rocketmqtest.Busy)
	check("busy", func(err error) bool {
		var re *remoting.ResponseError
		return errors.As(err, &re) && re.Code == remoting.SystemBusy && strings.Contains(re.Remark, "TIMEOUT_CLEAN_QUEUE")
	})
	expectDials("busy (connection kept)", 0)
}

// TestClientRetriesStaleConnectionOnce: a peer that restarts between two
// requests (the idle connection gets EOF) costs no failed request, but a
// fresh connection that fails is not retried, and neither is a second failure.
func TestClientRetriesStaleConnectionOnce(t *testing.T) {
	b := newBroker(t)
	c := remoting.NewClient(b.Addr(), remoting.Options{Timeout: time.Second})
	defer c.Close()
	ctx := context.Background()
	if _, err := c.RuntimeInfo(ctx); err != nil {
		t.Fatal(err)
	}
	b.CloseConns() // the broker restarts: every open connection is closed
	if _, err := c.RuntimeInfo(ctx); err != nil {
		t.Fatalf("request after the peer closed the idle connection: %v", err)
	}
	if n := b.Accepted(); n != 2 {
		t.Errorf("%d connections, want 2 (one redial)", n)
	}

	fresh := remoting.NewClient(b.Addr(), remoting.Options{Timeout: time.Second})
	defer fresh.Close()
	b.Inject(rocketmqtest.Reset)
	if _, err := fresh.RuntimeInfo(ctx); err == nil {
		t.Error("a reset on a freshly dialled connection was retried into success")
	}
	if n := b.Accepted(); n != 3 {
		t.Errorf("fresh client: %d connections, want 1 more", n-2)
	}
}

func TestClientContextCancel(t *testing.T) {
	b := newBroker(t)
	b.Delay(10 * time.Second)
	b.Inject(rocketmqtest.Slow)
	c := remoting.NewClient(b.Addr(), remoting.Options{Timeout: time.Minute})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.RuntimeInfo(ctx); errc <- err }()
	collectortest.WaitFor(t, 5*time.Second, "the broker to read the request", func() error {
		if b.RequestCount(remoting.GetBrokerRuntimeInfo) == 0 {
			return errors.New("no request yet")
		}
		return nil
	})
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not unblock the request")
	}
}

func TestClientACL(t *testing.T) {
	b := newBroker(t)
	cr := &remoting.Credentials{AccessKey: "ak", SecretKey: "sk"}
	b.RequireACL(cr)
	good := remoting.NewClient(b.Addr(), remoting.Options{Credentials: cr})
	defer good.Close()
	if _, err := good.RuntimeInfo(context.Background()); err != nil {
		t.Errorf("signed request: %v", err)
	}
	bad := remoting.NewClient(b.Addr(), remoting.Options{Credentials: &remoting.Credentials{AccessKey: "ak", SecretKey: "wrong"}})
	defer bad.Close()
	var re *remoting.ResponseError
	if _, err := bad.RuntimeInfo(context.Background()); !errors.As(err, &re) || re.Code != remoting.NoPermission {
		t.Errorf("wrong secret: err = %v, want NO_PERMISSION", err)
	}
	unsigned := remoting.NewClient(b.Addr(), remoting.Options{})
	defer unsigned.Close()
	if _, err := unsigned.RuntimeInfo(context.Background()); !errors.As(err, &re) || re.Code != remoting.NoPermission {
		t.Errorf("unsigned: err = %v, want NO_PERMISSION", err)
	}
}

func TestNameServerDiscovery(t *testing.T) {
	topo := []remoting.BrokerAddr{
		{Cluster: "DefaultCluster", Name: "broker-a", ID: 0, Addr: "127.0.0.1:10911"},
		{Cluster: "DefaultCluster", Name: "broker-a", ID: 1, Addr: "127.0.0.1:10912"},
		{Cluster: "DefaultCluster", Name: "broker-b", ID: 0, Addr: "127.0.0.1:10921"},
	}
	ns, err := rocketmqtest.NewNameServer("127.0.0.1:0", topo)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	body := string(rocketmqtest.ClusterInfoBody(topo))
	if !strings.Contains(body, `{0:"127.0.0.1:10911",1:"127.0.0.1:10912"}`) {
		t.Fatalf("test name server does not write fastjson's bare keys: %s", body)
	}
	for _, bin := range []bool{false, true} {
		ns.SetBinary(bin)
		c := remoting.NewClient(ns.Addr(), remoting.Options{})
		got, err := c.ClusterInfo(context.Background())
		c.Close()
		if err != nil || !reflect.DeepEqual(got, topo) {
			t.Errorf("binary %v: %+v, %v", bin, got, err)
		}
	}
	ns.Inject(rocketmqtest.Unsupported)
	c := remoting.NewClient(ns.Addr(), remoting.Options{})
	defer c.Close()
	var re *remoting.ResponseError
	if _, err := c.ClusterInfo(context.Background()); !errors.As(err, &re) || re.Code != remoting.RequestCodeNotSupported {
		t.Errorf("proxy answer: err = %v", err)
	}
}

// FuzzDecode feeds arbitrary frames to the decoder: it must return a
// command or an error, never panic, and whatever it accepts must encode
// and decode again to the same command.
func FuzzDecode(f *testing.F) {
	f.Add(unhex(f, workedJSON)[4:])
	f.Add(unhex(f, workedBinary)[4:])
	for _, ser := range []remoting.Serialization{remoting.JSON, remoting.Binary} {
		fr, _ := remoting.Encode(&remoting.Command{Code: 0, Flag: 1, Opaque: 3, Remark: "r", Language: "JAVA",
			ExtFields: map[string]string{"AccessKey": "a", "Signature": "s"}, Body: rocketmqtest.KVTableBody(rocketmqtest.Runtime49()), Serialization: ser})
		f.Add(fr[4:])
	}
	f.Add([]byte{0, 0, 0, 4, 'n', 'o', 'p', 'e'})
	f.Fuzz(func(t *testing.T, frame []byte) {
		c, err := remoting.Decode(frame)
		if err != nil {
			if !errors.Is(err, remoting.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		again, err := remoting.Encode(c)
		if err != nil {
			return // e.g. a binary code outside int16 cannot happen, a JSON code can
		}
		c2, err := remoting.Decode(again[4:])
		if err != nil {
			t.Fatalf("re-decoding our own encoding: %v", err)
		}
		if c2.Opaque != c.Opaque || c2.Flag != c.Flag || !bytes.Equal(c2.Body, c.Body) || c2.Remark != c.Remark {
			t.Fatalf("round trip changed the command: %+v vs %+v", c, c2)
		}
	})
}

// FuzzReadCommand checks the stream reader never allocates past the limit
// or panics on any byte stream.
func FuzzReadCommand(f *testing.F) {
	f.Add(unhex(f, workedJSON))
	f.Add([]byte{0x40, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bytes.NewReader(stream)
		for i := 0; i < 8; i++ {
			if _, err := remoting.ReadCommand(r, 1<<16); err != nil {
				return
			}
		}
	})
}

// FuzzParseBodies feeds the reply-body parsers arbitrary text.
func FuzzParseBodies(f *testing.F) {
	f.Add(rocketmqtest.ClusterInfoBody([]remoting.BrokerAddr{{Cluster: "c", Name: "b", ID: 0, Addr: "h:1"}, {Cluster: "c", Name: "b", ID: 1, Addr: "h:2"}}))
	f.Add(rocketmqtest.KVTableBody(rocketmqtest.Runtime5()))
	f.Add([]byte(rocketmqtest.Config49))
	f.Add([]byte(`{0:{-1:"x"},"a":[1,{2:3}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := remoting.ParseClusterInfo(body); err != nil && !errors.Is(err, remoting.ErrMalformed) {
			t.Fatalf("cluster info error does not wrap ErrMalformed: %v", err)
		}
		if _, err := remoting.ParseKVTable(body); err != nil && !errors.Is(err, remoting.ErrMalformed) {
			t.Fatalf("runtime info error does not wrap ErrMalformed: %v", err)
		}
		remoting.ParseConfig(body)
		q := remoting.QuoteBareKeys(body)
		if len(q) < len(body) {
			t.Fatalf("QuoteBareKeys lost bytes")
		}
	})
}

// A peer that announces a 16 MiB frame and stalls costs the client what it
// sent, not what it promised: five such brokers, asked
// concurrently, must not make the clients allocate 5 × 16 MiB while they
// wait. Before the fix each request allocated the announced 16 MiB at once.
func TestStalledAnnouncersCostWhatTheySent(t *testing.T) {
	const peers = 5
	clients := make([]*remoting.Client, peers)
	for i := range clients {
		b := newBroker(t)
		b.Delay(time.Minute) // released by the broker's Close at cleanup
		b.Inject(rocketmqtest.Announce)
		clients[i] = remoting.NewClient(b.Addr(), remoting.Options{Timeout: 300 * time.Millisecond})
		defer clients[i].Close()
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	errs := make(chan error, peers)
	for _, c := range clients {
		go func() { _, err := c.RuntimeInfo(context.Background()); errs <- err }()
	}
	for range peers {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "timeout") {
			t.Errorf("stalled peer: err = %v, want a timeout", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Each waiting request may hold its 64 KiB connection buffer and one
	// 64 KiB frame chunk; 1 MiB per peer leaves room for everything else the
	// test process allocates meanwhile.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(peers<<20); got > limit {
		t.Errorf("%d stalled peers made the process allocate %d bytes, want under %d (the announced %d bytes each must not be allocated up front)",
			peers, got, limit, remoting.DefaultMaxFrame)
	}
}

// A reply frame's buffers come from the client's Budget: a frame that could
// never fit is refused at once, counted by OnBudget, and drops the
// connection; one that fits holds its bytes until it has been parsed and
// gives them all back.
func TestBudget(t *testing.T) {
	b := newBroker(t)
	big := strings.Repeat("x", 200<<10) // a ~200 KiB runtime-info frame: buffers of 64, 128, then ~200 KiB
	b.Set("padding", big)
	refused := 0
	small := remote.NewBudget(150 << 10)
	c := remoting.NewClient(b.Addr(), remoting.Options{Timeout: 2 * time.Second, Budget: small, OnBudget: func() { refused++ }})
	defer c.Close()
	start := time.Now()
	_, err := c.RuntimeInfo(context.Background())
	if !errors.Is(err, remote.ErrBudget) || remoting.IsBadReply(err) {
		t.Errorf("a frame needing more than the budget: err = %v, want ErrBudget, not a bad reply", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refused after %s, want at once", took)
	}
	if refused != 1 || small.InUse() != 0 {
		t.Errorf("OnBudget called %d times, %d bytes still taken; want 1, 0", refused, small.InUse())
	}

	budget := remote.NewBudget(400 << 10)
	c = remoting.NewClient(b.Addr(), remoting.Options{Timeout: 2 * time.Second, Budget: budget})
	defer c.Close()
	kv, err := c.RuntimeInfo(context.Background())
	if err != nil || kv["padding"] != big {
		t.Fatalf("a frame within the budget: %d-byte padding, %v", len(kv["padding"]), err)
	}
	if n := budget.InUse(); n != 0 {
		t.Errorf("%d bytes of the budget still taken after the reply was parsed", n)
	}
}

// CloseIdle closes an idle connection and the next request dials again; it
// leaves a connection in use alone.
func TestDropIdle(t *testing.T) {
	b := newBroker(t)
	c := remoting.NewClient(b.Addr(), remoting.Options{Timeout: 2 * time.Second})
	defer c.Close()
	if _, err := c.RuntimeInfo(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !c.CloseIdle() {
		t.Error("CloseIdle of an idle client = false")
	}
	if _, err := c.RuntimeInfo(context.Background()); err != nil {
		t.Fatalf("after CloseIdle: %v", err)
	}
	if a := b.Accepted(); a != 2 {
		t.Errorf("%d connections accepted, want 2", a)
	}
	b.Delay(300 * time.Millisecond)
	b.Inject(rocketmqtest.Slow)
	done := make(chan error)
	go func() { _, err := c.RuntimeInfo(context.Background()); done <- err }()
	collectortest.WaitFor(t, 5*time.Second, "the broker to read the third request", func() error {
		if n := len(b.Requests()); n < 3 {
			return fmt.Errorf("%d requests", n)
		}
		return nil
	})
	if c.CloseIdle() {
		t.Error("CloseIdle during a request = true")
	}
	if err := <-done; err != nil {
		t.Errorf("the request CloseIdle left alone: %v", err)
	}
}
