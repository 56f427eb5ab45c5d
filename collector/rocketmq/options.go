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
	aclFileFlag = kingpin.Flag("rocketmq.acl-file",
		"File with accessKey=… and secretKey=… lines (optionally securityToken=…) to sign requests to brokers with aclEnable=true.").String()
	maxFrameFlag = kingpin.Flag("rocketmq.max-frame-bytes",
		"Largest remoting reply frame accepted, in bytes (the broker's own limit is 16 MiB).").Default(strconv.Itoa(remoting.DefaultMaxFrame)).Int()
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

// checkHostPort checks a --rocketmq.broker or --rocketmq.namesrv value:
// host:port with a non-empty host and a port 1–65535.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("%q: want host:port, the host is empty", a)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: port %q is not a number 1-65535", a, port)
	}
	return nil
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
			if _, err := netip.ParsePrefix(a); err != nil {
				return fmt.Errorf("%q is not a CIDR: %w", a, err)
			}
		case strings.ContainsAny(a, " \t"):
			return fmt.Errorf("%q: want host:port, a host, a CIDR or '*'", a)
		default:
			if _, _, err := net.SplitHostPort(a); err == nil {
				if err := checkHostPort(a); err != nil {
					return err
				}
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

func optionsFromFlags() (options, error) {
	opts := options{
		Timeout:           *timeoutFlag,
		SampleInterval:    *sampleFlag,
		ConfigInterval:    *configIntervalFlag,
		DiscoveryInterval: *discoveryIntervalFlag,
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
	case o.MaxFrame < minFrame || o.MaxFrame > maxFrame:
		return fmt.Errorf("--rocketmq.max-frame-bytes must be between %d and %d, got %d", minFrame, maxFrame, o.MaxFrame)
	}
	return nil
}
