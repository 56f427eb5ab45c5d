package dns

import (
	"errors"
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/procfs"
)

// options are what the flags decide; registerFlags declares them on an
// application, so tests parse their own command lines instead of mutating
// the process-wide flags, and validated returns them checked.
type options struct {
	iface        string
	timeout      time.Duration
	maxPending   int
	maxTCPFlows  int
	maxResolvers int
	maxProcesses int
	attribution  string // auto, ebpf, proc, none
	cgroupRoot   string
	procInterval time.Duration
	socketBuffer int

	// open opens the capture; tests open it in another network namespace,
	// or give a fake. Default: openCapture(iface, socketBuffer).
	open func() (packetSource, error)
	// netFS is where proc mode reads net/{udp,tcp}{,6}; default the
	// collector's procfs (the exporter's own network namespace).
	netFS *procfs.FS
}

// flags are the process's flags, parsed by main and read only by the
// collector's factory.
var flags = registerFlags(kingpin.CommandLine)

func registerFlags(app *kingpin.Application) *options {
	o := &options{}
	app.Flag("dns.interface",
		"Capture DNS on this interface only; by default on all interfaces of the exporter's network namespace.").Default("").StringVar(&o.iface)
	app.Flag("dns.timeout",
		"A query with no response after this long counts as timed out (glibc and the JDK wait 5 s per try).").Default("5s").DurationVar(&o.timeout)
	app.Flag("dns.max-pending",
		fmt.Sprintf("Queries tracked while waiting for a response; each costs %d bytes, allocated as used.", pendingEntrySize)).Default("16384").IntVar(&o.maxPending)
	app.Flag("dns.max-tcp-flows",
		fmt.Sprintf("DNS-over-TCP connection directions followed at once; each costs about %d bytes.", tcpFlowSize)).Default("1024").IntVar(&o.maxTCPFlows)
	app.Flag("dns.max-resolvers",
		"Resolver addresses with their own resolver label, in the order first queried; later ones are \"other\".").Default("8").IntVar(&o.maxResolvers)
	app.Flag("dns.max-processes",
		"Processes (name, a JVM's main class or jar, cgroup) with their own stall_dns_process_lookups_total series; the rest are \"other\".").Default("20").IntVar(&o.maxProcesses)
	app.Flag("dns.attribution",
		"Per-process attribution: auto (ebpf, else proc), ebpf (cgroup sock_addr hooks; needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN before 5.8, and cgroup v2), proc (sample /proc; a lower bound), none.").
		Default("auto").EnumVar(&o.attribution, "auto", "ebpf", "proc", "none")
	app.Flag("dns.cgroup-root",
		"cgroup v2 directory the eBPF programs attach to; by default the cgroup2 mount found in /proc/self/mountinfo (in a container, mount the host's and name it here).").Default("").StringVar(&o.cgroupRoot)
	app.Flag("dns.proc-interval",
		"Interval of the /proc sampler in proc attribution mode (each sample reads /proc/net/{udp,tcp}{,6}, and every process's fds when a socket to port 53 is open).").Default("1s").DurationVar(&o.procInterval)
	app.Flag("dns.socket-buffer",
		"Size in bytes of the capture's receive ring, shared with the kernel (TPACKET_V3 blocks of 128 KiB, at least 4); packets arriving while every block waits to be read are dropped and counted.").Default("4194304").IntVar(&o.socketBuffer)
	return o
}

// validate returns the options if the flag values are valid; every
// refusal names its flag, so a bad command line stops the exporter at
// start with a clear message.
func (o *options) validate() (options, error) {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.timeout <= 0, "--dns.timeout must be positive, not %v", o.timeout)
	check(o.procInterval <= 0, "--dns.proc-interval must be positive, not %v", o.procInterval)
	for _, n := range []struct {
		flag string
		v    int
	}{{"max-pending", o.maxPending}, {"max-tcp-flows", o.maxTCPFlows}, {"max-resolvers", o.maxResolvers}, {"max-processes", o.maxProcesses}} {
		check(n.v < 1, "--dns.%s must be at least 1, not %d", n.flag, n.v)
	}
	return *o, errors.Join(errs...)
}
