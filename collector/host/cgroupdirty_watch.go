package host

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/procfs"
)

// The watched cgroups: the cgroups of the processes the supervision
// collector identifies (RocketMQ broker and name server, redis-server).
// Supervision publishes them after each scan (every
// --supervision.scan-interval at most); the cgroup_dirty collector and the
// sampler read the last published set. collector.Build builds each
// collector on its own, so they meet in a process-wide map keyed by the
// procfs path, as the sources do (source.go).

// watchedCgroup is one watched process's cgroups, from /proc/<pid>/cgroup.
type watchedCgroup struct {
	service string
	v2Path  string // the "0::" line's path; "" without one
	v1Mem   string // the v1 memory controller's path; "" without one
}

// watchedCgroupOf picks a process's v2 path and v1 memory path from its
// /proc/<pid>/cgroup lines.
func watchedCgroupOf(service string, cgroups []procfs.Cgroup) watchedCgroup {
	w := watchedCgroup{service: service}
	for _, cg := range cgroups {
		switch {
		case cg.HierarchyID == 0 && len(cg.Controllers) == 0:
			w.v2Path = cg.Path
		case slices.Contains(cg.Controllers, "memory"):
			w.v1Mem = cg.Path
		}
	}
	return w
}

// path is the process's cgroup in the memory hierarchy of the given
// version, "" when it has none there.
func (w watchedCgroup) path(v2 bool) string {
	p := w.v1Mem
	if v2 {
		p = w.v2Path
	}
	// Seen from another cgroup namespace the path starts with "/..": not
	// under the mount the exporter reads.
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "/..") {
		return ""
	}
	return p
}

// watchedSet is the last published set. Safe for concurrent use.
type watchedSet struct {
	mu   sync.Mutex
	list []watchedCgroup
	gen  uint64 // bumped by every publish that changes the set
}

var watchedSets sync.Map // procfs path → *watchedSet

// watchedAt returns the one watched set of a procfs mount.
func watchedAt(procfsPath string) *watchedSet {
	w, _ := watchedSets.LoadOrStore(procfsPath, &watchedSet{})
	return w.(*watchedSet)
}

// publish replaces the set (deduplicated and sorted: a JVM's threads or
// two redis-servers in one unit are one cgroup).
func (w *watchedSet) publish(list []watchedCgroup) {
	list = slices.Clone(list)
	slices.SortFunc(list, func(a, b watchedCgroup) int {
		return strings.Compare(a.service+"\x00"+a.v2Path+"\x00"+a.v1Mem, b.service+"\x00"+b.v2Path+"\x00"+b.v1Mem)
	})
	list = slices.Compact(list)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Equal(list, w.list) {
		w.list = list
		w.gen++
	}
}

// get returns the set and its generation.
func (w *watchedSet) get() ([]watchedCgroup, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.list, w.gen
}
