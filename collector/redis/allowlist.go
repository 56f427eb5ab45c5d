package redis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// allowlist decides which /probe targets may be scraped, and how. A /probe
// request names the address, never how it is reached: otherwise an allowed
// rediss:// target could be asked for over plain TCP (the configured
// password in clear text), or as another ACL user. So:
//
//   - every --redis.addr, and every --redis.probe.allowed-targets entry
//     written as a target (with a scheme, a user or a query:
//     rediss://monitor@cache-1:6380?password_file=…, unix:///run/redis.sock),
//     is probed with the scheme, TLS settings, user and password source it
//     was configured with;
//   - the other --redis.probe.allowed-targets entries are remote.Allowlist
//     entries ("*", host:port, host — port 6379 —, CIDR) and are probed
//     as redis:// with the default credentials, as a host:port in
//     --redis.addr is;
//   - an address matched only by the anchored
//     --redis.probe.allowed-targets-regexp (over host:port or the socket
//     path) is probed with --redis.probe.scheme and the default
//     credentials.
//
// Configured targets come first: a CIDR or "*" that also covers one does
// not change how it is reached. Socket paths are allowed only by a unix://
// entry or the regexp, never by "*".
type allowlist struct {
	exact    map[string]*targetSpec // by host:port or socket path
	plain    *remote.Allowlist      // probed as redis://
	pattern  *remote.Allowlist      // probed with reScheme
	reScheme string                 // "redis" or "rediss"
	conn     connSettings
}

// newAllowlist parses the configured entries: addrs are the --redis.addr
// targets, allowed the --redis.probe.allowed-targets, reScheme the
// --redis.probe.scheme (redis or rediss, kingpin's enum). An address
// configured twice in different ways is an error, since a probe could not
// say which one it means. Every error names the flag, and the entry, to
// fix.
func newAllowlist(addrs, allowed []string, pattern, reScheme string, s connSettings) (*allowlist, error) {
	a := &allowlist{exact: map[string]*targetSpec{}, reScheme: reScheme, conn: s}
	var plain []string
	from := map[string]string{} // host:port → the flag of its first entry
	for _, list := range []struct {
		flag    string
		entries []string
	}{{"--redis.addr", addrs}, {"--redis.probe.allowed-targets", allowed}} {
		for _, e := range list.entries {
			if list.flag != "--redis.addr" && !isTargetEntry(e) {
				plain = append(plain, e)
				continue
			}
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
	var err error
	if a.plain, err = remote.ParseAllowlist(plain, "", "6379"); err != nil {
		return nil, fmt.Errorf("--redis.probe.allowed-targets: %w", err)
	}
	if a.pattern, err = remote.ParseAllowlist(nil, pattern, ""); err != nil {
		return nil, fmt.Errorf("--redis.probe.allowed-targets-regexp: %w", err)
	}
	return a, nil
}

// isTargetEntry tells an entry written as a target (a scheme, a user or a
// query) from a remote.Allowlist entry.
func isTargetEntry(e string) bool {
	return strings.Contains(e, "://") || strings.ContainsAny(e, "@?")
}

// The refusals name the flag that would allow the target and the rule it
// is matched by, never the target (the caller logs it) nor what the
// allowlist holds. Matching is by the configured strings, normalised
// (remote.NormalizeHostPort) but never resolved: a name is not the address
// it resolves to, since resolving at probe time would let whoever controls
// the name's DNS record choose the host probed (DNS rebinding), and a
// configured name would silently follow its record's changes. So
// localhost:6379 configured allows localhost:6379, not 127.0.0.1:6379, and
// the answer says to probe the spelling that is configured.
var (
	// errProbeSchemeMismatch refuses a /probe target whose scheme differs
	// from the one configured for its address.
	errProbeSchemeMismatch = fmt.Errorf("%w: the target's scheme differs from the configured one (a /probe target names host:port; scheme, TLS and user come from the configuration)", collector.ErrTargetNotAllowed)
	errProbeAddressRefused = fmt.Errorf("%w: the address is not in --redis.addr or --redis.probe.allowed-targets and does not match --redis.probe.allowed-targets-regexp; add it to --redis.probe.allowed-targets to allow it. Names and IP addresses are compared as written, never resolved: probe the spelling that is configured (localhost:6379 and 127.0.0.1:6379 are different targets)", collector.ErrTargetNotAllowed)
	errProbeSocketRefused  = fmt.Errorf("%w: the socket is not in --redis.addr or --redis.probe.allowed-targets (as unix:///path) and does not match --redis.probe.allowed-targets-regexp; add unix:///path to --redis.probe.allowed-targets to allow it (\"*\" never allows a socket)", collector.ErrTargetNotAllowed)
)

// resolve returns the configured spec for a /probe address: the exact
// entry, or a spec with the scheme of the entry or regexp that allows it
// and the default credentials. It fails with ErrTargetNotAllowed (wrapped)
// when the address is not allowed or names another scheme.
func (a *allowlist) resolve(p probeAddress) (*targetSpec, error) {
	spec, ok := a.exact[p.hostPort]
	if !ok {
		u := url.URL{Scheme: a.reScheme, Host: p.hostPort}
		switch {
		case p.scheme == "unix" && a.pattern.Allows(p.hostPort):
			u = url.URL{Scheme: "unix", Path: p.hostPort}
		case p.scheme == "unix":
			return nil, errProbeSocketRefused
		case a.plain.Allows(p.hostPort):
			u.Scheme = "redis"
		case !a.pattern.Allows(p.hostPort):
			return nil, errProbeAddressRefused
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

// A /probe request may not choose a user, a credential source (a file, a
// variable) or a connection option, nor name a port out of range.
var (
	errCredentialsInProbeTarget = errors.New("a /probe target may not carry a user or password; configure --redis.user, --redis.password-file or --redis.password-env")
	errProbeTargetForm          = errors.New("a /probe target is host:port, redis://host:port[/db], rediss://host:port[/db] or unix:///path, nothing else (no user, password or query)")
	errProbePort                = errors.New("the port of a /probe target must be a number from 1 to 65535")
)

// probeAddress is all a /probe request may say about a Redis target.
type probeAddress struct {
	scheme   string // "redis", "rediss", "unix", or "" when only host:port was given
	hostPort string // remote.NormalizeHostPort's host:port (default port 6379), or the socket path
}

// dbPath is the optional /db of a redis:// URL; the collector reads only
// server-wide data, so the database is ignored.
var dbPath = regexp.MustCompile(`^(/[0-9]{0,5})?$`)

// parseProbeAddress reads a /probe target: an address (and an ignored
// /db), nothing else. The scheme is lower case, as url.Parse reads it.
func parseProbeAddress(raw string) (probeAddress, error) {
	u, named, err := parseTargetURL(raw)
	if errors.Is(err, errNotURL) {
		return probeAddress{}, errProbeTargetForm
	} else if err != nil {
		return probeAddress{}, err
	}
	if u.User != nil {
		return probeAddress{}, errCredentialsInProbeTarget
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return probeAddress{}, errProbeTargetForm
	}
	var p probeAddress
	if named {
		p.scheme = u.Scheme
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" {
			return probeAddress{}, errProbeTargetForm
		}
		if p.hostPort, err = socketPath(u.Path); err != nil {
			return probeAddress{}, fmt.Errorf("%w: %w", errProbeTargetForm, err)
		}
	case "redis", "rediss":
		if !dbPath.MatchString(u.Path) || u.Hostname() == "" {
			return probeAddress{}, errProbeTargetForm
		}
		port := u.Port()
		if port == "" {
			port = "6379"
		}
		if _, err := remote.NormalizePort(port); err != nil {
			return probeAddress{}, fmt.Errorf("%w: %w", errProbePort, err)
		}
		if p.hostPort, err = remote.NormalizeHostPort(net.JoinHostPort(u.Hostname(), port)); err != nil {
			return probeAddress{}, fmt.Errorf("%w: %w", errProbeTargetForm, err)
		}
	default:
		return probeAddress{}, errProbeTargetForm
	}
	return p, nil
}

// socketPath checks the path of a unix:// target: absolute and clean
// (path.Clean leaves it as it is), so that one socket has one spelling.
func socketPath(p string) (string, error) {
	if p == "" || p[0] != '/' || path.Clean(p) != p || p == "/" || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
		return "", fmt.Errorf("the socket path %s is not an absolute, clean path", remote.Shown(p))
	}
	return p, nil
}
