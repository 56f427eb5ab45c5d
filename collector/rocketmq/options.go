package rocketmq

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

var (
	namesrvFlag = kingpin.Flag("rocketmq.namesrv",
		"RocketMQ name server host:port to discover brokers from (GET_BROKER_CLUSTER_INFO); repeatable, or a ';'-separated list as in namesrvAddr. Masters and slaves of every cluster are scraped.").Strings()
	brokerFlag = kingpin.Flag("rocketmq.broker",
		"RocketMQ broker host:port (remoting port, usually 10911) to scrape directly, without a name server; repeatable.").Strings()
	timeoutFlag = kingpin.Flag("rocketmq.timeout",
		"Time limit of one broker's whole scrape (runtime info, plus its config when due: dial, send, reply) and of one discovery round; brokers and name servers are asked concurrently, so a scrape takes at most about this long. Also capped by the scrape's own timeout.").Default("3s").Duration()
	sampleFlag = kingpin.Flag("rocketmq.sample-interval",
		"How often pageCacheLockTimeMills is sampled between scrapes for stall_rocketmq_commitlog_lock_held_sampled_seconds; 0 disables. Each sample is one GET_BROKER_RUNTIME_INFO, which makes a 4.9.4+ broker write two INFO lines to store.log.").
		Default("1s").Duration()
	configIntervalFlag = kingpin.Flag("rocketmq.config-interval",
		"How often each broker's configuration (GET_BROKER_CONFIG) is re-read.").Default("5m").Duration()
	discoveryIntervalFlag = kingpin.Flag("rocketmq.discovery-interval",
		"How often the name servers are asked for the cluster topology.").Default("30s").Duration()
	unlistedRetentionFlag = kingpin.Flag("rocketmq.unlisted-broker-retention",
		"How long a discovered broker that the name servers stop listing is still scraped before it is dropped. A broker that stops unregisters (its shutdown hook, its closed connection), so this is what keeps a dead broker at stall_rocketmq_up 0 long enough for RocketMQBrokerDown; 0 drops it at once.").
		Default("1h").Duration()
	aclFileFlag = kingpin.Flag("rocketmq.acl-file",
		"File with accessKey=… and secretKey=… lines (optionally securityToken=…) to sign requests to brokers with aclEnable=true.").String()
	maxFrameFlag = kingpin.Flag("rocketmq.max-frame-bytes",
		"Largest remoting reply frame accepted, in bytes; the frames read at once by all connections share a budget of twice this (at least 8 MiB).").Default(strconv.Itoa(defaultMaxFrame)).Int()
	probeAllowFlag = kingpin.Flag("rocketmq.probe.allowed-targets",
		"Target allowed for /probe?module=rocketmq: host:port, a host (any port), or a CIDR; repeatable. '*' allows any target. With none, /probe refuses every RocketMQ target (403).").Strings()
	logDirFlag = kingpin.Flag("rocketmq.log-dir",
		"Broker log directory (…/logs/rocketmqlogs) whose store.log and watermark.log are followed, read under --path.rootfs; empty disables.").String()
)

// splitAddrs accepts repeated flags and RocketMQ's own list form
// ("10.0.0.9:9876;10.0.0.10:9876", as in namesrvAddr), dropping duplicates.
func splitAddrs(values []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, a := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// normalizeAddrs checks and normalises the addresses of a flag
// (--rocketmq.broker, --rocketmq.namesrv), given as splitAddrs returns them,
// and drops the duplicates that normalising reveals.
func normalizeAddrs(flag string, addrs []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range addrs {
		n, err := normalizeHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// normalizeHostPort checks a broker or name server address — a
// --rocketmq.broker or --rocketmq.namesrv value, a /probe target — and
// returns its one spelling: host:port and nothing else (no path, query,
// user, zone, percent-encoding, space or control character), a port
// 1–65535 without leading zeros, the host as normalizeHost gives it, an
// IPv6 address in brackets. So one broker is one /probe cache entry, one
// connection and one broker label, however the target was written.
func normalizeHostPort(a string) (string, error) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return "", fmt.Errorf("%s: want host:port", shown(a))
	}
	host, port := a[:i], a[i+1:]
	p, err := normalizePort(port)
	if err != nil {
		return "", fmt.Errorf("%s: %w", shown(a), err)
	}
	if !strings.HasPrefix(host, "[") && strings.Contains(host, ":") {
		return "", fmt.Errorf("%s: want host:port, an IPv6 address in brackets ([addr]:port)", shown(a))
	}
	h, err := normalizeHost(host)
	if err != nil {
		return "", fmt.Errorf("%s: %w", shown(a), err)
	}
	return net.JoinHostPort(h, p), nil
}

// normalizePort checks a port, 1–65535 in decimal digits, and drops leading
// zeros.
func normalizePort(p string) (string, error) {
	n, err := strconv.Atoi(p)
	if p == "" || strings.Trim(p, "0123456789") != "" || err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %s is not a number 1-65535", shown(p))
	}
	return strconv.Itoa(n), nil
}

// normalizeHost checks a host and returns its one spelling: an IP address
// in Go's canonical form (an IPv4-mapped IPv6 address as the IPv4 address;
// IPv6 without brackets, which may be given, and without a zone, which may
// not), or a host name in lower case without the root's trailing dot:
// labels of 1–63 letters, digits, '-' (not first or last) and '_', 253
// bytes at most. A name whose last label is all digits ("127.1",
// "010.0.0.1", "0x7f.0.0.1") is refused: it is an IP address in a form some
// resolvers accept and netip does not, and would dodge a CIDR allowlist.
func normalizeHost(h string) (string, error) {
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

// parsePrefix parses an allowlist CIDR; an IPv4-mapped IPv6 prefix
// (::ffff:10.0.0.0/104) is its IPv4 prefix, since targets are normalised to
// IPv4.
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

// checkAllowed checks the /probe allowlist entries: "*", host:port, a
// bare host, or a CIDR.
func checkAllowed(allow []string) error {
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			return errors.New("empty entry")
		case a == "*":
		case strings.Contains(a, "/"):
			if _, err := parsePrefix(a); err != nil {
				return fmt.Errorf("%s is not a CIDR: %w", shown(a), err)
			}
		default:
			_, hpErr := normalizeHostPort(a)
			_, hErr := normalizeHost(a)
			if hpErr != nil && hErr != nil {
				if strings.Contains(a, ":") {
					return hpErr
				}
				return fmt.Errorf("%s: want host:port, a host, a CIDR or '*': %w", shown(a), hErr)
			}
		}
	}
	return nil
}

// Limits of --rocketmq.max-frame-bytes: a 5.x runtime-info reply alone is
// about 3 KB and cluster info grows with the brokers, so less than 64 KiB
// only makes requests fail; more than 1 GiB is no limit at all.
const (
	minFrame = 64 << 10
	maxFrame = 1 << 30
)

// defaultMaxFrame is the default --rocketmq.max-frame-bytes: 4 MiB, not
// the broker's own 16 MiB, because every frame read at once shares a
// budget of twice the limit (replyBudget), which the deploy kit's 64 MiB
// must hold. The largest reply asked for is a name server's cluster info,
// about 130 bytes per broker group (4 MiB: some 30,000 groups); a
// broker's runtime info is 2–5 KB and its config tens of KB.
const defaultMaxFrame = 4 << 20

func optionsFromFlags() (options, error) {
	opts := options{
		Timeout:           *timeoutFlag,
		SampleInterval:    *sampleFlag,
		ConfigInterval:    *configIntervalFlag,
		DiscoveryInterval: *discoveryIntervalFlag,
		UnlistedRetention: *unlistedRetentionFlag,
		MaxFrame:          *maxFrameFlag,
	}
	if err := opts.validate(); err != nil {
		return opts, err
	}
	if err := checkAllowed(*probeAllowFlag); err != nil {
		return opts, fmt.Errorf("--rocketmq.probe.allowed-targets: %w", err)
	}
	if *aclFileFlag != "" {
		cr, err := remoting.LoadCredentials(*aclFileFlag)
		if err != nil {
			return opts, fmt.Errorf("--rocketmq.acl-file: %w", err)
		}
		opts.Credentials = cr
	}
	return opts, nil
}

// options is the parsed configuration of one rocketmq collector.
type options struct {
	Namesrv           []string
	Brokers           []string
	LogDir            string
	Timeout           time.Duration
	SampleInterval    time.Duration
	ConfigInterval    time.Duration
	DiscoveryInterval time.Duration
	UnlistedRetention time.Duration // see --rocketmq.unlisted-broker-retention; 0 drops at once
	MaxFrame          int
	Credentials       *remoting.Credentials
}

// validate rejects settings that cannot work.
func (o options) validate() error {
	switch {
	case o.Timeout <= 0:
		return fmt.Errorf("--rocketmq.timeout must be positive, got %s", o.Timeout)
	case o.SampleInterval < 0:
		return fmt.Errorf("--rocketmq.sample-interval must be 0 (off) or positive, got %s", o.SampleInterval)
	case o.ConfigInterval <= 0:
		return fmt.Errorf("--rocketmq.config-interval must be positive, got %s", o.ConfigInterval)
	case o.DiscoveryInterval <= 0:
		return fmt.Errorf("--rocketmq.discovery-interval must be positive, got %s", o.DiscoveryInterval)
	case o.UnlistedRetention < 0:
		return fmt.Errorf("--rocketmq.unlisted-broker-retention must be 0 (drop at once) or positive, got %s", o.UnlistedRetention)
	case o.MaxFrame < minFrame || o.MaxFrame > maxFrame:
		return fmt.Errorf("--rocketmq.max-frame-bytes must be between %d and %d, got %d", minFrame, maxFrame, o.MaxFrame)
	}
	return nil
}
