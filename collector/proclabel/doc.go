// Package proclabel names processes and cgroups in bounded label values,
// the same way for every collector that attributes work to a process: the
// DNS collector (who asks for PTR records), the writeback collector (who is
// paused in balance_dirty_pages(), who dirties pages) and the per-cgroup
// dirty state.
//
// A process is named by three labels: comm (/proc/<pid>/comm), main (what a
// JVM runs, from its cmdline: Main) and cgroup (Cgroup: the systemd unit,
// container or Kubernetes pod its cgroup v2 path belongs to). cgroup.go
// turns cgroup v2 paths and ids into those names (Cgroup, CgroupNames,
// ProcCgroup) and finds the cgroup v2 mount (FindCgroup2Root) and a v1
// controller's (FindCgroup1Root); main.go reads a JVM's main class;
// table.go bounds the series (Table: at most N processes, the rest
// comm="other", an idle one giving its place up).
package proclabel
