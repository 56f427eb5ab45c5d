package collector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisTargetSpec is one parsed target: the go-redis options plus the label
// that names it in metrics and logs (never carrying credentials).
type redisTargetSpec struct {
	label    string // "redis://host:port", "rediss://host:port" or "unix:///path"
	hostPort string // "host:port" or the socket path: what the /probe allowlist matches
	opts     *redis.Options
	user     string // ACL user (from the URL or --redis.user)
	// passwordInURL is set when the password was written in the URL, where
	// the process list shows it.
	passwordInURL bool
	// bigKeysReplica is the ?bigkeys_replica=host:port of a --redis.addr:
	// the replica the big-key scan should use (same credentials and TLS).
	bigKeysReplica string
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
				return "", "", fmt.Errorf("redis password file: %w", err)
			}
			return c.user, strings.TrimRight(string(b), "\r\n"), nil
		case c.passwordEnv != "":
			return c.user, os.Getenv(c.passwordEnv), nil
		}
		return c.user, "", nil
	}
}

// redisConnSettings are the flag values every target's options derive from.
type redisConnSettings struct {
	user, passwordFile, passwordEnv string
	dialTimeout                     time.Duration
	tls                             redisTLSSettings
}

type redisTLSSettings struct {
	caFile, certFile, keyFile, serverName string
	insecureSkipVerify                    bool
}

// errCredentialsInProbeTarget refuses /probe targets that try to choose a
// credential source: a request must not make the exporter read a file or
// an environment variable of its choosing.
var errCredentialsInProbeTarget = errors.New("a /probe target may not carry a password, password_file or password_env; configure --redis.password-file or --redis.password-env")

// parseRedisTarget turns a --redis.addr value or a /probe target into
// options. Accepted forms: "host:port", "redis://[user[:password]@]host:port[/db]",
// "rediss://…" (TLS), "unix:///path/to.sock"; the query parameters
// password_file and password_env choose the target's own password source,
// bigkeys_replica the replica to scan; other query parameters are go-redis'
// (dial_timeout, skip_verify, …). /probe targets (fromProbe) take no query
// parameters and no password.
func parseRedisTarget(raw string, s redisConnSettings, fromProbe bool) (*redisTargetSpec, error) {
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
		// url errors quote the input, which may hold a password.
		return nil, fmt.Errorf("redis target is not a valid URL (scheme://[user@]host:port)")
	}
	cred := credentialSource{user: s.user, passwordFile: s.passwordFile, passwordEnv: s.passwordEnv}
	q := u.Query()
	if f := q.Get("password_file"); f != "" {
		cred.passwordFile, cred.passwordEnv = f, ""
	}
	if e := q.Get("password_env"); e != "" {
		cred.passwordEnv, cred.passwordFile = e, ""
	}
	if fromProbe && (q.Has("password_file") || q.Has("password_env") || q.Has("password")) {
		return nil, errCredentialsInProbeTarget
	}
	if fromProbe && len(q) > 0 {
		// skip_verify, pool sizes, timeouts, bigkeys_replica: the
		// exporter's configuration decides those, not the request.
		return nil, errors.New("a /probe target takes no query parameters")
	}
	bigKeysReplica := q.Get("bigkeys_replica")
	q.Del("password_file")
	q.Del("password_env")
	q.Del("bigkeys_replica")
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			if fromProbe {
				return nil, errCredentialsInProbeTarget
			}
			cred.urlPassword = p
		}
		if n := u.User.Username(); n != "" {
			cred.user = n
		}
	}
	clean := *u
	clean.User = nil
	clean.RawQuery = q.Encode()
	opts, err := redis.ParseURL(clean.String())
	if err != nil {
		return nil, fmt.Errorf("redis target %s: %w", redactedURL(u), err)
	}
	spec := &redisTargetSpec{opts: opts, user: cred.user, passwordInURL: cred.urlPassword != "", bigKeysReplica: bigKeysReplica}
	switch u.Scheme {
	case "unix":
		spec.label = "unix://" + opts.Addr
		spec.hostPort = opts.Addr
	default:
		spec.label = u.Scheme + "://" + opts.Addr
		spec.hostPort = opts.Addr
	}
	if !utf8.ValidString(spec.label) {
		return nil, errors.New("redis target host is not valid UTF-8")
	}
	// INFO, CLIENT LIST and CONFIG are server-wide: a /db in the URL is
	// accepted and ignored, so the user needs no SELECT permission.
	opts.DB = 0
	opts.Username, opts.Password = "", ""
	opts.CredentialsProviderContext = cred.provider()
	opts.Protocol = 2
	opts.ClientName = "stall_exporter"
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = 1
	opts.DialerRetries = 1
	opts.PoolSize = 2
	opts.PipelinePoolSize = -1 // one pool: a scrape uses a single connection
	opts.MinIdleConns = 0
	opts.MaxIdleConns = 2
	opts.ConnMaxIdleTime = 10 * time.Minute
	if opts.DialTimeout == 0 { // ?dial_timeout= wins for its target
		opts.DialTimeout = s.dialTimeout
	}
	if u.Scheme == "rediss" {
		tc, err := s.tls.config(opts.TLSConfig)
		if err != nil {
			return nil, err
		}
		opts.TLSConfig = tc
	}
	return spec, nil
}

// redactedURL prints a URL without its password.
func redactedURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	return c.String()
}

func (t redisTLSSettings) config(base *tls.Config) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		c = base.Clone()
	}
	if t.serverName != "" {
		c.ServerName = t.serverName
	}
	c.InsecureSkipVerify = c.InsecureSkipVerify || t.insecureSkipVerify // ?skip_verify=true or the flag
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("--redis.tls.ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis.tls.ca-file %s: no PEM certificates", t.caFile)
		}
		c.RootCAs = pool
	}
	if t.certFile != "" || t.keyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--redis.tls.cert-file/--redis.tls.key-file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// redisAllowlist decides which /probe targets may be scraped: the exact
// host:port (or socket path) entries of --redis.probe.allowed-targets, the
// anchored --redis.probe.allowed-targets-regexp, and every --redis.addr.
type redisAllowlist struct {
	exact map[string]bool
	re    *regexp.Regexp
}

func newRedisAllowlist(list []string, pattern string, s redisConnSettings) (*redisAllowlist, error) {
	a := &redisAllowlist{exact: map[string]bool{}}
	for _, e := range list {
		spec, err := parseRedisTarget(e, s, false)
		if err != nil {
			return nil, fmt.Errorf("--redis.probe.allowed-targets: %w", err)
		}
		a.exact[spec.hostPort] = true
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

func (a *redisAllowlist) allowed(hostPort string) bool {
	if a.exact[hostPort] {
		return true
	}
	if a.re != nil && a.re.MatchString(hostPort) {
		return true
	}
	// Names are compared as written, never resolved: the allowlist names
	// what Prometheus is configured to send.
	return false
}

// newClient returns a client on a copy of the options: go-redis fills in
// defaults in the Options it is given, and spec.opts is shared.
func (s *redisTargetSpec) newClient() *redis.Client {
	o := *s.opts
	return redis.NewClient(&o)
}
