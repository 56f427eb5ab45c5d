// Package writeback is the opt-in "writeback" collector
// (--collector.writeback): who is paused by dirty-page throttling, for how
// long, and who fills the page cache — the two questions incident 5's page
// ("writers on this host were paused 30 % of the last minute") leaves to
// iotop. See docs/writeback.md.
//
// Who is paused: an eBPF program on the tracepoint
// writeback:balance_dirty_pages counts, in the kernel, per process (tgid)
// and cgroup, the planned sleep of every call that sleeps and the number
// of sleeps. The tracepoint fires only in the throttled path of
// balance_dirty_pages(), so the program costs nothing while nobody is
// throttled. It reads the record's pause field at the offset the event's
// format file gives: that file is read from tracefs, mounted privately
// where the host mounts none. A raw tracepoint would need no tracefs, but
// its arguments are the TP_PROTO's, which changed in 6.x (the thresholds
// became a struct dirty_throttle_control pointer, pause moved from the
// 11th argument to the 7th) and are in jiffies, whose length (CONFIG_HZ)
// user space cannot read; the classic tracepoint's record gives pause in
// ms under a name, the same in 5.10, 6.1 and 6.18, whatever the other
// fields are called.
//
// Who dirties: /proc/<pid>/io write_bytes of every process, read only
// while the host's dirty and writeback pages are past the background
// threshold (/proc/vmstat through the host collectors' shared source) or
// the program counted pauses since the last scrape (a cgroup at its own
// throttle point).
//
// Where things are: collector.go is the collector and its Update,
// flags.go the flags, metrics.go the metrics; format.go parses the event's
// format file and checks its layout, tracefs.go finds that file;
// prog.go is the eBPF program and the layout of its maps, pause.go loads,
// attaches and drains it; dirtied.go reads who dirtied what. Processes
// and cgroups are named, and the series bounded, by collector/proclabel.
// testdata/ holds the event's format file of two kernels (its README
// says where each was captured).
package writeback
