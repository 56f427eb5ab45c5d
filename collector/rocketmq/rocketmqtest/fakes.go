package rocketmqtest

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// Broker is a fake broker: runtime info, config, and any other code
// answered REQUEST_CODE_NOT_SUPPORTED.
type Broker struct {
	*Server
	mu      sync.Mutex
	runtime map[string]string
	config  string
}

// NewBroker starts a fake broker on a TCP address serving the given
// runtime-info table (copied) and config text.
func NewBroker(addr string, runtime map[string]string, config string) (*Broker, error) {
	b := &Broker{runtime: maps.Clone(runtime), config: config}
	s, err := listen(addr, b.handle)
	if err != nil {
		return nil, err
	}
	b.Server = s
	return b, nil
}

// Set changes runtime-info keys; an empty value deletes the key.
func (b *Broker) Set(kv ...string) {
	b.Update(func(rt map[string]string) {
		for i := 0; i+1 < len(kv); i += 2 {
			rt[kv[i]] = kv[i+1]
			if kv[i+1] == "" {
				delete(rt, kv[i])
			}
		}
	})
}

// Update applies f to the runtime-info table under the broker's lock.
func (b *Broker) Update(f func(rt map[string]string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.runtime)
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
	return nil, remoting.RequestCodeNotSupported, unsupported(req)
}

// NameServer is a fake name server answering GET_BROKER_CLUSTER_INFO.
type NameServer struct {
	*Server
	mu      sync.Mutex
	brokers []remoting.BrokerAddr
}

// NewNameServer starts a fake name server on a TCP address that reports
// brokers.
func NewNameServer(addr string, brokers []remoting.BrokerAddr) (*NameServer, error) {
	n := &NameServer{brokers: brokers}
	s, err := listen(addr, n.handle)
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
		return nil, remoting.RequestCodeNotSupported, unsupported(req)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return ClusterInfoBody(n.brokers), remoting.Success, ""
}

// Net is an in-memory network of fake brokers and name servers, for tests
// that run under testing/synctest: a goroutine blocked on a real socket
// keeps the bubble's fake clock from advancing, one blocked on net.Pipe
// does not. Give Dial to the client as its dialer: it connects to the
// server at an address over net.Pipe, and refuses (ECONNREFUSED) an
// address with no server or a closed one. Build the Net's servers inside
// the bubble, and close them before it ends.
type Net struct {
	mu      sync.Mutex
	servers map[string]*Server
}

// Broker starts a fake broker at addr on the network.
func (n *Net) Broker(addr string, runtime map[string]string, config string) *Broker {
	b := &Broker{runtime: maps.Clone(runtime), config: config}
	b.Server = n.add(addr, b.handle)
	return b
}

// NameServer starts a fake name server at addr on the network.
func (n *Net) NameServer(addr string, brokers []remoting.BrokerAddr) *NameServer {
	ns := &NameServer{brokers: brokers}
	ns.Server = n.add(addr, ns.handle)
	return ns
}

// Silent starts a server at addr that accepts connections and reads
// requests but never answers, as a hung broker or name server does.
func (n *Net) Silent(addr string) *Server { return n.add(addr, nil) }

func (n *Net) add(addr string, h replyFunc) *Server {
	s := newServer(addr, h)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.servers == nil {
		n.servers = map[string]*Server{}
	}
	n.servers[addr] = s
	return s
}

// Dial connects to the server at addr (remoting.Options.Dial).
func (n *Net) Dial(_ context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	s := n.servers[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	if s == nil {
		return nil, refused
	}
	client, server := net.Pipe()
	if !s.start(server) {
		client.Close()
		return nil, refused
	}
	return &pipeConn{Conn: client}, nil
}

// pipeConn is the client's end of a Net connection. Like a TCP socket,
// and unlike net.Pipe, it takes a deadline and a write after the server
// closed the connection (the bytes are lost); the next read says EOF. A client
// reusing a connection the server closed meanwhile (a restarted broker)
// sees what it would see on TCP.
type pipeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *pipeConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if errors.Is(err, io.ErrClosedPipe) && !c.closed.Load() {
		return len(p), nil
	}
	return n, err
}

func (c *pipeConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetDeadline(t); err != nil && (!errors.Is(err, io.ErrClosedPipe) || c.closed.Load()) {
		return err
	}
	return nil
}

func (c *pipeConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}
