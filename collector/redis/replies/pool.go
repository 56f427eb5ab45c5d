package replies

import (
	"net/netip"
	"strings"
)

// PoolOf recovers the pool a client belongs to from its CLIENT SETNAME
// name: the name without the part that tells one instance of a pool from
// the next. It returns a prefix of name (no allocation), or "" when
// nothing but an instance identity is left (a bare UUID, an IP address).
//
// Removed, in this order:
//   - a leading process id: "12345@host-7" → "host-7" (Java's default
//     RuntimeMXBean name);
//   - a trailing port: "app-3:6000" → "app-3";
//   - for a host name with a domain, the domain when the first label holds
//     the instance: "batch-07.dc1.example.com" → "batch";
//   - a trailing UUID, or a hex id of 12 or more digits (container ids,
//     hashes): "billing-3f2a8c1e-9b7d-4c2e-8a1f-0e5d6c7b8a9f" → "billing";
//   - a Kubernetes generated suffix: "-<pod-template-hash>-<5>" of a
//     Deployment's pod ("web-7d9f8b6c5d-x2x9z" → "web") or the "-<5>" of a
//     DaemonSet, Job or bare generateName pod ("fluentd-x7k2p" → "fluentd"),
//     both drawn from Kubernetes' vowel-free alphabet;
//   - then one instance number: a StatefulSet ordinal or a numbered worker
//     ("app-3-0" → "app-3", "consumer-1" → "consumer", "worker_12" →
//     "worker"), an IPv4 address spelled with dashes ("ip-10-0-3-17" →
//     "ip"), or digits glued to a word of two or more letters ("web01" →
//     "web"; "app-v2" and "s3" are kept).
//
// Names that match none of these are their own pool.
func PoolOf(name string) string {
	s := name
	if i := strings.IndexByte(s, '@'); i > 0 && allDigits(s[:i]) {
		s = s[i+1:]
	}
	if i := strings.LastIndexByte(s, ':'); i > 0 && allDigits(s[i+1:]) && !strings.Contains(s[:i], ":") {
		s = s[:i]
	}
	if isIPAddr(s) {
		return ""
	}
	if i := strings.IndexByte(s, '.'); i > 0 {
		// A host name: the first label names the host; if it carries an
		// instance marker, the pool is what is left of it.
		if first := s[:i]; isDNSLabel(first) && isDomain(s[i+1:]) {
			if p := stripInstance(first); p != first {
				return p
			}
		}
	}
	return stripInstance(s)
}

// stripInstance removes generated suffixes and one instance number from
// the end of s, then trailing separators.
func stripInstance(s string) string {
	s = stripUUID(s)
	s = stripPodSuffix(s)
	s = stripNumber(s)
	return strings.TrimRight(s, separators)
}

// separators may stand between a pool name and its instance part.
const separators = "-_.:/#"

func isSep(b byte) bool { return strings.IndexByte(separators, b) >= 0 }

// cutSegment splits s at its last separator: head ends just before it.
// ok is false when s has no separator.
func cutSegment(s string) (head, seg string, ok bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if isSep(s[i]) {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

// stripUUID removes a trailing UUID (8-4-4-4-12 hex digits) or a trailing
// run of 12 or more hex digits with at least one digit (container ids,
// UUIDs without dashes, hashes), with the separator before it.
func stripUUID(s string) string {
	const uuidLen = 36
	if n := len(s); n >= uuidLen && isUUID(s[n-uuidLen:]) && (n == uuidLen || isSep(s[n-uuidLen-1])) {
		return trimSep(s[:n-uuidLen])
	}
	head, seg, _ := cutSegment(s)
	if len(seg) >= 12 && allHex(seg) && strings.ContainsAny(seg, digits) {
		return head
	}
	return s
}

func isUUID(s string) bool {
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

// podAlphabet is the alphabet of Kubernetes' generated names
// (k8s.io/apimachinery/pkg/util/rand: no vowels, no 0, 1, 3), used for
// generateName suffixes and the encoded pod-template-hash.
const podAlphabet = "bcdfghjklmnpqrstvwxz2456789"

func inPodAlphabet(s string) bool { return strings.Trim(s, podAlphabet) == "" }

// stripPodSuffix removes "-<5 random>" and, before it, a Deployment's
// "-<pod-template-hash>" (up to 10 characters: the decimal digits of a
// 32-bit hash, each mapped to the alphabet).
func stripPodSuffix(s string) string {
	head, seg, ok := cutSegment(s)
	if !ok || len(seg) != 5 || !inPodAlphabet(seg) || s[len(head)] != '-' || head == "" {
		return s
	}
	if h2, hash, ok := cutSegment(head); ok && h2 != "" && head[len(h2)] == '-' &&
		len(hash) >= 4 && len(hash) <= 10 && inPodAlphabet(hash) {
		return h2
	}
	return head
}

// stripNumber removes one instance number: a dashed IPv4 address, a
// numeric segment after a separator, or digits glued to a word of at
// least two letters.
func stripNumber(s string) string {
	if head, ok := cutDashedIPv4(s); ok {
		return head
	}
	if head, seg, ok := cutSegment(s); ok && allDigits(seg) {
		return head
	}
	// Glued digits: "web01" → "web"; the letters before must be a word of
	// two or more ("v2", "s3" are versions or names, not instances).
	i := len(s)
	for i > 0 && isDigit(s[i-1]) {
		i--
	}
	if i == len(s) || i == 0 {
		return s
	}
	j := i
	for j > 0 && isLetter(s[j-1]) {
		j--
	}
	if i-j >= 2 {
		return s[:i]
	}
	return s
}

// cutDashedIPv4 removes a trailing "a-b-c-d" (1–3 digits each), as in
// EC2's "ip-10-0-3-17", and the dash before it.
func cutDashedIPv4(s string) (string, bool) {
	h := s
	for k := range 4 {
		i := len(h)
		for i > 0 && isDigit(h[i-1]) {
			i--
		}
		if i == len(h) || len(h)-i > 3 {
			return s, false
		}
		h = h[:i]
		if k < 3 {
			if h == "" || h[len(h)-1] != '-' {
				return s, false
			}
			h = h[:len(h)-1]
		}
	}
	switch {
	case h == "":
		return "", true
	case h[len(h)-1] == '-':
		return h[:len(h)-1], true
	}
	return s, false
}

// isIPAddr: an IPv4 or IPv6 address, possibly in brackets. The cheap
// character check keeps netip's error allocation off the common path.
func isIPAddr(s string) bool {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if s == "" || strings.Count(s, ".") != 3 && strings.Count(s, ":") < 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isHex(c) && c != '.' && c != ':' {
			return false
		}
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

func trimSep(s string) string {
	if n := len(s); n > 0 && isSep(s[n-1]) {
		return s[:n-1]
	}
	return s
}

// isDNSLabel: letters, digits and dashes, as a host name's first label.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLetter(c) && !isDigit(c) && c != '-' {
			return false
		}
	}
	return true
}

// isDomain: dot-separated DNS labels ending in a label that starts with a
// letter ("dc1.example.com", "ec2.internal", "svc.cluster.local").
func isDomain(s string) bool {
	last := ""
	for s != "" {
		var label string
		label, s, _ = strings.Cut(s, ".")
		if !isDNSLabel(label) {
			return false
		}
		last = label
	}
	return last != "" && isLetter(last[0])
}

const digits = "0123456789"

func allDigits(s string) bool { return s != "" && strings.Trim(s, digits) == "" }
func allHex(s string) bool    { return s != "" && strings.Trim(s, digits+"abcdefABCDEF") == "" }

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isHex(c byte) bool    { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
