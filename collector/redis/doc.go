// Package redis is the redis collector. It scrapes every --redis.addr target
// on /metrics and any allowed target on /probe?module=redis. Every series
// carries an addr label ("redis://host:port", never credentials) so that
// several targets on one /metrics page never collide; docs/redis.md explains
// the choice.
//
// It registers the "redis" collector and /probe module in its init, so main
// only imports it.
//
// Where things are: collector.go is the /metrics collector over the
// targets, probe.go and allowlist.go the /probe module, flags.go the flags,
// spec.go one parsed target and the go-redis client built for it, tls.go
// its TLS dialer, target.go one target's scrape and state, info.go INFO,
// MEMORY STATS and CONFIG GET as series (metrics.go declares them),
// clientlist.go CLIENT LIST, bigkeys.go the background big-key scan,
// reasons.go why a target is down. Beneath: resplimit bounds and streams
// what a server sends, replies parses the replies, redistest is the tests'
// fake server.
//
// # Following a reply
//
// go-redis stays the client (the design names it), but three layers of the
// exporter surround it, and the seam rests on what go-redis writes and
// returns, which no API of it promises. A scrape (target.lockAndScrape)
// reads its reply like this, from the socket up:
//
//  1. The connection. spec.go's setClientOptions overrides what the URL
//     says with about twenty options, each for a reason written beside it:
//     RESP2 (Protocol 2), no identity or maintenance notifications, the
//     client name set by OnConnect (servers before 2.6.9 refuse CLIENT
//     SETNAME), one connection and 4 KiB buffers, one retry. Its Dialer
//     (targetSpec.dialer) wraps every connection in a resplimit.Conn.
//  2. resplimit.Conn, under go-redis' buffered reader, lexes every byte
//     as it arrives: a command's replies may cost at most replyLimit
//     (1 MiB; CLIENT LIST --redis.max-reply-bytes), a bulk string over
//     resplimit.HoldAbove (64 KiB) is handed to go-redis only once whole,
//     taking its size from replyBudget, shared by every target. A read
//     over a limit fails with resplimit.ErrTooLarge or remote.ErrBudget,
//     a stream that is not RESP with resplimit.ErrProtocol; the
//     connection is closed.
//  3. The CLIENT LIST stream (target.clStream, a resplimit.Stream). A
//     Conn recognises CLIENT LIST by one Write of exactly the RESP array
//     go-redis writes for it ("*2\r\n$6\r\nclient\r\n$4\r\nlist\r\n"), so
//     a pipeline is never streamed. While clientlist.go has it armed, the
//     reply's payload goes to the replies.Aggregator as it arrives and
//     go-redis reads an empty bulk string in its place: a CLIENT LIST of
//     100,000 clients is read in a few kB. Should go-redis write the
//     command otherwise, the reply reaches go-redis whole, clientlist.go
//     finds it not empty, and every run is down with reason protocol.
//  4. The setup. A new connection authenticates inside go-redis (HELLO,
//     then AUTH where HELLO is unknown) before the first command, so an
//     error reply to it would look like one to INFO. newClient brackets
//     it with the target's inSetup atomic: true from the credentials
//     request, which go-redis makes before HELLO, to OnConnect, which it
//     calls after AUTH. An error reply while inSetup is true is
//     errAuthRefused (reason auth), whatever its text.
//  5. go-redis parses the reply and returns its value or error. reasons.go
//     classifies the error in that order: the exporter's own sentinels
//     (resplimit's, remote.ErrBudget, errAuthRefused), a redis.Error (an
//     error reply, by its code and, before 6.0, its text), the password
//     file's and TLS' errors, then what go-redis' parser refused — which it returns as text or as strconv's
//     error, no sentinel (isGoRedisParseError) — and last the network's
//     reason (remote.NetworkReason).
//
// seam_test.go pins steps 3 to 5 against the go-redis of go.mod, through
// the options and dialer above: the bytes go-redis writes for CLIENT LIST
// (the one command a Stream recognises), inSetup during HELLO and AUTH
// and after them, and the errors of replies go-redis cannot parse; each
// failure says what to change when go-redis changes.
package redis
