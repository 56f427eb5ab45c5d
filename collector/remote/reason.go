package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"
)

// The network part of the down-reason vocabulary: the values of the
// reason label of stall_redis_down_reason and stall_rocketmq_down_reason
// that say what the network answered. Each module adds its protocol's own
// reasons (auth, protocol, reply_too_large, …) and asks NetworkReason for
// the rest.
const (
	ReasonRefused = "refused" // nothing listens on the port, or no such Unix socket
	ReasonTimeout = "timeout" // no answer within the time limit
	ReasonDNS     = "dns"     // the host name does not resolve
	ReasonTLS     = "tls"     // TLS handshake or certificate verification failed
	ReasonNetwork = "network" // any other connection failure (reset, unreachable, closed)
)

// NetworkReason classifies a failed dial or exchange by what the network
// said: the name did not resolve, TLS failed, the connection was refused
// (ECONNREFUSED, or ENOENT for a Unix socket path), the deadline passed
// (the context's or the connection's), or anything else.
func NetworkReason(err error) string {
	var (
		dnsErr   *net.DNSError
		recErr   tls.RecordHeaderError
		alertErr tls.AlertError
		certErr  *tls.CertificateVerificationError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &dnsErr):
		return ReasonDNS
	case errors.As(err, &recErr), errors.As(err, &alertErr), errors.As(err, &certErr):
		return ReasonTLS
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		return ReasonRefused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	}
	return ReasonNetwork
}
