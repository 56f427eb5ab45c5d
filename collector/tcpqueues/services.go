package tcpqueues

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/tcpqueues/inetdiag"
)

// service is one watched local port and the name it is exported under.
type service struct {
	name string // the service label: redis, rocketmq_broker or a --tcpqueues.port name
	port uint16
}

// serviceName is what --tcpqueues.port accepts as a name: a label value
// the alerts and dashboards can match, short and lower case.
var serviceName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// parsePorts reads --tcpqueues.port values, NAME=PORT each.
func parsePorts(values []string) ([]service, error) {
	var out []service
	for _, v := range values {
		name, p, ok := strings.Cut(v, "=")
		if !ok || !serviceName.MatchString(name) {
			return nil, fmt.Errorf("--tcpqueues.port %q: want NAME=PORT, NAME of lower-case letters, digits and _ (at most 32, a letter first)", v)
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil || port == 0 {
			return nil, fmt.Errorf("--tcpqueues.port %q: the port is not a number from 1 to 65535", v)
		}
		out = append(out, service{name: name, port: uint16(port)})
	}
	return out, nil
}

// localServices are the services whose sockets this host holds: the
// targets (redis, rocketmq_broker) whose host is local, then the ports
// named with --tcpqueues.port. A port is watched once, under the first
// name it gets; the others are logged. More than inetdiag.MaxPorts ports
// is an error.
func localServices(ctx context.Context, logger *slog.Logger, targets map[string][]string, extra []service) ([]service, error) {
	local, err := localAddrs()
	if err != nil {
		return nil, err
	}
	var out []service
	add := func(s service) {
		if i := slices.IndexFunc(out, func(o service) bool { return o.port == s.port }); i >= 0 {
			if out[i].name != s.name {
				logger.Info("tcpqueues: a port named twice is exported under its first name", "port", s.port, "name", out[i].name, "also", s.name)
			}
			return
		}
		out = append(out, s)
	}
	for _, name := range []string{"redis", "rocketmq_broker"} {
		for _, hp := range targets[name] {
			host, p, err := net.SplitHostPort(hp)
			if err != nil {
				continue
			}
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil || port == 0 {
				continue
			}
			if !isLocal(ctx, host, local) {
				logger.Debug("tcpqueues: target not on this host, its port is not watched", "service", name, "addr", hp)
				continue
			}
			add(service{name: name, port: uint16(port)})
		}
	}
	for _, s := range extra {
		add(s)
	}
	if len(out) > inetdiag.MaxPorts {
		return nil, fmt.Errorf("%d local service ports to watch, at most %d (--tcpqueues.port and the local --redis.addr, --rocketmq.broker targets)", len(out), inetdiag.MaxPorts)
	}
	return out, nil
}

// localAddrs are the addresses of this host's interfaces (in the
// exporter's network namespace, the host's for a DaemonSet with
// hostNetwork).
func localAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("this host's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// resolveTimeout bounds the start-up lookup of a target named by host
// name: a resolver that does not answer must not hold the start.
const resolveTimeout = 2 * time.Second

// isLocal reports whether host (an IP or a name, resolved once at start)
// is loopback, unspecified or one of this host's addresses.
func isLocal(ctx context.Context, host string, local []netip.Addr) bool {
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{a.Unmap()}
	} else {
		ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		found, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return false
		}
		for _, a := range found {
			ips = append(ips, a.Unmap())
		}
	}
	for _, a := range ips {
		if a.IsLoopback() || a.IsUnspecified() || slices.Contains(local, a) {
			return true
		}
	}
	return false
}
