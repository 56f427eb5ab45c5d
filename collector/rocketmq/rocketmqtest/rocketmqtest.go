// Package rocketmqtest is a fake RocketMQ broker and name server that answer the
// remoting requests stall_exporter sends (GET_BROKER_RUNTIME_INFO 28,
// GET_BROKER_CONFIG 26, GET_BROKER_CLUSTER_INFO 106) over real TCP. It is
// built from the protocol reference (rocketmq-broker.md), not from the broker's code,
// and reproduces the quirks listed there: replies in JSON or ROCKETMQ binary
// whatever the request used, every runtime-info value a string, the literal
// "null" distribution in the first minute, human-readable sizes, unquoted
// integer map keys in cluster info. Faults can be queued for the next
// requests: a slow reply, a reset connection, a garbage frame, a frame that
// announces 1 GiB, one that announces 16 MiB and stalls, half a frame and a
// close, noise, a SYSTEM_BUSY answer, any error code and remark.
package rocketmqtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// Fault is a misbehaviour applied to one request.
type Fault int

const (
	// None answers normally.
	None Fault = iota
	// Slow answers after the delay given to Server.Delay (default 5s).
	Slow
	// Reset closes the connection with a TCP RST instead of answering.
	Reset
	// Garbage answers with a frame whose header is not JSON.
	Garbage
	// Huge answers with a length word announcing 1 GiB, then closes.
	Huge
	// Busy answers SYSTEM_BUSY (code 2) with a [TIMEOUT_CLEAN_QUEUE] remark.
	Busy
	// Unsupported answers REQUEST_CODE_NOT_SUPPORTED (code 3), as a 5.x Proxy does for 106.
	Unsupported
	// Interleave first sends a server-initiated request frame and a response
	// with another opaque, then the real answer.
	Interleave
	// Announce sends a length word promising a 16 MiB frame (the remoting
	// package's default limit, so a client with it accepts it) and 4 more bytes, then nothing until the
	// Delay passes or the server closes, then closes the connection: a peer
	// that makes a client wait with a frame buffer it never fills.
	Announce
	// Truncated sends the first half of a well-formed answer, then closes
	// the connection: the client reads "unexpected EOF" inside a frame.
	Truncated
	// Noise sends 64 bytes of noise (the same bytes every time, starting
	// with a 0x7fffffff length word), then closes the connection.
	Noise
	// ErrorReply answers with the response code and remark given to
	// Server.ErrorReply (default SYSTEM_ERROR, "error"): for example the
	// SYSTEM_ERROR a 4.x broker answers when its ACL hook throws, with the
	// exception in the remark.
	ErrorReply
)

// noise is what Noise sends: a length word of 0x7fffffff, then bytes of a
// fixed pseudo-random sequence.
var noise = func() []byte {
	b := []byte{0x7f, 0xff, 0xff, 0xff}
	r := rand.New(rand.NewPCG(11, 13))
	for len(b) < 64 {
		b = append(b, byte(r.Uint32()))
	}
	return b
}()

// Handler answers one request with a body, or an error code and remark.
type Handler func(req *remoting.Command) (body []byte, code int, remark string)

// Server is a remoting server on a loopback (or given) TCP address.
type Server struct {
	ln      net.Listener
	handler Handler

	mu        sync.Mutex
	binary    bool
	faults    []Fault
	delay     time.Duration
	requests  []*remoting.Command
	accepted  int
	verifyACL *remoting.Credentials
	errCode   int
	errRemark string
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
}

// Listen starts a server on addr ("127.0.0.1:0" picks a free port).
func Listen(addr string, h Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, handler: h, delay: 5 * time.Second, conns: map[net.Conn]bool{}, done: make(chan struct{}),
		errCode: remoting.SystemError, errRemark: "error"}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetBinary makes replies use the ROCKETMQ binary header (as a broker
// started with -Drocketmq.serialize.type=ROCKETMQ does) instead of JSON.
func (s *Server) SetBinary(b bool) {
	s.mu.Lock()
	s.binary = b
	s.mu.Unlock()
}

// RequireACL makes the server check each request's AccessKey and Signature
// against cr and answer NO_PERMISSION (16) when they are wrong.
func (s *Server) RequireACL(cr *remoting.Credentials) {
	s.mu.Lock()
	s.verifyACL = cr
	s.mu.Unlock()
}

// Inject queues faults, applied one per request in order.
func (s *Server) Inject(f ...Fault) {
	s.mu.Lock()
	s.faults = append(s.faults, f...)
	s.mu.Unlock()
}

// Delay sets how long a Slow reply waits.
func (s *Server) Delay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// ErrorReply sets the response code and remark of the ErrorReply fault.
func (s *Server) ErrorReply(code int, remark string) {
	s.mu.Lock()
	s.errCode, s.errRemark = code, remark
	s.mu.Unlock()
}

// Requests returns the requests received so far.
func (s *Server) Requests() []*remoting.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*remoting.Command(nil), s.requests...)
}

// RequestCount counts the received requests with the given code.
func (s *Server) RequestCount(code int) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Code == code {
			n++
		}
	}
	return n
}

// Accepted is the number of connections accepted so far.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// Open is the number of connections open now (accepted, not yet closed
// by either side).
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops the server and closes every connection. Later calls do
// nothing.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.close() })
	return err
}

// CloseConns closes every open connection but keeps listening, as a
// restarted broker does from a client's point of view: the client's idle
// connection reads EOF and a new dial succeeds.
func (s *Server) CloseConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

func (s *Server) close() error {
	close(s.done)
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.accepted++
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	for {
		req, err := remoting.ReadCommand(c, 0)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		fault := None
		if len(s.faults) > 0 {
			fault, s.faults = s.faults[0], s.faults[1:]
		}
		delay, bin, acl, errCode, errRemark := s.delay, s.binary, s.verifyACL, s.errCode, s.errRemark
		s.mu.Unlock()

		resp := &remoting.Command{Opaque: req.Opaque, Flag: remoting.FlagResponse, Language: "JAVA", Version: 453}
		if bin {
			resp.Serialization = remoting.Binary
		}
		switch fault {
		case Slow:
			select {
			case <-time.After(delay):
			case <-s.done:
				return
			}
		case Reset:
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			return
		case Garbage:
			c.Write([]byte{0, 0, 0, 12, 0, 0, 0, 4, 'n', 'o', 'p', 'e', 0xde, 0xad, 0xbe, 0xef})
			continue
		case Huge:
			c.Write([]byte{0x40, 0, 0, 0, 0, 0, 0, 0})
			return
		case Noise:
			c.Write(noise)
			return
		case Announce:
			c.Write([]byte{0x01, 0, 0, 0, 0, 0, 0, 0x10})
			select {
			case <-time.After(delay):
			case <-s.done:
			}
			return
		case Busy:
			resp.Code, resp.Remark = remoting.SystemBusy,
				"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 205ms, size of queue: 812"
		case Interleave:
			for _, extra := range []*remoting.Command{
				{Code: 40, Opaque: 77, Language: "JAVA", Serialization: resp.Serialization},
				{Code: 0, Opaque: req.Opaque + 1000, Flag: remoting.FlagResponse, Language: "JAVA", Serialization: resp.Serialization, Body: []byte("stale")},
			} {
				f, _ := remoting.Encode(extra)
				c.Write(f)
			}
		case Unsupported:
			resp.Code, resp.Remark = remoting.RequestCodeNotSupported, fmt.Sprintf(" request type %d not supported", req.Code)
		case ErrorReply:
			resp.Code, resp.Remark = errCode, errRemark
		}
		if fault == None || fault == Slow || fault == Interleave || fault == Truncated {
			if acl != nil && !validSignature(acl, req) {
				resp.Code, resp.Remark = remoting.NoPermission, "signature mismatch or unknown AccessKey"
			} else {
				resp.Body, resp.Code, resp.Remark = s.handler(req)
			}
		}
		frame, err := remoting.Encode(resp)
		if err != nil {
			return
		}
		if fault == Truncated {
			c.Write(frame[:len(frame)/2])
			return
		}
		if _, err := c.Write(frame); err != nil {
			return
		}
	}
}

func validSignature(cr *remoting.Credentials, req *remoting.Command) bool {
	if req.ExtFields["AccessKey"] != cr.AccessKey {
		return false
	}
	rest := map[string]string{}
	for k, v := range req.ExtFields {
		if k != "Signature" && k != "AccessKey" && k != "SecurityToken" {
			rest[k] = v
		}
	}
	want := cr.Sign(rest, req.Body)["Signature"]
	return want == req.ExtFields["Signature"]
}

// Broker is a fake broker: runtime info, config, and any other code
// answered REQUEST_CODE_NOT_SUPPORTED.
type Broker struct {
	*Server
	mu      sync.Mutex
	runtime map[string]string
	config  string
}

// NewBroker starts a fake broker on addr serving the given runtime-info
// table (copied) and config text.
func NewBroker(addr string, runtime map[string]string, config string) (*Broker, error) {
	b := &Broker{runtime: copyMap(runtime), config: config}
	s, err := Listen(addr, b.handle)
	if err != nil {
		return nil, err
	}
	b.Server = s
	return b, nil
}

// Set changes runtime-info keys; an empty value deletes the key.
func (b *Broker) Set(kv ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(b.runtime, kv[i])
		} else {
			b.runtime[kv[i]] = kv[i+1]
		}
	}
}

// Update applies f to the runtime-info table under the broker's lock.
func (b *Broker) Update(f func(rt map[string]string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.runtime)
}

// SetConfig replaces the GET_BROKER_CONFIG text.
func (b *Broker) SetConfig(text string) {
	b.mu.Lock()
	b.config = text
	b.mu.Unlock()
}

func (b *Broker) handle(req *remoting.Command) ([]byte, int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch req.Code {
	case remoting.GetBrokerRuntimeInfo:
		return KVTableBody(b.runtime), remoting.Success, ""
	case remoting.GetBrokerConfig:
		return []byte(b.config), remoting.Success, ""
	}
	return nil, remoting.RequestCodeNotSupported, fmt.Sprintf(" request type %d not supported", req.Code)
}

// NameServer is a fake name server answering GET_BROKER_CLUSTER_INFO.
type NameServer struct {
	*Server
	mu      sync.Mutex
	brokers []remoting.BrokerAddr
}

// NewNameServer starts a fake name server that reports brokers.
func NewNameServer(addr string, brokers []remoting.BrokerAddr) (*NameServer, error) {
	n := &NameServer{brokers: brokers}
	s, err := Listen(addr, n.handle)
	if err != nil {
		return nil, err
	}
	n.Server = s
	return n, nil
}

// SetBrokers replaces the reported topology.
func (n *NameServer) SetBrokers(brokers []remoting.BrokerAddr) {
	n.mu.Lock()
	n.brokers = brokers
	n.mu.Unlock()
}

func (n *NameServer) handle(req *remoting.Command) ([]byte, int, string) {
	if req.Code != remoting.GetBrokerClusterInfo {
		return nil, remoting.RequestCodeNotSupported, fmt.Sprintf(" request type %d not supported", req.Code)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return ClusterInfoBody(n.brokers), remoting.Success, ""
}

// KVTableBody encodes a runtime-info table as the broker does:
// {"table":{"key":"value",…}} with every value a string.
func KVTableBody(kv map[string]string) []byte {
	b, _ := json.Marshal(struct {
		Table map[string]string `json:"table"`
	}{kv})
	return b
}

// ClusterInfoBody encodes a topology as fastjson does: brokerAddrs keys are
// bare integers ({0:"10.0.0.1:10911"}), which encoding/json cannot read.
func ClusterInfoBody(brokers []remoting.BrokerAddr) []byte {
	type group struct {
		cluster string
		addrs   map[int64]string
	}
	groups := map[string]*group{}
	clusters := map[string][]string{}
	for _, b := range brokers {
		g, ok := groups[b.Name]
		if !ok {
			g = &group{cluster: b.Cluster, addrs: map[int64]string{}}
			groups[b.Name] = g
			clusters[b.Cluster] = append(clusters[b.Cluster], b.Name)
		}
		g.addrs[b.ID] = b.Addr
	}
	q := func(s string) string { v, _ := json.Marshal(s); return string(v) }
	var buf bytes.Buffer
	buf.WriteString(`{"brokerAddrTable":{`)
	for i, name := range sortedKeys(groups) {
		g := groups[name]
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `%s:{"brokerAddrs":{`, q(name))
		ids := make([]int64, 0, len(g.addrs))
		for id := range g.addrs {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for j, id := range ids {
			if j > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, `%d:%s`, id, q(g.addrs[id]))
		}
		fmt.Fprintf(&buf, `},"brokerName":%s,"cluster":%s,"enableActingMaster":false}`, q(name), q(g.cluster))
	}
	buf.WriteString(`},"clusterAddrTable":{`)
	for i, c := range sortedKeys(clusters) {
		if i > 0 {
			buf.WriteByte(',')
		}
		names, _ := json.Marshal(clusters[c])
		fmt.Fprintf(&buf, `%s:%s`, q(c), names)
	}
	buf.WriteString(`}}`)
	return buf.Bytes()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Distribution formats 13 putMessageDistributeTime counts the way the
// broker does: "[<=0ms]:a [0~10ms]:b … [10s~]:m " with a trailing space.
func Distribution(counts [13]uint64) string {
	var sb strings.Builder
	for i, l := range DistributionLabels {
		sb.WriteString("[" + l + "]:" + strconv.FormatUint(counts[i], 10) + " ")
	}
	return sb.String()
}

// DistributionLabels are the 13 bucket labels of putMessageDistributeTime.
var DistributionLabels = [13]string{"<=0ms", "0~10ms", "10~50ms", "50~100ms", "100~200ms", "200~500ms",
	"500ms~1s", "1~2s", "2~3s", "3~4s", "4~5s", "5~10s", "10s~"}

// Runtime49 is a GET_BROKER_RUNTIME_INFO table of a 4.9.7 broker under light
// load, with the 4.x spelling getTransferedTps, brokerVersion present, the
// transient store pool disabled (2147483647) and a flush backlog of
// "12.3 MiB".
func Runtime49() map[string]string {
	return map[string]string{
		"brokerVersionDesc":                        "V4_9_7",
		"brokerVersion":                            "413",
		"bootTimestamp":                            "1732924800000",
		"runtime":                                  "[ 2 days, 3 hours, 4 minutes, 5 seconds ]",
		"pageCacheLockTimeMills":                   "0",
		"putMessageDistributeTime":                 Distribution([13]uint64{10, 35, 4, 0, 0, 0, 1, 1, 1, 0, 2, 0, 0}),
		"putLatency99":                             "2543.00",
		"putLatency999":                            "4800.00",
		"putMessageEntireTimeMax":                  "4890",
		"getMessageEntireTimeMax":                  "37",
		"putMessageTimesTotal":                     "1234567",
		"putMessageSizeTotal":                      "987654321",
		"putMessageFailedTimes":                    "3",
		"putMessageAverageSize":                    "800.0002437877",
		"putTps":                                   "812.3 790.1 801.0",
		"getFoundTps":                              "1500.0 1400.2 1450.9",
		"getMissTps":                               "10.0 12.5 11.1",
		"getTotalTps":                              "1510.0 1412.7 1462.0",
		"getTransferedTps":                         "1500.0 1400.2 1450.9",
		"sendThreadPoolQueueSize":                  "12",
		"sendThreadPoolQueueCapacity":              "10000",
		"sendThreadPoolQueueHeadWaitTimeMills":     "35",
		"pullThreadPoolQueueSize":                  "0",
		"pullThreadPoolQueueCapacity":              "100000",
		"pullThreadPoolQueueHeadWaitTimeMills":     "0",
		"queryThreadPoolQueueSize":                 "0",
		"queryThreadPoolQueueCapacity":             "20000",
		"queryThreadPoolQueueHeadWaitTimeMills":    "0",
		"EndTransactionQueueSize":                  "0",
		"EndTransactionThreadPoolQueueCapacity":    "100000",
		"remainHowManyDataToFlush":                 "12.3 MiB",
		"remainTransientStoreBufferNumbs":          "2147483647",
		"dispatchBehindBytes":                      "4096",
		"dispatchMaxBuffer":                        "0",
		"commitLogDiskRatio":                       "0.4521",
		"commitLogDiskRatio_/data/store/commitlog": "0.4521",
		"consumeQueueDiskRatio":                    "0.4521",
		"commitLogDirCapacity":                     "Total : 146.6 GiB, Free : 80.3 GiB.",
		"commitLogMinOffset":                       "0",
		"commitLogMaxOffset":                       "107374182400",
		"earliestMessageTimeStamp":                 "1732000000000",
		"msgPutTotalTodayNow":                      "1234567",
		"msgGetTotalTodayNow":                      "2345678",
		"msgPutTotalYesterdayMorning":              "1000000",
		"msgGetTotalYesterdayMorning":              "2000000",
		"msgPutTotalTodayMorning":                  "1100000",
		"msgGetTotalTodayMorning":                  "2100000",
	}
}

// Runtime5 is a table of a 5.3.3+ broker: getTransferredTps, no
// brokerVersion, brokerActive, litePull and ack pools, timer keys, the
// transient store pool enabled with 3 free buffers and a commit backlog, and
// a flush backlog written with a comma decimal point ("1,5 GiB").
func Runtime5() map[string]string {
	m := Runtime49()
	delete(m, "brokerVersion")
	delete(m, "getTransferedTps")
	m["brokerVersionDesc"] = "V5_3_3"
	m["getTransferredTps"] = "1500.0 1400.2 1450.9"
	m["brokerActive"] = "true"
	m["litePullThreadPoolQueueSize"] = "0"
	m["litePullThreadPoolQueueCapacity"] = "100000"
	m["litePullThreadPoolQueueHeadWaitTimeMills"] = "0"
	m["ackThreadPoolQueueSize"] = "0"
	m["ackThreadPoolQueueCapacity"] = "100000"
	m["ackThreadPoolQueueHeadWaitTimeMills"] = "0"
	m["timerReadBehind"] = "0"
	m["timerOffsetBehind"] = "0"
	m["timerCongestNum"] = "0"
	m["timerEnqueueTps"] = "0.0"
	m["timerDequeueTps"] = "0.0"
	m["remainHowManyDataToFlush"] = "1,5 GiB"
	m["remainHowManyDataToCommit"] = "256.0 KiB"
	m["remainTransientStoreBufferNumbs"] = "3"
	return m
}

// Config49 is a GET_BROKER_CONFIG text with the risky settings of incident 3
// (warmMapedFileEnable=true, transferMsgByHeap=false), unsorted.
const Config49 = `brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
transientStorePoolEnable=false
warmMapedFileEnable=true
transferMsgByHeap=false
brokerClusterName=DefaultCluster
useReentrantLockWhenPutMessage=true
brokerFastFailureEnable=true
osPageCacheBusyTimeOutMills=1000
waitTimeMillsInSendQueue=200
transientStorePoolSize=5
fastFailIfNoBufferInStorePool=false
mappedFileSizeCommitLog=1073741824
flushIntervalCommitLog=500
storePathRootDir=/data/store
namesrvAddr=10.0.0.9:9876;10.0.0.10:9876
`

// ErrUnknownKeySet is returned by KeySet for a name other than 4.9 or 5.
var ErrUnknownKeySet = errors.New("unknown key set (want 4.9 or 5)")

// KeySet returns Runtime49 for "4", "4.9" and Runtime5 for "5", "5.x".
func KeySet(name string) (map[string]string, error) {
	switch strings.TrimPrefix(strings.ToLower(name), "v") {
	case "4", "4.9", "4.9.x":
		return Runtime49(), nil
	case "5", "5.x", "5.3":
		return Runtime5(), nil
	}
	return nil, ErrUnknownKeySet
}
