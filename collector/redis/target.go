package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/redis/resplimit"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// targetSpec is one parsed target: the go-redis options plus the label
// that names it in metrics and logs (never carrying credentials).
type targetSpec struct {
	label    string // "redis://host:port", "rediss://host:port" or "unix:///path"
	written  string // the target as configured, without password or query: for start-up errors
	scheme   string // "redis", "rediss" or "unix"
	hostPort string // "host:port" or the socket path: what the /probe allowlist matches
	opts     *redis.Options
	user     string // ACL user (from the URL or --redis.user)
	// passwordInURL is set when the password was written in the URL, where
	// the process list shows it.
	passwordInURL bool
	// bigKeysReplica is the ?bigkeys_replica=host:port of a --redis.addr:
	// the replica the big-key scan should use (same credentials and TLS).
	bigKeysReplica string
	// oversized counts replies refused by their size limit on any
	// connection made with opts (scrapes and big-key scans).
	oversized *atomic.Uint64
	// budgetRefused counts replies that found no room in replyBudget
	// before their deadline.
	budgetRefused atomic.Uint64
	// dial connects (TCP, TLS or Unix socket) without the reply limits;
	// dialer adds them.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// clientListLimit is --redis.max-reply-bytes: the largest CLIENT LIST
	// reply, which is streamed.
	clientListLimit int64
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
	clientListLimit                 int64 // --redis.max-reply-bytes; 0: defaultClientListLimit
	tls                             tlsSettings
}

// defaultClientListLimit is the --redis.max-reply-bytes default: CLIENT
// LIST of 100,000 clients is 30–45 MB (Redis 7.0 prints about 300 bytes per
// client with a pod-style name, 8.x with lib-name, io-thread and IPv6
// peers up to about 450; docs/redis.md has the measurement). The reply is
// aggregated as it arrives, so the limit bounds how long it is read, not
// the memory it takes.
const defaultClientListLimit = 64 << 20

// replyBudget bounds the bytes of held replies (INFO or any other bulk
// string over resplimit.HoldAbove, up to replyLimit each) that all Redis
// connections of the process hold at once, scrapes, probes and big-key
// scans together. Each such reply is buffered whole and then copied whole
// by go-redis, so without it the transient memory is the number of
// concurrent /probe requests (--web.max-probe-requests, 40) times about 2
// × replyLimit, which review 2 measured at 61 MB of a 64 MiB cgroup. Real
// replies are below HoldAbove (INFO is 5–50 kB) and never wait.
var replyBudget = remote.NewBudget(replyBudgetBytes)

// replyBudgetBytes is replyBudget's size: 8 replies at the 1 MiB limit.
const replyBudgetBytes = 8 << 20

// replyLimit bounds every reply other than CLIENT LIST, per command or
// pipeline: INFO with commandstats is 5–50 kB on real servers (a 7.x
// server with every one of its ~380 commands and subcommands called is
// about 45 kB), CONFIG GET a few kB, MEMORY STATS 3 kB plus 387 bytes
// per non-empty database (sent alone, so that a server with more than
// about 2,700 of them loses MEMORY STATS, not INFO: target.memoryStats), a
// big-key SCAN page of 100 key names a few kB. Bulk strings over resplimit.HoldAbove are
// handed to go-redis only once complete, so a reply costs at most twice
// what actually arrived.
const replyLimit = 1 << 20

// clientName is what the exporter's connections call themselves in
// CLIENT LIST.
const clientName = "stall_exporter"

// tlsSettings are the --redis.tls.* flags, and the CA bundle and client
// certificate read from their files once, at start (load).
type tlsSettings struct {
	caFile, certFile, keyFile, serverName string
	insecureSkipVerify                    bool
	roots                                 *x509.CertPool    // nil: the system roots
	certs                                 []tls.Certificate // the client certificate, if any
}

// load reads the files the settings name; every error names the flag to
// fix.
func (t tlsSettings) load() (tlsSettings, error) {
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.ca-file: %w", err) // the error names the path
		}
		t.roots = x509.NewCertPool()
		if !t.roots.AppendCertsFromPEM(pem) {
			return t, fmt.Errorf("--redis.tls.ca-file %s: no PEM certificates", t.caFile)
		}
	}
	switch {
	case t.certFile == "" && t.keyFile == "":
	case t.keyFile == "":
		return t, errors.New("--redis.tls.key-file is needed with --redis.tls.cert-file")
	case t.certFile == "":
		return t, errors.New("--redis.tls.cert-file is needed with --redis.tls.key-file")
	default:
		certPEM, err := os.ReadFile(t.certFile)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.cert-file: %w", err)
		}
		keyPEM, err := os.ReadFile(t.keyFile)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.key-file: %w", err)
		}
		// The error says whether the certificate or the key input is bad.
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.cert-file %s, --redis.tls.key-file %s: %w", t.certFile, t.keyFile, err)
		}
		t.certs = []tls.Certificate{cert}
	}
	return t, nil
}

// errCredentialsInProbeTarget refuses /probe targets that try to choose a
// user or a credential source: a request must not make the exporter send
// the configured password as another user, or read a file or an
// environment variable of its choosing.
var errCredentialsInProbeTarget = errors.New("a /probe target may not carry a user or password; configure --redis.user, --redis.password-file or --redis.password-env")

// parseTarget turns a configured target (--redis.addr,
// --redis.probe.allowed-targets) into options. Accepted forms: "host:port",
// "redis://[user[:password]@]host:port[/db]", "rediss://…" (TLS),
// "unix:///path/to.sock"; the query parameters password_file and
// password_env choose the target's own password source, bigkeys_replica
// the replica to scan; other query parameters are go-redis' (dial_timeout,
// skip_verify, …). /probe requests go through parseProbeAddress instead.
func parseTarget(raw string, s connSettings) (*targetSpec, error) {
	u, err := parseTargetURL(raw)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	cred, err := targetCredentials(u, q, s)
	if err != nil {
		return nil, err
	}
	bigKeysReplica := q.Get("bigkeys_replica")
	// go-redis is given the URL without what only the exporter reads: the
	// user and password, and the exporter's own query parameters.
	q.Del("password_file")
	q.Del("password_env")
	q.Del("bigkeys_replica")
	clean := *u
	clean.User = nil
	clean.RawQuery = q.Encode()
	opts, err := redis.ParseURL(clean.String())
	if err != nil {
		return nil, fmt.Errorf("redis target %s: %w", redactedURL(u), err)
	}
	spec := &targetSpec{opts: opts, scheme: u.Scheme, written: writtenURL(u), user: cred.user, passwordInURL: cred.urlPassword != "",
		bigKeysReplica: bigKeysReplica, oversized: new(atomic.Uint64),
		label: u.Scheme + "://" + opts.Addr, hostPort: opts.Addr, clientListLimit: s.clientListLimit}
	if !utf8.ValidString(spec.label) {
		return nil, errors.New("redis target host is not valid UTF-8")
	}
	if err := checkPort(spec); err != nil {
		return nil, err
	}
	if spec.clientListLimit <= 0 {
		spec.clientListLimit = defaultClientListLimit
	}
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

// parseTargetURL parses a configured target as a URL, redis:// when it
// names no scheme. Its errors never quote the input, which may hold a
// password.
func parseTargetURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("empty redis target")
	}
	if !utf8.ValidString(raw) {
		// It would end up in the addr label, which must be UTF-8.
		return nil, errors.New("redis target is not valid UTF-8")
	}
	if !strings.Contains(raw, "://") {
		raw = "redis://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis target is not a valid URL (scheme://[user@]host:port)")
	}
	return u, nil
}

// targetCredentials is the user and password source of a target: the
// --redis.* defaults, overridden by the target's password_file or
// password_env parameter and by a user or password in its URL. A
// password_env naming a variable that is not set is an error.
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
			return cred, fmt.Errorf("redis target %s: password variable %s is not set in the exporter's environment", redactedURL(u), cred.passwordEnv)
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

// setClientOptions sets what the exporter decides for every target over
// what the URL says: credentials, protocol, connection setup and pool.
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
	// Scrapes of a target never overlap and send one command or pipeline
	// at a time: one connection is enough. The commands are tens of bytes
	// and replies over the buffer are read past it, so 4 KiB buffers (32
	// KiB each by default) do not cost a system call more, and keep an
	// idle connection at about 10 kB — /probe can cache many.
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

// checkPort refuses a TCP target whose port is not a number from 1 to
// 65535. net/url accepts any digits (and url.Parse alone an empty port);
// such a target would fail every scrape with reason="network", sending the
// on-call person to the network instead of the flag.
func checkPort(spec *targetSpec) error {
	if spec.scheme == "unix" {
		return nil
	}
	_, port, err := net.SplitHostPort(spec.opts.Addr)
	if err != nil || !validPort(port) {
		return fmt.Errorf("redis target %s: the port must be a number from 1 to 65535", spec.written)
	}
	return nil
}

// validPort reports whether port is a decimal from 1 to 65535, without
// sign or leading zeros.
func validPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535 && port == strconv.Itoa(n)
}

// dialer returns a go-redis Dialer whose connections check every reply
// as it arrives, under go-redis' reader (package resplimit): go-redis
// allocates what a reply header announces before reading it. stream, when
// not nil, is the CLIENT LIST stream of the target the client serves.
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

// newClientListStream returns the stream a target's CLIENT LIST replies
// are aggregated from.
func (s *targetSpec) newClientListStream() *resplimit.Stream {
	return resplimit.NewStream(s.clientListLimit, "client", "list")
}

// setClientName names a new connection; a server that does not know CLIENT
// SETNAME (before 2.6.9) or an ACL that forbids it leaves it unnamed.
func setClientName(ctx context.Context, cn *redis.Conn) error {
	if err := cn.ClientSetName(ctx, clientName).Err(); err != nil && !isErrorReply(err) {
		return err
	}
	return nil
}

// writtenURL prints a URL as configured, with its user but without its
// password or query.
func writtenURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User(c.User.Username())
	}
	c.RawQuery = ""
	return c.String()
}

// redactedURL prints a URL without its user, password or query.
func redactedURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	return c.String()
}

// config returns the TLS configuration of a rediss:// target: base (from
// the URL) with the flags applied.
func (t tlsSettings) config(base *tls.Config) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		c = base.Clone()
	}
	if t.serverName != "" {
		c.ServerName = t.serverName
	}
	c.InsecureSkipVerify = c.InsecureSkipVerify || t.insecureSkipVerify // ?skip_verify=true or the flag
	if t.roots != nil {
		c.RootCAs = t.roots
	}
	if t.certs != nil {
		c.Certificates = t.certs
	}
	return c
}

// allowlist decides which /probe targets may be scraped, and how: the
// entries of --redis.probe.allowed-targets and every --redis.addr keep the
// scheme, TLS settings, user and password source they were configured
// with; a host:port matched only by the anchored
// --redis.probe.allowed-targets-regexp is probed with --redis.probe.scheme
// and the default credentials. A /probe request names the address, never
// how it is reached: otherwise an allowed rediss:// target could be asked
// for over plain TCP (the configured password in clear text), or as
// another ACL user.
type allowlist struct {
	exact    map[string]*targetSpec // by host:port or socket path
	re       *regexp.Regexp
	reScheme string // "redis" or "rediss"
	conn     connSettings
}

// newAllowlist parses the configured entries (full --redis.addr syntax):
// addrs are the --redis.addr targets, allowed the
// --redis.probe.allowed-targets. An address configured twice in
// different ways is an error, since a probe could not say which one it
// means. Every error names the flag, and the entry, to fix.
func newAllowlist(addrs, allowed []string, pattern, reScheme string, s connSettings) (*allowlist, error) {
	if reScheme == "" {
		reScheme = "redis"
	}
	if reScheme != "redis" && reScheme != "rediss" {
		return nil, fmt.Errorf("--redis.probe.scheme must be redis or rediss, not %q", reScheme)
	}
	a := &allowlist{exact: map[string]*targetSpec{}, reScheme: reScheme, conn: s}
	from := map[string]string{} // host:port → the flag of its first entry
	for _, list := range []struct {
		flag    string
		entries []string
	}{{"--redis.addr", addrs}, {"--redis.probe.allowed-targets", allowed}} {
		for _, e := range list.entries {
			spec, err := parseTarget(e, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", list.flag, err)
			}
			if old, ok := a.exact[spec.hostPort]; ok && (old.label != spec.label || old.user != spec.user) {
				return nil, fmt.Errorf("%s %s and %s %s name the same address with a different scheme or user: a /probe request for it could not say which one it means",
					from[spec.hostPort], old.written, list.flag, spec.written)
			} else if ok {
				continue // the first entry keeps its password source
			}
			a.exact[spec.hostPort], from[spec.hostPort] = spec, list.flag
		}
	}
	if pattern != "" {
		re, err := regexp.Compile("^(?:" + pattern + ")$")
		if err != nil {
			return nil, fmt.Errorf("--redis.probe.allowed-targets-regexp: %w", err)
		}
		a.re = re
	}
	return a, nil
}

// errProbeSchemeMismatch refuses a /probe target whose scheme differs from
// the one configured for its address.
var errProbeSchemeMismatch = fmt.Errorf("%w: the target's scheme differs from the configured one (a /probe target names host:port; scheme, TLS and user come from the configuration)", collector.ErrTargetNotAllowed)

// resolve returns the configured spec for a /probe address: the exact
// entry, or for an address the regexp allows, a spec built from
// --redis.probe.scheme and the default credentials. It fails with
// ErrTargetNotAllowed (wrapped) when the address is not allowed or the
// request names another scheme than the configured one.
func (a *allowlist) resolve(p probeAddress) (*targetSpec, error) {
	spec, ok := a.exact[p.hostPort]
	if !ok {
		if a.re == nil || !a.re.MatchString(p.hostPort) {
			return nil, fmt.Errorf("%w: redis target %s (see --redis.probe.allowed-targets)", collector.ErrTargetNotAllowed, p.hostPort)
		}
		u := url.URL{Scheme: a.reScheme, Host: p.hostPort}
		if p.scheme == "unix" {
			u = url.URL{Scheme: "unix", Path: p.hostPort}
		}
		var err error
		if spec, err = parseTarget(u.String(), a.conn); err != nil {
			return nil, err
		}
	}
	if p.scheme != "" && p.scheme != spec.scheme {
		return nil, errProbeSchemeMismatch
	}
	return spec, nil
}

// probeAddress is all a /probe request may say about a Redis target.
type probeAddress struct {
	scheme   string // "redis", "rediss", "unix", or "" when only host:port was given
	hostPort string // "host:port" (default port 6379) or the socket path
}

// errProbeTargetForm refuses /probe targets with more than an address.
var errProbeTargetForm = errors.New("a /probe target is host:port, redis://host:port[/db], rediss://host:port[/db] or unix:///path, nothing else (no user, password or query)")

// errProbePort refuses a /probe target whose port is out of range.
var errProbePort = errors.New("the port of a /probe target must be a number from 1 to 65535")

// dbPath is the optional /db of a redis:// URL; the collector reads only
// server-wide data, so the database is ignored.
var dbPath = regexp.MustCompile(`^(/[0-9]{0,5})?$`)

// parseProbeAddress reads a /probe target. It accepts only an address (and
// an ignored /db); a user, password, other path, query or fragment is
// refused, so the request cannot choose a credential, an ACL user or a
// connection option.
func parseProbeAddress(raw string) (probeAddress, error) {
	if raw == "" {
		return probeAddress{}, errors.New("empty redis target")
	}
	if !utf8.ValidString(raw) {
		return probeAddress{}, errors.New("redis target is not valid UTF-8")
	}
	var p probeAddress
	if scheme, _, ok := strings.Cut(raw, "://"); ok {
		p.scheme = scheme
	} else {
		raw = "redis://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return probeAddress{}, errProbeTargetForm // url errors quote the input
	}
	if u.User != nil {
		return probeAddress{}, errCredentialsInProbeTarget
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return probeAddress{}, errProbeTargetForm
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || u.Path == "" {
			return probeAddress{}, errProbeTargetForm
		}
		p.hostPort = u.Path
	case "redis", "rediss":
		host := u.Hostname()
		if !dbPath.MatchString(u.Path) || host == "" || !utf8.ValidString(host) ||
			(strings.Contains(host, ":") && net.ParseIP(host) == nil) {
			return probeAddress{}, errProbeTargetForm
		}
		port := u.Port()
		if port == "" {
			port = "6379"
		}
		if !validPort(port) {
			return probeAddress{}, errProbePort
		}
		p.hostPort = net.JoinHostPort(host, port)
	default:
		return probeAddress{}, errProbeTargetForm
	}
	return p, nil
}

// newClient returns a client on a copy of the options: go-redis fills in
// defaults in the Options it is given, and spec.opts is shared. stream,
// when not nil, is the target's CLIENT LIST stream. setup, when not nil,
// is true while a new connection authenticates: from the moment go-redis
// asks for the credentials (before HELLO and AUTH) until its setup ends
// (OnConnect), so that an error reply to HELLO or AUTH is told from one to
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
