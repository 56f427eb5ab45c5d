package writeback

import (
	"fmt"

	"github.com/alecthomas/kingpin/v2"
)

// options are what the flags decide; registerFlags declares them on an
// application, so tests parse their own command lines instead of mutating
// the process-wide flags, and validated returns them checked.
type options struct {
	maxProcesses int
	// mapEntries bounds the BPF map (pauseMapEntries); tests make it
	// small to fill it.
	mapEntries int
	// cgroupRoot is the cgroup v2 mount the program's cgroup ids are
	// resolved under; "" finds it in /proc/self/mountinfo.
	cgroupRoot string
}

// flags are the process's flags, parsed by main and read only by the
// collector's factory.
var flags = registerFlags(kingpin.CommandLine)

func registerFlags(app *kingpin.Application) *options {
	o := &options{mapEntries: pauseMapEntries}
	app.Flag("writeback.max-processes",
		"Processes (name, a JVM's main class or jar, cgroup) with their own stall_dirty_throttle_pause_seconds_total and stall_process_dirtied_bytes_total series; the rest are \"other\".").Default("20").IntVar(&o.maxProcesses)
	app.Flag("writeback.cgroup-root",
		"cgroup v2 mount under which the paused tasks' cgroup ids are named; by default the cgroup2 mount found in /proc/self/mountinfo (in a container, mount the host's and name it here).").Default("").StringVar(&o.cgroupRoot)
	return o
}

// validated returns the options if the flag values are valid.
func (o *options) validated() (options, error) {
	if o.maxProcesses < 1 {
		return *o, fmt.Errorf("--writeback.max-processes must be at least 1, not %d", o.maxProcesses)
	}
	return *o, nil
}
