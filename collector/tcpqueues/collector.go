// Package tcpqueues is the tcpqueues collector: for the local ports of the
// services this exporter watches (the --redis.addr and --rocketmq.broker
// targets on this host, plus --tcpqueues.port), the bytes waiting in the
// TCP send queues of their established sockets, summed per port — never
// one series per connection. They fill when the peers or the wire do not
// take what a service writes, before the service's own buffers (Redis'
// client output buffers) start to grow: incident 7's cause. One
// sock_diag dump per address family and scrape, filtered by port in the
// kernel (inetdiag, the codec).
//
// Where things are: collector.go is the collector and its Update,
// services.go the ports and their names (flags, which targets are local),
// inetdiag/ the netlink request and reply codec.
package tcpqueues

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq"
	"github.com/stall-exporter/stall_exporter/collector/tcpqueues/inetdiag"
	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

var portFlag = kingpin.Flag("tcpqueues.port",
	"A local TCP port whose established sockets' send queues are summed, as NAME=PORT (the service label, then the port; repeatable, "+
		"at most 64 ports with the targets'). The ports of the --redis.addr (service redis) and --rocketmq.broker (rocketmq_broker) targets "+
		"on this host are watched without it.").Strings()

func init() {
	collector.Register("tcpqueues",
		"Bytes in the TCP send queues of the local Redis and RocketMQ ports (and --tcpqueues.port), summed per port, from the kernel's socket diagnostics (sock_diag netlink)",
		true, newCollector)
}

var (
	sendQueueBytes = collector.NewMetric("tcp_send_queue_bytes",
		"Bytes written and not yet acknowledged by the peer (ss Send-Q; inet_diag idiag_wqueue = write_seq - snd_una), summed over the established TCP sockets whose local port is port.",
		prometheus.GaugeValue, "service", "port")
	sendQueueMax = collector.NewMetric("tcp_send_queue_max_bytes",
		"Largest send queue (inet_diag idiag_wqueue) of one established TCP socket whose local port is port, in bytes.",
		prometheus.GaugeValue, "service", "port")
	sendQueueSockets = collector.NewMetric("tcp_send_queue_sockets",
		"Established TCP sockets whose local port is port with a non-empty send queue (inet_diag idiag_wqueue > 0).",
		prometheus.GaugeValue, "service", "port")
	establishedSockets = collector.NewMetric("tcp_established_sockets",
		"Established TCP sockets whose local port is port (sock_diag dump, IPv4 and IPv6).",
		prometheus.GaugeValue, "service", "port")
)

// newCollector finds the local service ports once, at start: which
// targets are local does not change while the exporter runs.
func newCollector(cfg collector.Config) (collector.Collector, error) {
	extra, err := parsePorts(*portFlag)
	if err != nil {
		return nil, err
	}
	targets := map[string][]string{"redis": redis.TCPAddrs(), "rocketmq_broker": rocketmq.BrokerAddrs()}
	services, err := localServices(context.Background(), cfg.Logger, targets, extra)
	if err != nil {
		return nil, err
	}
	if len(services) == 0 {
		cfg.Logger.Info("tcpqueues: no local service port (no --redis.addr or --rocketmq.broker target on this host, no --tcpqueues.port); the collector exports nothing")
	} else {
		var names []string
		for _, s := range services {
			names = append(names, s.name+"="+strconv.Itoa(int(s.port)))
		}
		cfg.Logger.Info("tcpqueues: watching", "ports", strings.Join(names, ","))
	}
	return newQueues(cfg, services), nil
}

// queues is the collector. A scrape opens a sock_diag socket, dumps the
// established TCP sockets of the watched ports (IPv4, then IPv6) and sums
// them per port; concurrent scrapes take turns, sharing one receive buffer.
type queues struct {
	services []service
	index    map[uint16]int // port → services index
	ports    []uint16       // the kernel filter's
	problems *collector.Problems

	mu       sync.Mutex
	buf      []byte
	sums     []sums
	noFilter bool // the kernel refused the port filter once: filter here
	noIPv6   bool // IPv6 sock_diag is absent (no ipv6 module): not asked again
}

type sums struct {
	established, nonEmpty uint64
	bytes, max            uint64
}

func newQueues(cfg collector.Config, services []service) *queues {
	q := &queues{services: services, index: map[uint16]int{}, problems: cfg.Problems, sums: make([]sums, len(services))}
	for i, s := range services {
		q.index[s.port] = i
		q.ports = append(q.ports, s.port)
	}
	return q
}

// defaultTimeout bounds a dump when the scrape has no deadline (tests).
const defaultTimeout = 5 * time.Second

// Update dumps the sockets and sends the four gauges of every watched
// port, zeros included (a port with no connection is a fact, and the
// alerts compare ports over time). A datagram or message that is
// truncated, carries an attribute of a newer kernel, or was flagged as
// interrupted counts in stall_collector_parse_errors_total (once per kind
// and dump) and the rest is still summed. A refused request or a socket
// error fails the scrape.
func (q *queues) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	if len(q.services) == 0 {
		return fmt.Errorf("%w: no local service port", collector.ErrNoData)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultTimeout)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.dump(deadline); err != nil {
		return err
	}
	for i, s := range q.services {
		port := strconv.Itoa(int(s.port))
		sm := q.sums[i]
		sendQueueBytes.Send(ch, float64(sm.bytes), s.name, port)
		sendQueueMax.Send(ch, float64(sm.max), s.name, port)
		sendQueueSockets.Send(ch, float64(sm.nonEmpty), s.name, port)
		establishedSockets.Send(ch, float64(sm.established), s.name, port)
	}
	return nil
}

// dump fills q.sums from one sock_diag dump per address family.
func (q *queues) dump(deadline time.Time) error {
	clear(q.sums)
	conn, err := inetdiag.Open(q.buf)
	if err != nil {
		return err
	}
	defer conn.Close()
	q.buf = conn.Buffer()
	add := func(s inetdiag.Socket) {
		i, ok := q.index[s.SrcPort]
		if !ok || s.State != inetdiag.StateEstablished { // filtered here too: the kernel may have refused the filter
			return
		}
		sm := &q.sums[i]
		sm.established++
		if w := uint64(s.SendQueue); w > 0 {
			sm.nonEmpty++
			sm.bytes += w
			sm.max = max(sm.max, w)
		}
	}
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if family == unix.AF_INET6 && q.noIPv6 {
			continue
		}
		req := inetdiag.Request{Family: family, States: 1 << inetdiag.StateEstablished, Ports: q.ports}
		if q.noFilter {
			req.Ports = nil
		}
		p, err := conn.Dump(req, deadline, add)
		var errno netlinkdump.Errno
		if errors.As(err, &errno) && req.Ports != nil && unix.Errno(errno) == unix.EINVAL {
			// A kernel that refuses the bytecode (none is known to: S_GE
			// and S_LE are as old as inet_diag): dump every established
			// socket and filter here, from now on.
			q.noFilter = true
			req.Ports = nil
			p, err = conn.Dump(req, deadline, add)
		}
		if errors.As(err, &errno) && family == unix.AF_INET6 && (unix.Errno(errno) == unix.ENOENT || unix.Errno(errno) == unix.EAFNOSUPPORT) {
			q.noIPv6 = true // a kernel without IPv6 has no IPv6 sockets either
			err = nil
		}
		q.count(p, err)
		if err != nil && !errors.Is(err, netlinkdump.ErrTruncated) {
			return fmt.Errorf("sock_diag dump (family %d): %w", family, err)
		}
	}
	return nil
}

// count adds a dump's problems to the collector's bad-input counter.
func (q *queues) count(p inetdiag.Problems, err error) {
	if errors.Is(err, netlinkdump.ErrTruncated) {
		q.problems.Add("sock_diag_datagram_truncated", 1, err)
	}
	if p.Truncated > 0 {
		q.problems.Add("sock_diag_message_truncated", 1, fmt.Errorf("%d truncated messages or attributes in one dump", p.Truncated))
	}
	if p.UnknownAttrs > 0 {
		q.problems.Add("sock_diag_unknown_attribute", 1, fmt.Errorf("%d sockets with attributes newer than inet_diag's INET_DIAG_SOCKOPT in one dump", p.UnknownAttrs))
	}
	if p.Interrupted > 0 {
		q.problems.Add("sock_diag_dump_interrupted", 1, errors.New("the kernel flagged the dump as interrupted (NLM_F_DUMP_INTR): sockets changed during it"))
	}
	if p.OtherMessages > 0 {
		q.problems.Add("sock_diag_unexpected_message", 1, fmt.Errorf("%d netlink messages of an unexpected type in one dump", p.OtherMessages))
	}
}
