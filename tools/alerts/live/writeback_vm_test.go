//go:build livevm

package live

import "testing"

// TestThrottledContainerAttribution is the container case: the writer's cgroup has a memory.max
// (containerMemory) far below the host's memory, so the kernel pauses it at its own cgroup's
// dirty limit while the host's dirty pages stay below even the host's background threshold. Its
// pauses must be counted exactly all the same, and who dirties read though the host is at rest.
// It needs cgroup writeback: the memory controller enabled for the root's children on cgroup v2
// (scripts/live-vm.sh with MEMORY_CGROUP=1), which no host with the memory controller on cgroup v1
// has, so it is built only with the livevm tag, for the VM:
//
//	PKG=tools/alerts/live TAGS=livevm MEMORY_CGROUP=1 RUN='^TestThrottledContainerAttribution$' scripts/live-vm.sh
func TestThrottledContainerAttribution(t *testing.T) {
	throttledWriter(t, containerMemory)
}
