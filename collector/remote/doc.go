// Package remote holds what every collector of remote targets (Redis,
// RocketMQ) shares, one file per idea: the one spelling of a host:port
// (hostport.go), the /probe allowlist (allowlist.go), the down-reason
// vocabulary of every protocol (reason.go) and the process-wide budget of
// reply bytes read at once (budget.go). The protocols themselves stay in
// their packages.
package remote
