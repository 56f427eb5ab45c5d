package main

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stall-exporter/stall_exporter/collector"
)

var (
	connsRefusedDesc = collector.NewMetric("exporter_connections_refused_total",
		"HTTP connections closed when accepted because --web.max-connections connections were open, all serving requests.",
		prometheus.CounterValue)
	connsEvictedDesc = collector.NewMetric("exporter_idle_connections_evicted_total",
		"Idle keep-alive HTTP connections closed to make room for a new one at --web.max-connections.",
		prometheus.CounterValue)
)

// connLimit bounds the HTTP connections open at once
// (--web.max-connections); use its connState as http.Server.ConnState. A new
// connection over the bound closes the keep-alive connection idle longest
// (stall_exporter_idle_connections_evicted_total), so holding idle
// connections cannot lock a scraper out; only when every open connection is
// serving a request is the new one closed at accept, before anything is read
// (stall_exporter_connections_refused_total). Requests are bounded by
// --web.max-requests and --web.max-probe-requests, headers by
// ReadHeaderTimeout. Unbounded, every idle connection costs 11–19 KB and a
// file descriptor until the descriptors run out.
type connLimit struct {
	max int // 0: no limit

	mu sync.Mutex
	// conns are the open connections, each with the time it last became
	// idle; zero while it is new or serving a request.
	conns map[net.Conn]time.Time

	refusalLog            // new connections closed
	evictions  refusalLog // idle connections closed for a new one
}

func newConnLimit(n int, logger *slog.Logger) *connLimit {
	return &connLimit{max: n, conns: map[net.Conn]time.Time{}, refusalLog: newRefusalLog(logger), evictions: newRefusalLog(logger)}
}

// connState tracks each connection from StateNew to StateClosed (or
// StateHijacked; net/http reports one of them for every connection) and
// makes room for a new connection over the bound.
func (c *connLimit) connState(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	switch state {
	case http.StateNew:
		c.conns[conn] = time.Time{}
	case http.StateIdle:
		if _, ok := c.conns[conn]; ok {
			c.conns[conn] = time.Now()
		}
	case http.StateActive:
		if _, ok := c.conns[conn]; ok {
			c.conns[conn] = time.Time{}
		}
	case http.StateClosed, http.StateHijacked:
		delete(c.conns, conn)
	}
	if state != http.StateNew || c.max <= 0 || len(c.conns) <= c.max {
		c.mu.Unlock()
		return
	}
	victim := c.longestIdleLocked()
	if victim == nil {
		victim = conn
	}
	delete(c.conns, victim) // closed below; its StateClosed finds nothing
	c.mu.Unlock()
	remote := conn.RemoteAddr().String()
	if victim == conn {
		c.count("closing new connections while --web.max-connections connections are all serving requests (at most one line per minute; every one is counted in stall_exporter_connections_refused_total)",
			"limit", c.max, "flag", "--web.max-connections", "remote", remote)
	} else {
		c.evictions.count("closing the longest idle keep-alive connections to make room for new ones at --web.max-connections (at most one line per minute; every one is counted in stall_exporter_idle_connections_evicted_total)",
			"limit", c.max, "flag", "--web.max-connections", "evicted_remote", victim.RemoteAddr().String(), "new_remote", remote)
	}
	victim.Close()
}

// longestIdleLocked returns the open connection idle for the longest
// time, or nil when none is idle. A scan: it runs only at the bound, over
// at most --web.max-connections entries. c.mu must be held.
func (c *connLimit) longestIdleLocked() net.Conn {
	var victim net.Conn
	var since time.Time
	for conn, idle := range c.conns {
		if !idle.IsZero() && (victim == nil || idle.Before(since)) {
			victim, since = conn, idle
		}
	}
	return victim
}

// Collect exports the two counters (a prometheus.Collector, unchecked).
func (c *connLimit) Collect(ch chan<- prometheus.Metric) {
	ch <- connsRefusedDesc.New(float64(c.refused.Load()))
	ch <- connsEvictedDesc.New(float64(c.evictions.refused.Load()))
}

func (*connLimit) Describe(chan<- *prometheus.Desc) {}
