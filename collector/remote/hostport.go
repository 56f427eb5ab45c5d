package remote

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/stall-exporter/stall_exporter/collector"
)

// NormalizeHostPort checks an address — a configured target, a /probe
// target, an address a name server announced — and returns its one
// spelling: host:port and nothing else (no scheme, path, query, user,
// zone, percent-encoding, space or control character), a port 1–65535
// without leading zeros, the host as NormalizeHost gives it, an IPv6
// address in brackets. So one target is one /probe cache entry, one
// connection and one label, however it was written. Errors quote the
// input, cut and made printable (Shown).
func NormalizeHostPort(a string) (string, error) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return "", fmt.Errorf("%s: want host:port", Shown(a))
	}
	host, port := a[:i], a[i+1:]
	p, err := NormalizePort(port)
	if err != nil {
		return "", fmt.Errorf("%s: %w", Shown(a), err)
	}
	if !strings.HasPrefix(host, "[") && strings.Contains(host, ":") {
		return "", fmt.Errorf("%s: want host:port, an IPv6 address in brackets ([addr]:port)", Shown(a))
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return "", fmt.Errorf("%s: %w", Shown(a), err)
	}
	return net.JoinHostPort(h, p), nil
}

// NormalizePort checks a port, 1–65535 in decimal digits, and drops
// leading zeros.
func NormalizePort(p string) (string, error) {
	n, err := strconv.Atoi(p)
	if p == "" || strings.Trim(p, "0123456789") != "" || err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %s is not a number 1-65535", Shown(p))
	}
	return strconv.Itoa(n), nil
}

// NormalizeHost checks a host and returns its one spelling: an IP address
// in Go's canonical form (an IPv4-mapped IPv6 address as the IPv4 address;
// IPv6 without brackets, which may be given, and without a zone, which may
// not), or a host name in lower case without the root's trailing dot:
// labels of 1–63 letters, digits, '-' (not first or last) and '_', 253
// bytes at most. A name whose last label is all digits ("127.1",
// "010.0.0.1", "0x7f.0.0.1") is refused: it is an IP address in a form some
// resolvers accept and netip does not, and would dodge a CIDR allowlist.
func NormalizeHost(h string) (string, error) {
	bracketed := len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']'
	if bracketed {
		h = h[1 : len(h)-1]
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		switch {
		case ip.Zone() != "":
			return "", errors.New("an IPv6 zone is not accepted")
		case bracketed && ip.Is4():
			return "", errors.New("brackets are for IPv6 addresses")
		}
		return ip.Unmap().String(), nil
	}
	errName := errors.New("the host is not an IP address or a host name")
	name := strings.TrimSuffix(h, ".")
	if bracketed || name == "" || len(name) > 253 {
		return "", errName
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", errName
		}
		for i := 0; i < len(l); i++ {
			// c is l[i] in lower case if it is an ASCII letter (bit 5 set).
			if c := l[i] | 0x20; !('a' <= c && c <= 'z' || '0' <= l[i] && l[i] <= '9' || l[i] == '-' || l[i] == '_') {
				return "", errName
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("%w: an all-digit last label is an IP address in a form not accepted", errName)
	}
	return strings.ToLower(name), nil
}

// maxShown bounds the part of an outside string an error quotes: the
// error is logged, and a peer decides the length of what it sends.
const maxShown = 64

// Shown quotes outside input (a target, a peer's value) for an error
// message or log line: at most 64 bytes (cut at a rune boundary and marked
// "…"), control characters and invalid UTF-8 replaced by U+FFFD
// (collector.LabelValue), in Go quotes.
func Shown(s string) string {
	return strconv.Quote(collector.LabelValue(s, maxShown))
}
