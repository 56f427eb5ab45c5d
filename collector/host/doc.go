// Package host holds the collectors of the kernel's own signals, one file
// each: page cache and reclaim (vmstat.go, sysctl.go, zoneinfo.go,
// meminfo.go), pressure stall information (pressure.go), disks
// (diskstats.go), what leaves the network interfaces (egress.go: transmit
// counters, root qdiscs and cloud allowance counters, read over rtnetlink
// by egress_netlink.go (the requests, on internal/netlinkdump's dump
// loop) and egress_parse.go and over SIOCETHTOOL by
// egress_ethtool.go; the interfaces, one table per reader, in
// egress_links.go, chosen by egress_devices.go), the 1 s
// sampler of all three (sampler.go, sampler_egress.go), the kernel log
// (kmsg.go), hung-task detector state (hungtask.go) and process
// supervision (supervision.go). egress lives here rather than in a
// package of its own because the sampler's transmit view is one more
// source of the one sampler (its tick, overrun and gap handling) and its
// flags are the host collectors' (flags.go). Their flags are declared in flags.go. The
// parsers of the files read on every scrape and sampler tick (/proc/vmstat,
// /proc/zoneinfo, /proc/diskstats, /dev/kmsg records) are ours and live
// beside their collector (*_parse.go); those files are read through one
// source each (source.go), shared by the scrape and the sampler, and the
// block devices are chosen by one filter (devicefilter.go); the files read
// less often go through procfs. Fixtures of several kernel generations are
// under fixtures/, each with a README and a golden output (make golden).
package host
