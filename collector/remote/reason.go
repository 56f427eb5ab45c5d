package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"
)

// The down-reason vocabulary: the values of the reason label of
// stall_redis_down_reason and stall_rocketmq_down_reason, declared once
// here for every protocol. NetworkReason gives the network's; each module
// classifies its protocol's own errors into the protocol reasons below,
// and declares only the reasons no other protocol has (Redis' auth,
// password_file and loading, RocketMQ's unsupported).
const (
	// What the network answered (NetworkReason).
	ReasonRefused = "refused" // nothing listens on the port, or no such Unix socket
	ReasonTimeout = "timeout" // no answer within the time limit
	ReasonDNS     = "dns"     // the host name does not resolve
	ReasonTLS     = "tls"     // TLS handshake or certificate verification failed
	ReasonNetwork = "network" // any other connection failure (reset, unreachable, closed)

	// What the peer's protocol answered.
	ReasonPermission  = "permission"      // the peer's ACL refused the exporter's request
	ReasonBusy        = "busy"            // the peer is busy (Redis BUSY: a script; RocketMQ SYSTEM_BUSY: flow control)
	ReasonErrorReply  = "error_reply"     // any other error reply
	ReasonProtocol    = "protocol"        // bytes that are not the protocol's replies, or a reply cut short
	ReasonTooLarge    = "reply_too_large" // a reply over its size limit
	ReasonReplyMemory = "reply_memory"    // a large reply found no room in the process-wide Budget before its deadline
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
