package rocketmq

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// flagValues are the rocketmq collector's flags as kingpin parsed them;
// options() checks them. registerFlags declares them on an application,
// so tests parse their own command lines instead of mutating the
// process's flags.
type flagValues struct {
	namesrv, brokers, probeAllowed                                                *[]string
	timeout, sampleInterval, configInterval, discoveryInterval, unlistedRetention *time.Duration
	aclFile, logDir                                                               *string
	maxFrame                                                                      *int
}

// flags are the process's flags, parsed by main; only the factory and the
// /probe module read them.
var flags = registerFlags(kingpin.CommandLine)

func registerFlags(app *kingpin.Application) *flagValues {
	f := &flagValues{}
	f.namesrv = app.Flag("rocketmq.namesrv",
		"RocketMQ name server host:port to discover brokers from (GET_BROKER_CLUSTER_INFO); repeatable, or a ';'-separated list as in namesrvAddr. Masters and slaves of every cluster are scraped.").Strings()
	f.brokers = app.Flag("rocketmq.broker",
		"RocketMQ broker host:port (remoting port, usually 10911) to scrape directly, without a name server; repeatable.").Strings()
	f.timeout = app.Flag("rocketmq.timeout",
		"Time limit of one broker's whole scrape (runtime info, plus its config when due: dial, send, reply) and of one discovery round; brokers and name servers are asked concurrently, so a scrape takes at most about this long. Also capped by the scrape's own timeout.").Default("3s").Duration()
	f.sampleInterval = app.Flag("rocketmq.sample-interval",
		"How often pageCacheLockTimeMills is sampled between scrapes for stall_rocketmq_commitlog_lock_held_sampled_seconds; 0 disables. Each sample is one GET_BROKER_RUNTIME_INFO, which makes a 4.9.4+ broker write two INFO lines to store.log.").
		Default("1s").Duration()
	f.configInterval = app.Flag("rocketmq.config-interval",
		"How often each broker's configuration (GET_BROKER_CONFIG) is re-read.").Default("5m").Duration()
	f.discoveryInterval = app.Flag("rocketmq.discovery-interval",
		"How often the name servers are asked for the cluster topology.").Default("30s").Duration()
	f.unlistedRetention = app.Flag("rocketmq.unlisted-broker-retention",
		"How long a discovered broker that the name servers stop listing is still scraped before it is dropped. A broker that stops unregisters (its shutdown hook, its closed connection), so this is what keeps a dead broker at stall_rocketmq_up 0 long enough for RocketMQBrokerDown; 0 drops it at once.").
		Default("1h").Duration()
	f.aclFile = app.Flag("rocketmq.acl-file",
		"File with accessKey=… and secretKey=… lines (optionally securityToken=…) to sign requests to brokers with aclEnable=true.").String()
	f.maxFrame = app.Flag("rocketmq.max-frame-bytes",
		"Largest remoting reply frame accepted, in bytes; the frames read at once by all connections share a budget of twice this (at least 8 MiB).").Default(strconv.Itoa(defaultMaxFrame)).Int()
	f.probeAllowed = app.Flag("rocketmq.probe.allowed-targets",
		"Target allowed for /probe?module=rocketmq: host:port, a host (any port), or a CIDR; repeatable. '*' allows any target. With none, /probe refuses every RocketMQ target (403).").Strings()
	f.logDir = app.Flag("rocketmq.log-dir",
		"Broker log directory (…/logs/rocketmqlogs) whose store.log and watermark.log are followed, read under --path.rootfs; empty disables.").String()
	return f
}

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
		n, err := remote.NormalizeHostPort(a)
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

// optionsFromFlags are the process's options for a /probe collector.
func optionsFromFlags() (options, error) { return flags.options() }

// options checks the flag values and returns the settings every collector
// of this package shares, /metrics' and /probe's: all but the targets.
// Every error names its flag.
func (f *flagValues) options() (options, error) {
	opts := options{
		Timeout:           *f.timeout,
		SampleInterval:    *f.sampleInterval,
		ConfigInterval:    *f.configInterval,
		DiscoveryInterval: *f.discoveryInterval,
		UnlistedRetention: *f.unlistedRetention,
		MaxFrame:          *f.maxFrame,
	}
	err := opts.validate()
	if err != nil {
		return opts, err
	}
	if opts.Allow, err = remote.ParseAllowlist(*f.probeAllowed, "", ""); err != nil {
		return opts, fmt.Errorf("--rocketmq.probe.allowed-targets: %w", err)
	}
	if *f.aclFile != "" {
		cr, err := remoting.LoadCredentials(*f.aclFile)
		if err != nil {
			return opts, fmt.Errorf("--rocketmq.acl-file: %w", err)
		}
		opts.Credentials = cr
	}
	return opts, nil
}

// metricsOptions are options with the /metrics collector's targets: the
// name servers, the brokers named directly, the log directory.
func (f *flagValues) metricsOptions() (options, error) {
	opts, err := f.options()
	if err != nil {
		return opts, err
	}
	opts.LogDir = *f.logDir
	if opts.Namesrv, err = normalizeAddrs("--rocketmq.namesrv", splitAddrs(*f.namesrv)); err != nil {
		return opts, err
	}
	if opts.Brokers, err = normalizeAddrs("--rocketmq.broker", splitAddrs(*f.brokers)); err != nil {
		return opts, err
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
	Allow             *remote.Allowlist // --rocketmq.probe.allowed-targets

	// dial opens the connections; net.Dialer's when nil. Tests under
	// testing/synctest give rocketmqtest.Net's.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
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
