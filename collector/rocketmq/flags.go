package rocketmq

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// flagValues are the rocketmq collector's flags as kingpin parsed them:
// the settings straight into opts, the rest for options() to check.
// registerFlags declares them on an application, so tests parse their own
// command lines instead of mutating the process's flags.
type flagValues struct {
	opts                           options
	namesrv, brokers, probeAllowed []string
	aclFile                        string
}

// flags are the process's flags, parsed by main; only the factory and the
// /probe module read them.
var flags = registerFlags(kingpin.CommandLine)

func registerFlags(app *kingpin.Application) *flagValues {
	f := &flagValues{}
	app.Flag("rocketmq.namesrv",
		"RocketMQ name server host:port to discover brokers from (GET_BROKER_CLUSTER_INFO); repeatable, or a ';'-separated list as in namesrvAddr. Masters and slaves of every cluster are scraped.").StringsVar(&f.namesrv)
	app.Flag("rocketmq.broker",
		"RocketMQ broker host:port (remoting port, usually 10911) to scrape directly, without a name server; repeatable.").StringsVar(&f.brokers)
	app.Flag("rocketmq.timeout",
		"Time limit of one broker's whole scrape (runtime info, plus its config when due: dial, send, reply) and of one discovery round; brokers and name servers are asked concurrently, so a scrape takes at most about this long. Also capped by the scrape's own timeout.").Default("3s").DurationVar(&f.opts.Timeout)
	app.Flag("rocketmq.sample-interval",
		"How often pageCacheLockTimeMills is sampled between scrapes for stall_rocketmq_commitlog_lock_held_sampled_seconds; 0 disables. Each sample is one GET_BROKER_RUNTIME_INFO, which makes a 4.9.4+ broker write two INFO lines to store.log.").
		Default("1s").DurationVar(&f.opts.SampleInterval)
	app.Flag("rocketmq.config-interval",
		"How often each broker's configuration (GET_BROKER_CONFIG) is re-read.").Default("5m").DurationVar(&f.opts.ConfigInterval)
	app.Flag("rocketmq.discovery-interval",
		"How often the name servers are asked for the cluster topology.").Default("30s").DurationVar(&f.opts.DiscoveryInterval)
	app.Flag("rocketmq.unlisted-broker-retention",
		"How long a discovered broker that the name servers stop listing is still scraped before it is dropped. A broker that stops unregisters (its shutdown hook, its closed connection), so this is what keeps a dead broker at stall_rocketmq_up 0 long enough for RocketMQBrokerDown; 0 drops it at once.").
		Default("1h").DurationVar(&f.opts.UnlistedRetention)
	app.Flag("rocketmq.acl-file",
		"File with accessKey=… and secretKey=… lines (optionally securityToken=…) to sign requests to brokers with aclEnable=true.").StringVar(&f.aclFile)
	app.Flag("rocketmq.max-frame-bytes",
		"Largest remoting reply frame accepted, in bytes; the frames read at once by all connections share a budget of twice this (at least 8 MiB).").Default(strconv.Itoa(defaultMaxFrame)).IntVar(&f.opts.MaxFrame)
	app.Flag("rocketmq.probe.allowed-targets",
		"Target allowed for /probe?module=rocketmq: host:port, a host (any port), or a CIDR; repeatable. '*' allows any target. With none, /probe refuses every RocketMQ target (403).").StringsVar(&f.probeAllowed)
	app.Flag("rocketmq.log-dir",
		"Broker log directory (…/logs/rocketmqlogs) whose store.log and watermark.log are followed, read under --path.rootfs; empty disables.").StringVar(&f.opts.LogDir)
	return f
}

// parseAddrs checks and normalises the addresses of a flag
// (--rocketmq.broker, --rocketmq.namesrv): repeated flags and RocketMQ's
// own list form ("10.0.0.9:9876;10.0.0.10:9876", as in namesrvAddr),
// without duplicates, also those that normalising reveals.
func parseAddrs(flag string, values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, a := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			n, err := remote.NormalizeHostPort(a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", flag, err)
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
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

// validate checks the flag values and returns the settings every collector
// of this package shares, /metrics' and /probe's: all but the targets
// (the log directory is cleared). Every error names its flag.
func (f *flagValues) validate() (options, error) {
	opts := f.opts
	opts.LogDir = ""
	err := opts.validate()
	if err != nil {
		return opts, err
	}
	if opts.Allow, err = remote.ParseAllowlist(f.probeAllowed, "", ""); err != nil {
		return opts, fmt.Errorf("--rocketmq.probe.allowed-targets: %w", err)
	}
	if f.aclFile != "" {
		if opts.Credentials, err = remoting.LoadCredentials(f.aclFile); err != nil {
			return opts, fmt.Errorf("--rocketmq.acl-file: %w", err)
		}
	}
	return opts, nil
}

// validateMetrics is validate with the /metrics collector's targets: the
// name servers, the brokers named directly, the log directory.
func (f *flagValues) validateMetrics() (options, error) {
	opts, err := f.validate()
	if err != nil {
		return opts, err
	}
	opts.LogDir = f.opts.LogDir
	if opts.Namesrv, err = parseAddrs("--rocketmq.namesrv", f.namesrv); err != nil {
		return opts, err
	}
	opts.Brokers, err = parseAddrs("--rocketmq.broker", f.brokers)
	return opts, err
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

// BrokerAddrs returns the host:port of every --rocketmq.broker, as the
// rocketmq collector spells it: what the tcpqueues collector matches
// against this host's addresses to find the broker ports whose send
// queues it sums. Brokers found only through a name server are not
// included (they are known only after a discovery round, and a broker's
// address in the name server is often not the one it is reached by
// here): name those ports with --tcpqueues.port rocketmq_broker=10911. A
// malformed flag returns nothing; the rocketmq collector's start refuses it.
func BrokerAddrs() []string {
	out, err := parseAddrs("--rocketmq.broker", flags.brokers)
	if err != nil {
		return nil
	}
	return out
}
