package remote

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
)

// Allowlist decides which targets a /probe module may connect to, so that
// /probe cannot be used to reach arbitrary hosts. Both modules take the
// same entries (--redis.probe.allowed-targets,
// --rocketmq.probe.allowed-targets):
//
//   - "*": any target;
//   - host:port: that target, compared after NormalizeHostPort, so
//     [::ffff:10.0.0.1]:06379 is 10.0.0.1:6379;
//   - host: that host on the module's default port (Redis: 6379, as in
//     --redis.addr), or on any port for a module without one (RocketMQ,
//     whose brokers listen on 10911, 10909 and 10912);
//   - a CIDR: any target whose IP address is in it (an IPv4-mapped
//     prefix is its IPv4 prefix); host names are compared, never resolved,
//     so a CIDR admits only targets written as addresses;
//
// and, where the module has a flag for it, an anchored regular expression
// over the normalised target. It is safe for concurrent use once built.
type Allowlist struct {
	defaultPort string
	any         bool
	exact       map[string]bool // normalised host:port
	hosts       map[string]bool // any port
	prefixes    []netip.Prefix
	re          *regexp.Regexp
}

// ParseAllowlist parses allowlist entries and an optional regular
// expression (empty: none; anchored at both ends). defaultPort is the port
// of an entry that names a host only; "" means any port. Every error names
// the entry at fault; the caller adds the flag.
func ParseAllowlist(entries []string, pattern, defaultPort string) (*Allowlist, error) {
	a := &Allowlist{defaultPort: defaultPort, exact: map[string]bool{}, hosts: map[string]bool{}}
	for _, e := range entries {
		if err := a.add(strings.TrimSpace(e)); err != nil {
			return nil, err
		}
	}
	if pattern != "" {
		re, err := regexp.Compile("^(?:" + pattern + ")$")
		if err != nil {
			return nil, fmt.Errorf("regexp %s: %w", Shown(pattern), err)
		}
		a.re = re
	}
	return a, nil
}

func (a *Allowlist) add(e string) error {
	switch {
	case e == "":
		return errors.New("empty entry")
	case e == "*":
		a.any = true
	case strings.Contains(e, "/"):
		p, err := parsePrefix(e)
		if err != nil {
			return fmt.Errorf("%s is not a CIDR: %w", Shown(e), err)
		}
		a.prefixes = append(a.prefixes, p)
	default:
		if hp, err := NormalizeHostPort(e); err == nil {
			a.exact[hp] = true
			return nil
		}
		h, err := NormalizeHost(e)
		if err != nil {
			if strings.Contains(e, ":") {
				_, hpErr := NormalizeHostPort(e)
				return hpErr
			}
			return fmt.Errorf("%s: want host:port, a host, a CIDR or '*': %w", Shown(e), err)
		}
		if a.defaultPort != "" {
			a.exact[net.JoinHostPort(h, a.defaultPort)] = true
		} else {
			a.hosts[h] = true
		}
	}
	return nil
}

// Allows reports whether target, as NormalizeHostPort returns it, is
// allowed.
func (a *Allowlist) Allows(target string) bool {
	if a == nil {
		return false
	}
	if a.any || a.exact[target] || a.re != nil && a.re.MatchString(target) {
		return true
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	if a.hosts[host] {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		for _, p := range a.prefixes {
			if p.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// parsePrefix parses an allowlist CIDR; an IPv4-mapped IPv6 prefix
// (::ffff:10.0.0.0/104) is its IPv4 prefix, since targets are normalised
// to IPv4.
func parsePrefix(a string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(a)
	if err != nil {
		return p, err
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
