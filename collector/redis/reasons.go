package redis

import (
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// Why a target is down: the reason label of stall_redis_down_reason, a
// fixed set: remote's vocabulary (remote.Reason*: refused, timeout, dns,
// tls, network; permission is NOPERM to INFO, busy is BUSY (a script or
// function running), error_reply another error reply to INFO, protocol a
// peer that does not speak RESP or an empty INFO, reply_too_large a reply
// over --redis.max-reply-bytes for CLIENT LIST and replyLimit for the
// others, reply_memory a large reply without room in replyBudget), and
// Redis' own reasons here.
const (
	reasonAuth    = "auth"          // AUTH/HELLO refused (any error reply), or a password required
	reasonPwFile  = "password_file" // the target's password file cannot be read: a local error
	reasonLoading = "loading"       // LOADING: the server is loading its dataset
)

// downMessages are the log lines for a target going down, by reason.
var downMessages = map[string]string{
	reasonAuth:               "redis target refused authentication: check the ACL user and the password source",
	reasonPwFile:             "cannot read the password file of the redis target: a local configuration error (check the path and the exporter's permissions); the target was not asked",
	remote.ReasonPermission:  "redis user may not run INFO (NOPERM)",
	remote.ReasonRefused:     "redis target refused the connection",
	remote.ReasonTimeout:     "redis target not answering within the time limit",
	remote.ReasonDNS:         "redis target host name does not resolve",
	remote.ReasonTLS:         "redis target TLS handshake failed (certificate, CA, server name, or a port that does not speak TLS)",
	remote.ReasonTooLarge:    "redis target announced a reply over its size limit (1 MiB; CLIENT LIST: --redis.max-reply-bytes); connection dropped",
	remote.ReasonReplyMemory: "redis target's large reply found no room in the process-wide reply memory budget (8 MiB held at once by all targets) before its deadline; connection dropped",
	remote.ReasonProtocol:    "redis target does not speak the Redis protocol",
	reasonLoading:            "redis target is loading its dataset",
	remote.ReasonBusy:        "redis target is busy running a script",
	remote.ReasonErrorReply:  "redis target answered INFO with an error",
	remote.ReasonNetwork:     "redis target connection failed",
}

var (
	errPasswordSource = errors.New("redis password file unreadable")
	errAuthRefused    = errors.New("the server refused the connection's HELLO/AUTH") // an error reply to a new connection's setup
)

// downReason classifies a failed scrape: Redis' reasons first, then the
// network's (remote.NetworkReason).
func downReason(err error) string {
	var re redis.Error
	switch {
	case errors.Is(err, resplimit.ErrTooLarge):
		return remote.ReasonTooLarge
	case errors.Is(err, remote.ErrBudget):
		return remote.ReasonReplyMemory
	case errors.Is(err, resplimit.ErrProtocol):
		return remote.ReasonProtocol
	case errors.Is(err, errAuthRefused):
		return reasonAuth
	case errors.As(err, &re) && !errors.Is(err, redis.Nil):
		return errorReplyReason(re.Error())
	case errors.Is(err, errPasswordSource):
		return reasonPwFile
	case errors.Is(err, errPlainTextPort), errors.Is(err, errTLSHandshake):
		return remote.ReasonTLS
	case isGoRedisParseError(err):
		return remote.ReasonProtocol
	}
	return remote.NetworkReason(err)
}

// isGoRedisParseError reports a reply that passed resplimit's lexer but
// not go-redis' parser: go-redis returns these without a type or sentinel
// of its own (internal/proto/reader.go), as text ("redis: can't parse int
// reply" for an array where an integer is due) or as strconv's error (":abc"
// where an integer is due). seam_test.go pins both.
func isGoRedisParseError(err error) bool {
	var numErr *strconv.NumError
	if errors.As(err, &numErr) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "redis: can't parse") || strings.Contains(msg, "redis: invalid reply")
}

// errorReplyReason classifies an error reply by its code (the first word)
// and, for servers before 6.0 that have no WRONGPASS, by its text.
func errorReplyReason(msg string) string {
	code, _, _ := strings.Cut(msg, " ")
	lower := strings.ToLower(msg)
	switch {
	case code == "WRONGPASS", code == "NOAUTH",
		strings.Contains(lower, "invalid password"),                       // 2.x–5.x wrong password
		strings.Contains(lower, "no password is set"),                     // AUTH to a server without requirepass, before 6.0
		strings.Contains(lower, "called without any password configured"), // the same, 6.0+
		strings.Contains(lower, "invalid username-password pair"):         // 6.0 AUTH
		return reasonAuth
	case code == "NOPERM":
		return remote.ReasonPermission
	case code == "LOADING":
		return reasonLoading
	case code == "BUSY":
		return remote.ReasonBusy
	}
	return remote.ReasonErrorReply
}
