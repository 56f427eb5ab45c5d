package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// targetSpec is one parsed target: the go-redis options and the label
// that names it in metrics and logs (never with credentials).
type targetSpec struct {
	label          string // "redis://host:port", "rediss://host:port" or "unix:///path"
	written        string // the target as configured, without password or query: for start-up errors
	scheme         string // "redis", "rediss" or "unix"
	hostPort       string // "host:port" or the socket path: what the /probe allowlist matches
	opts           *redis.Options
	user           string // ACL user (from the URL or --redis.user)
	passwordInURL  bool   // where the process list shows it
	bigKeysReplica string // ?bigkeys_replica=host:port: the replica to scan
	// oversized and budgetRefused count replies refused by their size
	// limit and by replyBudget, on any connection made with opts.
	oversized     *atomic.Uint64
	budgetRefused atomic.Uint64
	// dial connects (TCP, TLS or Unix socket); dialer adds the reply limits.
	dial            func(ctx context.Context, network, addr string) (net.Conn, error)
	clientListLimit int64 // --redis.max-reply-bytes
}

// credentialSource says where a target's password comes from. Files and
// environment variables are read on every new connection, so a rotated
// password is picked up without a restart.
type credentialSource struct {
	user         string
	urlPassword  string
	passwordFile string
	passwordEnv  string
}

func (c credentialSource) provider() func(ctx context.Context) (string, string, error) {
	return func(context.Context) (string, string, error) {
		switch {
		case c.urlPassword != "":
			return c.user, c.urlPassword, nil
		case c.passwordFile != "":
			b, err := os.ReadFile(c.passwordFile)
			if err != nil {
				// The error names the file, never its content.
				return "", "", fmt.Errorf("%w: %w", errPasswordSource, err)
			}
			return c.user, strings.TrimRight(string(b), "\r\n"), nil
		case c.passwordEnv != "":
			return c.user, os.Getenv(c.passwordEnv), nil
		}
		return c.user, "", nil
	}
}

// connSettings are the flag values every target's options derive from.
type connSettings struct {
	user, passwordFile, passwordEnv string
	dialTimeout                     time.Duration
	clientListLimit                 int64 // --redis.max-reply-bytes
	tls                             tlsSettings
}

// replyBudget bounds the bulk strings over resplimit.HoldAbove that all
// Redis connections of the process hold at once: 8 replies at replyLimit.
// Each is buffered whole, then copied whole by go-redis; without it 40
// concurrent /probe requests (--web.max-probe-requests) took 61 MB of a
// 64 MiB cgroup. Real replies are below HoldAbove and never wait.
var replyBudget = remote.NewBudget(replyBudgetBytes)

const replyBudgetBytes = 8 << 20

// replyLimit bounds every reply other than CLIENT LIST, per command or
// pipeline: INFO with commandstats is 5–50 kB on real servers (about 45 kB
// with all ~380 commands of 7.x called), CONFIG GET and a SCAN page a few
// kB, MEMORY STATS 3 kB plus 387 bytes per non-empty database (sent alone:
// target.memoryStats).
const replyLimit = 1 << 20

// clientName is what the exporter's connections call themselves in
// CLIENT LIST.
const clientName = "stall_exporter"

// parseTarget turns a configured target (--redis.addr,
// --redis.probe.allowed-targets) into options: "host:port",
// "redis://[user[:password]@]host:port[/db]", "rediss://…" (TLS) or
// "unix:///path/to.sock", with the query parameters password_file,
// password_env and bigkeys_replica, and go-redis' own (dial_timeout,
// skip_verify, …).
func parseTarget(raw string, s connSettings) (*targetSpec, error) {
	u, _, err := parseTargetURL(raw)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	cred, err := targetCredentials(u, q, s)
	if err != nil {
		return nil, err
	}
	bigKeysReplica := q.Get("bigkeys_replica")
	// go-redis is given the URL without what only the exporter reads.
	q.Del("password_file")
	q.Del("password_env")
	q.Del("bigkeys_replica")
	clean := *u
	clean.User = nil
	clean.RawQuery = q.Encode()
	opts, err := redis.ParseURL(clean.String())
	if err != nil {
		return nil, fmt.Errorf("redis target %s: %w", writtenURL(u), err)
	}
	addr, err := targetAddr(u, opts)
	if err != nil {
		return nil, fmt.Errorf("redis target %s: %w", writtenURL(u), err)
	}
	opts.Addr = addr
	spec := &targetSpec{opts: opts, scheme: u.Scheme, written: writtenURL(u), user: cred.user, passwordInURL: cred.urlPassword != "",
		bigKeysReplica: bigKeysReplica, oversized: new(atomic.Uint64),
		label: u.Scheme + "://" + addr, hostPort: addr, clientListLimit: s.clientListLimit}
	setClientOptions(opts, cred, s)
	if u.Scheme == "rediss" {
		opts.TLSConfig = s.tls.config(opts.TLSConfig)
	}
	spec.dial = redis.NewDialer(opts) // TCP or Unix socket, opts.DialTimeout
	if opts.TLSConfig != nil {
		spec.dial = tlsDialer(opts.DialTimeout, opts.TLSConfig)
	}
	opts.Dialer = spec.dialer(nil)
	return spec, nil
}

// errNotURL and errMalformedScheme never quote the input, which may hold
// a password.
var (
	errNotURL          = errors.New("redis target is not a valid URL (scheme://[user@]host:port)")
	errMalformedScheme = errors.New(`redis target is a malformed URL: a scheme is followed by "://" (redis://host:port, rediss://host:port, unix:///path), a host:port has no "/"`)
	// malformedScheme is a target without "://" that begins with a
	// scheme and a slash (redis:/host); redis:6379 is a host named redis.
	malformedScheme = regexp.MustCompile(`^(?i:redis|rediss|unix):/`)
)

// parseTargetURL parses a configured or /probe target as a URL, redis://
// when it names no scheme (named is false).
func parseTargetURL(raw string) (u *url.URL, named bool, err error) {
	if raw == "" {
		return nil, false, errors.New("empty redis target")
	}
	if !utf8.ValidString(raw) {
		// It would end up in the addr label, which must be UTF-8.
		return nil, false, errors.New("redis target is not valid UTF-8")
	}
	named = strings.Contains(raw, "://")
	if !named && (strings.Contains(raw, "//") || malformedScheme.MatchString(raw)) {
		// Read as a host:port, redis//host:port would be host "redis" with
		// the database "//host:port", which go-redis calls an invalid
		// database number.
		return nil, false, errMalformedScheme
	}
	if !named {
		raw = "redis://" + raw
	}
	if u, err = url.Parse(raw); err != nil {
		return nil, named, errNotURL
	}
	return u, named, nil
}

// targetCredentials is the user and password source of a target: the
// --redis.* defaults, overridden by its password_file or password_env and
// by a user or password in its URL.
func targetCredentials(u *url.URL, q url.Values, s connSettings) (credentialSource, error) {
	cred := credentialSource{user: s.user, passwordFile: s.passwordFile, passwordEnv: s.passwordEnv}
	if f := q.Get("password_file"); f != "" {
		cred.passwordFile, cred.passwordEnv = f, ""
	}
	if e := q.Get("password_env"); e != "" {
		cred.passwordEnv, cred.passwordFile = e, ""
	}
	if cred.passwordEnv != "" {
		// An unset variable would silently mean "no password": the server
		// then refuses every scrape, or — worse — accepts the default user.
		if _, ok := os.LookupEnv(cred.passwordEnv); !ok {
			return cred, fmt.Errorf("redis target %s: password variable %s is not set in the exporter's environment", writtenURL(u), cred.passwordEnv)
		}
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			cred.urlPassword = p
		}
		if n := u.User.Username(); n != "" {
			cred.user = n
		}
	}
	return cred, nil
}

// setClientOptions sets what the exporter decides over what the URL says.
func setClientOptions(opts *redis.Options, cred credentialSource, s connSettings) {
	// INFO, CLIENT LIST and CONFIG are server-wide: a /db in the URL is
	// accepted and ignored, so the user needs no SELECT permission.
	opts.DB = 0
	opts.Username, opts.Password = "", ""
	opts.CredentialsProviderContext = cred.provider()
	opts.Protocol = 2
	// The name is set by OnConnect, not by go-redis' own setup: Redis 2.4
	// and 2.6.0–2.6.8 have no CLIENT SETNAME ("-ERR Syntax error, try
	// CLIENT (LIST | KILL ip:port)"), and go-redis fails the connection
	// when its setup command is refused, so those servers were always down.
	opts.ClientName = ""
	opts.OnConnect = setClientName
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = 1
	opts.DialerRetries = 1
	// Scrapes of a target never overlap: one connection is enough. 4 KiB
	// buffers (32 KiB by default) keep an idle connection at about 10 kB,
	// so /probe can cache many; replies over them are read past them.
	opts.PoolSize = 1
	opts.PipelinePoolSize = -1 // one pool: a scrape uses a single connection
	opts.MinIdleConns = 0
	opts.MaxIdleConns = 1
	opts.ReadBufferSize = 4 << 10
	opts.WriteBufferSize = 4 << 10
	opts.ConnMaxIdleTime = 10 * time.Minute
	if opts.DialTimeout == 0 { // ?dial_timeout= wins for its target
		opts.DialTimeout = s.dialTimeout
	}
}

// targetAddr is the one spelling of a target's address, which its label
// and the /probe allowlist use: remote.NormalizeHostPort of go-redis'
// host:port, or a clean absolute socket path.
func targetAddr(u *url.URL, opts *redis.Options) (string, error) {
	if u.Scheme == "unix" {
		if u.Host != "" {
			return "", errors.New("a unix:// target names a socket path, not a host (unix:///path/to.sock)")
		}
		return socketPath(opts.Addr)
	}
	return remote.NormalizeHostPort(opts.Addr)
}

// dialer returns a go-redis Dialer whose connections bound every reply as
// it arrives (package resplimit); stream, when not nil, is the target's
// CLIENT LIST stream.
func (s *targetSpec) dialer(stream *resplimit.Stream) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := s.dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return resplimit.NewConn(c, resplimit.Options{
			Limit: replyLimit, HoldAbove: resplimit.HoldAbove, Stream: stream,
			OnLimit: func() { s.oversized.Add(1) },
			Budget:  replyBudget, OnBudget: func() { s.budgetRefused.Add(1) },
		}), nil
	}
}

// setClientName names a new connection; a server that does not know CLIENT
// SETNAME (before 2.6.9) or an ACL that forbids it leaves it unnamed.
func setClientName(ctx context.Context, cn *redis.Conn) error {
	if err := cn.ClientSetName(ctx, clientName).Err(); err != nil && !isErrorReply(err) {
		return err
	}
	return nil
}

// writtenURL is the URL as configured, without password or query.
func writtenURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User(c.User.Username())
	}
	c.RawQuery = ""
	return c.String()
}

// newClient returns a client on a copy of the options (go-redis fills in
// the Options it is given). stream, when not nil, is the target's CLIENT
// LIST stream. setup, when not nil, is true while a new connection
// authenticates, from the credentials request (before HELLO and AUTH) to
// OnConnect, so that an error reply to HELLO or AUTH is told from one to
// INFO whatever its text.
func (s *targetSpec) newClient(stream *resplimit.Stream, setup *atomic.Bool) *redis.Client {
	o := *s.opts
	if stream != nil {
		o.Dialer = s.dialer(stream)
	}
	if setup != nil {
		credentials, onConnect := o.CredentialsProviderContext, o.OnConnect
		o.CredentialsProviderContext = func(ctx context.Context) (string, string, error) {
			setup.Store(true)
			return credentials(ctx)
		}
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			setup.Store(false)
			return onConnect(ctx, cn)
		}
	}
	return redis.NewClient(&o)
}
