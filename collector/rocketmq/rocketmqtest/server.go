// Package rocketmqtest is a fake RocketMQ broker and name server that answer the
// remoting requests stall_exporter sends (GET_BROKER_RUNTIME_INFO 28,
// GET_BROKER_CONFIG 26, GET_BROKER_CLUSTER_INFO 106), over real TCP or, for
// tests under testing/synctest, over net.Pipe (Net). It is built from the
// protocol reference (rocketmq-broker.md), not from the broker's code, and
// reproduces the quirks listed there: replies in JSON or ROCKETMQ binary
// whatever the request used, every runtime-info value a string, the literal
// "null" distribution in the first minute, human-readable sizes, unquoted
// integer map keys in cluster info. Faults can be queued for the next
// requests: a slow reply, a reset connection, a garbage frame, a frame that
// announces 1 GiB, one that announces 16 MiB and stalls, half a frame and a
// close, noise, a SYSTEM_BUSY answer, any error code and remark.
//
// server.go is the remoting server and its faults, fakes.go the broker, the
// name server and the in-memory network, bodies.go the reply bodies and
// the reference data (testdata/).
package rocketmqtest

import (
	"fmt"
	"math/rand/v2"
	"net"
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
	// Reset closes the connection instead of answering (RST on a real socket).
	Reset
	// Garbage answers with a frame whose header is not JSON.
	Garbage
	// Huge answers with a length word announcing 1 GiB, then closes.
	Huge
	// Busy answers SYSTEM_BUSY (code 2) with a [TIMEOUT_CLEAN_QUEUE] remark.
	Busy
	// Unsupported answers REQUEST_CODE_NOT_SUPPORTED (code 3), as a 5.x Proxy does for 106.
	Unsupported
	// Interleave sends a server request and a response to another opaque first.
	Interleave
	// Announce sends a length word promising 16 MiB (remoting's default
	// limit) and 4 more bytes, then nothing until the Delay passes or the
	// server closes: a peer that makes a client wait on a buffer it never fills.
	Announce
	// Truncated sends the first half of a well-formed answer, then closes.
	Truncated
	// Noise sends 64 bytes of noise (see noise), then closes.
	Noise
	// ErrorReply answers with the code and remark given to Server.ErrorReply
	// (default SYSTEM_ERROR, "error"), as a 4.x broker whose ACL hook throws.
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

// replyFunc answers one request with a body, or an error code and remark.
type replyFunc func(req *remoting.Command) (body []byte, code int, remark string)

// Server is a remoting server on a TCP listener or on a Net.
type Server struct {
	ln      net.Listener // nil on a Net
	addr    string
	handler replyFunc // nil: read requests, never answer

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
	closed    bool
	wg        sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
}

func newServer(addr string, h replyFunc) *Server {
	return &Server{addr: addr, handler: h, delay: 5 * time.Second, conns: map[net.Conn]bool{}, done: make(chan struct{}),
		errCode: remoting.SystemError, errRemark: "error"}
}

// listen starts a server on a TCP address ("127.0.0.1:0" picks a free port).
func listen(addr string, h replyFunc) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := newServer(ln.Addr().String(), h)
	s.ln = ln
	s.wg.Go(s.accept)
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// SetBinary makes replies use the ROCKETMQ binary header (as a broker
// started with -Drocketmq.serialize.type=ROCKETMQ does) instead of JSON.
func (s *Server) SetBinary(b bool) { s.locked(func() { s.binary = b }) }

// RequireACL makes the server check each request's AccessKey and Signature
// against cr and answer NO_PERMISSION (16) when they are wrong.
func (s *Server) RequireACL(cr *remoting.Credentials) { s.locked(func() { s.verifyACL = cr }) }

// Inject queues faults, applied one per request in order.
func (s *Server) Inject(f ...Fault) { s.locked(func() { s.faults = append(s.faults, f...) }) }

// Delay sets how long a Slow reply waits.
func (s *Server) Delay(d time.Duration) { s.locked(func() { s.delay = d }) }

// ErrorReply sets the response code and remark of the ErrorReply fault.
func (s *Server) ErrorReply(code int, remark string) {
	s.locked(func() { s.errCode, s.errRemark = code, remark })
}

func (s *Server) locked(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
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

// Close stops the server and closes every connection; it refuses new
// ones. Later calls do nothing.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		if s.ln != nil {
			err = s.ln.Close()
		}
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
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

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.start(c)
	}
}

// start serves a new connection; it reports false, closing c, when the
// server is closed.
func (s *Server) start(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.accepted++
	s.conns[c] = true
	s.wg.Go(func() { s.serve(c) })
	return true
}

func (s *Server) serve(c net.Conn) {
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
		if s.handler == nil {
			continue // silent: read, never answer
		}

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
			resp.Code, resp.Remark = remoting.RequestCodeNotSupported, unsupported(req)
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

// unsupported is the remark of a REQUEST_CODE_NOT_SUPPORTED answer.
func unsupported(req *remoting.Command) string {
	return fmt.Sprintf(" request type %d not supported", req.Code)
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
