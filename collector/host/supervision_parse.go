package host

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/internal/jvm"
	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// The supervision collector's pure logic: which process is a watched
// service (from comm and cmdline), who owns it (from /proc/<pid>/cgroup), and
// the two fields of /proc/<pid>/status procfs does not parse. Kept apart from
// the /proc walk in supervision.go so each piece is unit-tested and fuzzed.

// Watched services, the values of the service label.
const (
	serviceBroker  = "rocketmq_broker"
	serviceNamesrv = "rocketmq_namesrv"
	serviceRedis   = "redis"
)

// Supervision states, the values of the supervision label. classify says
// how a process gets each one; docs/supervision.md says what they mean for
// an operator.
const (
	stateSystemd   = "systemd"
	stateContainer = "container"
	stateDetached  = "detached"
	stateNohup     = "nohup"
	stateTerminal  = "terminal"
)

// watchedServices and supervisionStates fix the label values and their
// export order: every combination is exported, 0 when empty, so a rule can
// rely on each series existing.
var (
	watchedServices   = [...]string{serviceBroker, serviceNamesrv, serviceRedis}
	supervisionStates = [...]string{stateSystemd, stateContainer, stateDetached, stateNohup, stateTerminal}
)

// The comm values (/proc/<pid>/comm, at most 15 bytes, the executable's base
// name) that make a process a candidate. Everything else is skipped after one
// small read, so a scan of thousands of processes stays cheap and never
// touches another process's memory: reading /proc/<pid>/cmdline takes the
// target's mmap lock, which a process stalled in reclaim may hold.
const (
	commJava   = jvm.Comm
	commRedis  = "redis-server"  // Redis' main thread keeps the binary's name (only its bio/io threads are renamed)
	commValkey = "valkey-server" // the Redis fork distributions now ship as "redis"
)

// mainClasses maps a JVM main class to its service: RocketMQ 4.x/5.x
// (org.apache) and 3.x (com.alibaba, still in production on old hosts).
var mainClasses = map[string]string{
	"org.apache.rocketmq.broker.BrokerStartup":    serviceBroker,
	"org.apache.rocketmq.namesrv.NamesrvStartup":  serviceNamesrv,
	"com.alibaba.rocketmq.broker.BrokerStartup":   serviceBroker,
	"com.alibaba.rocketmq.namesrv.NamesrvStartup": serviceNamesrv,
}

// watchedService says which watched service a process is, from its comm and
// its argv (/proc/<pid>/cmdline split at NUL bytes); "" for any other
// process.
//
// A JVM counts only when the java launcher runs the broker's or name
// server's main class: the first argument that is not a launcher option, the
// class after -m module/, or a -jar whose file is a rocketmq-broker* /
// rocketmq-namesrv* jar (the Maven artifact names, which shaded or
// repackaged runnable jars keep). So the `sh runbroker.sh
// org.apache.rocketmq.broker.BrokerStartup …` wrapper that RocketMQ's
// mqbroker script leaves as the JVM's parent is not counted a second time,
// and a class named only inside an @argfile is not seen.
//
// redis-server and valkey-server count unless they run as Sentinel
// (--sentinel, or the "[sentinel]" that Redis' process title shows): a
// Sentinel holds no data, and counting it would make "one redis per host"
// reasoning wrong.
func watchedService(comm string, argv []string) string {
	switch comm {
	case commRedis, commValkey:
		for _, a := range argv {
			if a == "--sentinel" || strings.Contains(a, "[sentinel]") {
				return ""
			}
		}
		return serviceRedis
	case commJava:
		return jvmService(argv)
	}
	return ""
}

// jvmService is the watched service a JVM runs: the broker's or name
// server's main class (jvm.Main), or a rocketmq-broker* /
// rocketmq-namesrv* jar.
func jvmService(argv []string) string {
	if main, jar := jvm.Main(argv); !jar {
		return mainClasses[main]
	}
	switch base := jvm.ShortName(argv); { // the jar's file name
	case !strings.HasSuffix(base, ".jar"):
		return ""
	case strings.HasPrefix(base, "rocketmq-broker"):
		return serviceBroker
	case strings.HasPrefix(base, "rocketmq-namesrv"):
		return serviceNamesrv
	}
	return ""
}

// statusFields are the two /proc/<pid>/status lines the collector needs and
// procfs' ProcStatus does not parse.
type statusFields struct {
	// SigIgn is the mask of ignored signals; bit n-1 is signal n.
	SigIgn uint64
	// PIDNamespaces is the number of PIDs on the NSpid line (Linux 4.1+): 1
	// in the PID namespace of the procfs mount, more inside a nested one
	// (a container), 0 when the kernel has no NSpid line.
	PIDNamespaces int
}

// ignoresSIGHUP reports whether SIGHUP (signal 1) is ignored. A handler
// (SigCgt) is not ignoring it: the JVM's SIGHUP handler runs the shutdown
// hooks and exits.
func (s statusFields) ignoresSIGHUP() bool { return s.SigIgn&1 != 0 }

var errNoSigIgn = errors.New("no SigIgn line")

// parseStatusFields reads SigIgn (16 hex digits, every kernel since 2.6) and
// NSpid from /proc/<pid>/status. A missing or malformed SigIgn is an error:
// without it a process cannot be classified.
func parseStatusFields(b []byte) (statusFields, error) {
	var s statusFields
	seenSigIgn := false
	for len(b) > 0 {
		var line []byte
		line, b = scan.Line(b)
		key, value, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(key) {
		case "SigIgn":
			v, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 16, 64)
			if err != nil {
				return s, fmt.Errorf("SigIgn %q: %w", bytes.TrimSpace(value), err)
			}
			s.SigIgn, seenSigIgn = v, true
		case "NSpid":
			s.PIDNamespaces = len(bytes.Fields(value))
		}
	}
	if !seenSigIgn {
		return s, errNoSigIgn
	}
	return s, nil
}

// cgroupOwner is what a process's cgroup path says about who runs it.
type cgroupOwner uint8

const (
	ownerUnknown   cgroupOwner = iota // root cgroup, or a path naming no unit or runtime
	ownerService                      // a systemd .service unit
	ownerScope                        // another systemd scope: a login session-N.scope, a systemd-run --scope
	ownerContainer                    // a container runtime's cgroup
)

// ownerOf reads /proc/<pid>/cgroup (as procfs parses it). systemd tracks
// processes in its v1 name=systemd hierarchy or in the v2 hierarchy (the
// line with ID 0 and no controllers); on hybrid hosts both carry the same
// path, so the first of them that is not the root decides. A host without
// systemd has neither; there any hierarchy's path naming a container
// runtime (Docker's cgroupfs driver joins every hierarchy) makes it a
// container.
func ownerOf(cgroups []procfs.Cgroup) cgroupOwner {
	var paths []string
	if i := slices.IndexFunc(cgroups, func(cg procfs.Cgroup) bool { return slices.Contains(cg.Controllers, "name=systemd") }); i >= 0 {
		paths = append(paths, cgroups[i].Path)
	}
	for _, cg := range cgroups {
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			paths = append(paths, cg.Path)
		}
	}
	for _, p := range paths {
		if o := pathOwner(p); o != ownerUnknown {
			return o
		}
	}
	if len(paths) == 0 {
		for _, cg := range cgroups {
			if pathOwner(cg.Path) == ownerContainer {
				return ownerContainer
			}
		}
	}
	return ownerUnknown
}

// pathOwner walks a cgroup path from the innermost component outwards; the
// first component that names an owner decides. Innermost first, so a
// service inside an LXC system container (/lxc.payload.c1/system.slice/
// x.service) is that container's systemd service and a login session
// inside it is a session. ".." components (paths seen from another cgroup
// namespace, e.g. a DaemonSet's) and slices are skipped.
func pathOwner(path string) cgroupOwner {
	for path != "" {
		comp := path
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			comp, path = path[i+1:], path[:i]
		} else {
			path = ""
		}
		switch {
		case comp == "" || comp == "." || comp == "..":
		case containerCgroup(comp):
			return ownerContainer
		case strings.HasSuffix(comp, ".service"):
			return ownerService
		case strings.HasSuffix(comp, ".scope"):
			return ownerScope
		}
	}
	return ownerUnknown
}

// containerCgroup recognises the cgroup names container runtimes create,
// with their systemd and cgroupfs drivers: Docker (docker-<id>.scope,
// /docker/<id>), Kubernetes (kubepods…, cri-containerd-<id>.scope,
// crio-<id>.scope), Podman (libpod-<id>.scope, libpod_parent), LXC
// (lxc.payload.<name>, /lxc/<name>), systemd-nspawn and libvirt
// (machine-<name>.scope) and Amazon ECS (/ecs/<task>/<id>). Runtimes not
// listed are still found by their PID namespace.
func containerCgroup(c string) bool {
	switch {
	case c == "docker", c == "lxc", c == "ecs", c == "libpod_parent":
		return true
	case strings.HasPrefix(c, "kubepods"), strings.HasPrefix(c, "lxc.payload"),
		strings.HasPrefix(c, "cri-containerd-"), strings.HasPrefix(c, "crio-"),
		strings.HasPrefix(c, "libpod-"):
		return true
	case strings.HasSuffix(c, ".scope"):
		return strings.HasPrefix(c, "docker-") || strings.HasPrefix(c, "machine-")
	}
	return false
}

// procFacts is what classify needs to know about one process.
type procFacts struct {
	TTY    int // stat field 7, tty_nr: 0 when the process has no controlling terminal
	Status statusFields
	Owner  cgroupOwner
}

// classify gives a process's supervision state, first match wins:
//
//  1. container: its cgroup is a container runtime's. The runtime
//     supervises the container, and a terminal in it is the runtime's
//     pseudo-terminal, which no client's disconnect hangs up (so `docker run
//     -it` is not "terminal").
//  2. nohup / terminal: it has a controlling terminal. The kernel sends
//     SIGHUP when that terminal hangs up and shells forward SIGHUP to their
//     jobs, so it dies when the session ends unless it ignores SIGHUP
//     (nohup, or Redis, which ignores SIGHUP itself). This comes before the
//     cgroup: a broker started from a shell that logind did not move into a
//     session scope (no pam_systemd) sits in ssh.service's cgroup and dies
//     all the same.
//  3. systemd: its cgroup is a systemd .service.
//  4. container: no cgroup owner, but a nested PID namespace (runtimes
//     containerCgroup does not name; needs NSpid, Linux 4.1+).
//  5. detached: none of these — setsid, a daemon that forked away, another
//     supervisor (OpenRC, supervisord, cron), or a nohup'd process whose
//     terminal has since hung up (the kernel clears tty_nr then).
func classify(f procFacts) string {
	switch {
	case f.Owner == ownerContainer:
		return stateContainer
	case f.TTY != 0 && f.Status.ignoresSIGHUP():
		return stateNohup
	case f.TTY != 0:
		return stateTerminal
	case f.Owner == ownerService:
		return stateSystemd
	case f.Owner == ownerUnknown && f.Status.PIDNamespaces > 1:
		return stateContainer
	}
	return stateDetached
}
