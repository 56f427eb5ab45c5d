// Package collector is stall_exporter's collector framework: what a
// collector implements, and the one way to do each thing every collector
// does. The collectors are packages beneath it (host, redis, rocketmq,
// dns), imported by main for their init, which calls Register (and
// RegisterProbe); each declares its own flags (--<collector>.<option>) and
// implements Update. The exporter turns each name into a
// --[no-]collector.<name> flag, wraps every Update with a timeout and the
// stall_scrape_collector_* self-metrics, and starts the background loop of
// a Runner.
//
// Where things are: collector.go is the contract (Collector, Runner,
// Config, ProbeModule, IdleCloser) and the registry (Register, Build,
// RegisterProbe, BuildProbes); metric.go declares metrics and documents
// them for docs/metrics.md (NewMetric for constant metrics, Declare* for
// the ones a collector keeps between scrapes); label.go makes a value from
// outside a safe label (Label, LabelValue); problems.go counts bad input
// and background panics (Problems, stall_collector_parse_errors_total);
// paths.go re-roots file reads under --path.procfs, --path.sysfs and
// --path.rootfs (Paths); statelog.go logs a state that fails and recovers
// (StateLog, ReadReason); retry.go keeps a background source going
// (Retry, Backoff, Sleep); deadline.go bounds the requests to a remote
// target within a scrape (ScrapeDeadline). What the remote collectors share
// beyond this (host:port, allowlists, down reasons, the reply budget) is
// in collector/remote; collector/probecache keeps /probe's targets.
package collector
