package rocketmq

import (
	"errors"
	"slices"
	"strings"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// Why a broker is down: the reason label of stall_rocketmq_down_reason, a
// fixed set, as for stall_redis_down_reason: remote's vocabulary (the
// network's: refused when the broker process is gone, timeout past
// --rocketmq.timeout or the scrape's timeout, dns, network; permission is
// NO_PERMISSION or an ACL hook that threw, busy SYSTEM_BUSY (flow control
// or a full admin pool), error_reply another error code, protocol bytes
// that are not a remoting reply or a frame cut short, reply_too_large a
// frame over --rocketmq.max-frame-bytes, reply_memory a frame without
// room in replyBudget), and RocketMQ's own reason here.
const reasonUnsupported = "unsupported" // REQUEST_CODE_NOT_SUPPORTED: not a broker (a 5.x Proxy, a name server)

// downMessages are the warnings logged when a broker goes down, by reason.
var downMessages = map[string]string{
	remote.ReasonPermission:  "rocketmq broker refused GET_BROKER_RUNTIME_INFO: access denied (ACL); check --rocketmq.acl-file and the account's permissions on the broker",
	remote.ReasonBusy:        "rocketmq broker answered GET_BROKER_RUNTIME_INFO with SYSTEM_BUSY",
	reasonUnsupported:        "rocketmq broker does not support GET_BROKER_RUNTIME_INFO (REQUEST_CODE_NOT_SUPPORTED): is this a broker's remoting port, not a Proxy or name server?",
	remote.ReasonErrorReply:  "rocketmq broker answered GET_BROKER_RUNTIME_INFO with an error",
	remote.ReasonProtocol:    "rocketmq broker sent a reply that is not a remoting frame",
	remote.ReasonTooLarge:    "rocketmq broker sent a reply frame over --rocketmq.max-frame-bytes",
	remote.ReasonReplyMemory: "rocketmq broker's reply found no room in the exporter-wide budget of reply frames read at once (many large replies at the same time)",
	remote.ReasonRefused:     "rocketmq broker refused the connection (is the broker process running?)",
	remote.ReasonTimeout:     "rocketmq broker not answering within --rocketmq.timeout",
	remote.ReasonDNS:         "rocketmq broker host name does not resolve",
	remote.ReasonTLS:         "rocketmq broker connection failed in TLS",
	remote.ReasonNetwork:     "rocketmq broker connection failed",
}

// downReason classifies a failed GET_BROKER_RUNTIME_INFO.
func downReason(err error) string {
	var re *remoting.ResponseError
	switch {
	case errors.As(err, &re):
		return responseReason(re)
	case errors.Is(err, remoting.ErrFrameTooLarge):
		return remote.ReasonTooLarge
	case errors.Is(err, remote.ErrBudget):
		return remote.ReasonReplyMemory
	case remoting.IsBadReply(err):
		return remote.ReasonProtocol
	}
	return remote.NetworkReason(err)
}

// aclExceptions are the exception class names an ACL refusal carries in the
// remark when the broker answers it with SYSTEM_ERROR: a 4.x broker's ACL
// hook throws AclException, and the remoting server answers any exception
// thrown before the request's processor with SYSTEM_ERROR and the
// exception's text (read from NettyRemotingAbstract). The 5.3 "auth 2.0"
// names are inferred from its class names (UNVERIFIED on the wire).
var aclExceptions = []string{"AclException", "AuthenticationException", "AuthorizationException"}

// responseReason classifies a well-formed error reply by its code.
func responseReason(re *remoting.ResponseError) string {
	switch re.Code {
	case remoting.NoPermission:
		return remote.ReasonPermission
	case remoting.SystemBusy:
		return remote.ReasonBusy
	case remoting.RequestCodeNotSupported:
		return reasonUnsupported
	case remoting.SystemError:
		if slices.ContainsFunc(aclExceptions, func(e string) bool { return strings.Contains(re.Remark, e) }) {
			return remote.ReasonPermission
		}
	}
	return remote.ReasonErrorReply
}
