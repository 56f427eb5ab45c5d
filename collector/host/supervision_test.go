package host

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/procfs"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// fakeProcess is one /proc/<pid> directory of a fixture procfs, in the
// formats of Linux 3.10–6.x.
type fakeProcess struct {
	pid    int
	comm   string
	argv   []string
	state  byte   // R, S, Z, …; 0 means S
	tty    int    // tty_nr: 34816 is /dev/pts/0 (major 136)
	flags  uint   // PF_* (0x00200000 is a kernel thread)
	start  uint64 // starttime; 0 means 1000+pid
	sigIgn uint64
	nspid  []int  // nil: a kernel without the NSpid line (before 4.1)
	cgroup string // the whole /proc/<pid>/cgroup file
}

// The cgroup files of the hosts the fixtures describe.
const (
	// CentOS 7 (cgroup v1, systemd 219): every hierarchy listed.
	cgV1Session = "11:devices:/user.slice\n10:memory:/\n3:cpuacct,cpu:/\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n"
	cgV1Service = "11:devices:/system.slice/rocketmq-namesrv.service\n10:memory:/\n3:cpuacct,cpu:/\n1:name=systemd:/system.slice/rocketmq-namesrv.service\n"
	cgV1Docker  = "11:devices:/docker/4f1c0b6e8d5a\n10:memory:/docker/4f1c0b6e8d5a\n3:cpuacct,cpu:/docker/4f1c0b6e8d5a\n1:name=systemd:/docker/4f1c0b6e8d5a\n"
	cgV1Kubepod = "11:devices:/kubepods/burstable/pod8a1e/0c3f\n10:memory:/kubepods/burstable/pod8a1e/0c3f\n1:name=systemd:/kubepods/burstable/pod8a1e/0c3f\n"
	// Debian 10 (hybrid): name=systemd and the v2 line carry the same path.
	cgHybridService = "12:memory:/system.slice/redis-server.service\n1:name=systemd:/system.slice/redis-server.service\n0::/system.slice/redis-server.service\n"
	// A hybrid host where only the v2 line names the unit.
	cgHybridV2Only = "1:name=systemd:/\n0::/system.slice/rocketmq-broker.service\n"
	// Pure v2 (RHEL 9, Ubuntu 24.04).
	cgV2Service     = "0::/system.slice/rocketmq-broker.service\n"
	cgV2UserService = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/rocketmq-broker.service\n"
	cgV2Session     = "0::/user.slice/user-1000.slice/session-5.scope\n"
	cgV2SSHService  = "0::/system.slice/ssh.service\n" // a shell logind did not move (no pam_systemd)
	cgV2Containerd  = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8a1e.slice/cri-containerd-0c3f.scope\n"
	cgV2DockerScope = "0::/system.slice/docker-4f1c0b6e8d5a.scope\n"
	cgV2Podman      = "0::/machine.slice/libpod-9d2e.scope/container\n"
	cgV2Relative    = "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod77.slice/crio-51aa.scope\n" // seen from a DaemonSet's cgroup namespace
	cgV2LXCService  = "0::/lxc.payload.mq1/system.slice/rocketmq-broker.service\n"
	cgV2LXC         = "0::/lxc.payload.mq1\n"
	cgV2LXCSession  = "0::/lxc.payload.mq1/user.slice/user-0.slice/session-2.scope\n" // an ssh login inside a system container
	cgV2Unknown     = "0::/default/7be0\n"                                            // containerd without Kubernetes (nerdctl)
	cgV2Root        = "0::/\n"
	// A host without systemd (sysvinit, OpenRC): controller hierarchies only.
	cgNoSystemdDocker = "4:memory:/docker/4f1c0b6e8d5a\n3:cpu,cpuacct:/docker/4f1c0b6e8d5a\n"
	cgNoSystemdRoot   = "4:memory:/\n3:cpu,cpuacct:/\n"
)

// Command lines as RocketMQ's runbroker.sh / runserver.sh and Redis leave them.
var (
	argvBroker = []string{"/usr/lib/jvm/java-8-openjdk/bin/java", "-server", "-Xms8g", "-Xmx8g",
		"-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-verbose:gc", "-Xloggc:/dev/shm/rmq_broker_gc_%p_%t.log",
		"-XX:-OmitStackTraceInFastThrow", "-XX:+AlwaysPreTouch", "-XX:MaxDirectMemorySize=15g",
		"-Djava.ext.dirs=/usr/lib/jvm/java-8-openjdk/jre/lib/ext:/opt/rocketmq/bin/../lib",
		"-cp", ".:/opt/rocketmq/bin/../conf:", "org.apache.rocketmq.broker.BrokerStartup",
		"-c", "/opt/rocketmq/conf/broker.conf"}
	argvNamesrv = []string{"java", "-server", "-Xms4g", "-Xmx4g", "-Xmn2g", "-XX:+UseConcMarkSweepGC",
		"-cp", ".:/opt/rocketmq/bin/../conf:/opt/rocketmq/bin/../lib/*:", "org.apache.rocketmq.namesrv.NamesrvStartup"}
	argvRunbroker = []string{"sh", "/opt/rocketmq/bin/runbroker.sh", "org.apache.rocketmq.broker.BrokerStartup", "-c", "/opt/rocketmq/conf/broker.conf"}
	argvRedis     = []string{"/usr/bin/redis-server 127.0.0.1:6379"}
)

// writeFakeProc writes a procfs with the given processes into a new
// directory and returns it.
func writeFakeProc(t testing.TB, procs ...fakeProcess) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(p.pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		state, start := p.state, p.start
		if state == 0 {
			state = 'S'
		}
		if start == 0 {
			start = 1000 + uint64(p.pid)
		}
		var cmdline []byte
		for _, a := range p.argv {
			cmdline = append(append(cmdline, a...), 0)
		}
		stat := fmt.Sprintf("%d (%s) %c 1 %d %d %d -1 %d 120 0 3 0 40 12 0 0 20 0 31 0 %d 6723457024 52301 18446744073709551615 1 1 0 0 0 0 0 %d 16384 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
			p.pid, p.comm, state, p.pid, p.pid, p.tty, p.flags, start, p.sigIgn)
		status := fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\t%c (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t1\n", p.comm, state, p.pid, p.pid)
		if p.nspid != nil {
			status += "NSpid:"
			for _, n := range p.nspid {
				status += fmt.Sprintf("\t%d", n)
			}
			status += "\n"
		}
		status += fmt.Sprintf("Threads:\t31\nSigQ:\t0/96364\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t%016x\nSigCgt:\t0000000000004000\nCapInh:\t0000000000000000\n", p.sigIgn)
		for name, content := range map[string][]byte{
			"comm": []byte(p.comm + "\n"), "cmdline": cmdline, "stat": []byte(stat),
			"status": []byte(status), "cgroup": []byte(p.cgroup),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), content, 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// replaceFakeFile gives a file of writeFakeProc's tree new content. The
// files are read-only, like /proc's: only root could write over them.
func replaceFakeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o444); err != nil {
		t.Fatal(err)
	}
}

// initProcess is PID 1, present in every fixture: without it the collector
// concludes that hidepid hides other users' processes.
var initProcess = fakeProcess{pid: 1, comm: "systemd", argv: []string{"/sbin/init"}, cgroup: "0::/init.scope\n"}

func newTestSupervision(t testing.TB, proc string) (*supervisionCollector, *collector.Problems) {
	t.Helper()
	cfg := testConfig(t, "supervision", proc, "", nil)
	return newSupervision(cfg, testSettings(t)), cfg.Problems
}

func mustProc(t testing.TB, fs procfs.FS, pid int) procfs.Proc {
	t.Helper()
	p, err := fs.Proc(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// supervisionResult is one Update's samples: "service/state" → count for
// stall_watched_processes, and the scanned and unreadable gauges.
type supervisionResult struct {
	counts map[string]float64
	gauges map[string]float64
	err    error
}

// collectSupervision stays a reader of a Result, not a collectortest.Compare:
// the scans of the real /proc can only bound their counts (≥ 1), and the
// fixture tests name the few non-zero of the 15 series (nonZero).
func collectSupervision(t testing.TB, c *supervisionCollector) supervisionResult {
	t.Helper()
	res := scrape(t, c)
	r := supervisionResult{counts: map[string]float64{}, gauges: map[string]float64{}, err: res.Err}
	for _, m := range res.Metrics {
		switch m.Name {
		case "stall_watched_processes":
			r.counts[m.Labels["service"]+"/"+m.Labels["supervision"]] = m.Value
		case "stall_supervision_scanned_processes":
			r.gauges["scanned"] = m.Value
		case "stall_supervision_unreadable_processes":
			r.gauges["unreadable"] = m.Value
		default:
			t.Errorf("unexpected metric %s", m.Name)
		}
	}
	return r
}

// nonZero renders the non-zero counts sorted, for exact comparison.
func (r supervisionResult) nonZero() string {
	var out []string
	for k, v := range r.counts {
		if v != 0 {
			out = append(out, fmt.Sprintf("%s=%v", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestSupervisionClassification classifies a fixture procfs holding every
// kind of host the collector meets: cgroup v1, hybrid and v2 paths, the
// container runtimes' paths (systemd and cgroupfs drivers, and a path seen
// from another cgroup namespace), login sessions, terminals with and
// without SIGHUP ignored, and the processes that must not count.
func TestSupervisionClassification(t *testing.T) {
	const pts0, hupIgnored, redisIgnores = 34816, 0x1, 0x3001 // Redis ignores SIGHUP, SIGPIPE and SIGALRM itself
	cases := []struct {
		want string // service/state, "" when not counted
		p    fakeProcess
	}{
		{"", initProcess},
		// Watched, one per case.
		{"rocketmq_broker/terminal", fakeProcess{pid: 100, comm: "java", argv: argvBroker, tty: pts0, cgroup: cgV1Session}},                                                                       // terminal (incident 1)
		{"rocketmq_namesrv/nohup", fakeProcess{pid: 101, comm: "java", argv: argvNamesrv, tty: pts0, sigIgn: hupIgnored, cgroup: cgV1Session}},                                                    // nohup
		{"rocketmq_namesrv/systemd", fakeProcess{pid: 102, comm: "java", argv: argvNamesrv, cgroup: cgV1Service}},                                                                                 // systemd (v1)
		{"rocketmq_broker/systemd", fakeProcess{pid: 103, comm: "java", argv: argvBroker, cgroup: cgHybridV2Only}},                                                                                // systemd (v2 line only)
		{"rocketmq_broker/systemd", fakeProcess{pid: 104, comm: "java", argv: argvBroker, cgroup: cgV2Service, nspid: []int{104}}},                                                                // systemd (v2)
		{"rocketmq_broker/systemd", fakeProcess{pid: 105, comm: "java", argv: argvBroker, cgroup: cgV2UserService, nspid: []int{105}}},                                                            // systemd (user manager)
		{"rocketmq_broker/systemd", fakeProcess{pid: 106, comm: "java", argv: argvBroker, cgroup: cgV2Service, nspid: []int{106, 1}}},                                                             // systemd (PrivatePIDs=yes)
		{"rocketmq_broker/terminal", fakeProcess{pid: 107, comm: "java", argv: argvBroker, tty: pts0, cgroup: cgV2SSHService, nspid: []int{107}}},                                                 // terminal despite the .service
		{"rocketmq_broker/detached", fakeProcess{pid: 108, comm: "java", argv: argvBroker, cgroup: cgV2Session, nspid: []int{108}}},                                                               // detached (setsid, or nohup after logout)
		{"rocketmq_broker/container", fakeProcess{pid: 109, comm: "java", argv: argvBroker, cgroup: cgV1Docker}},                                                                                  // container
		{"rocketmq_namesrv/container", fakeProcess{pid: 110, comm: "java", argv: argvNamesrv, cgroup: cgV1Kubepod}},                                                                               // container
		{"rocketmq_broker/container", fakeProcess{pid: 111, comm: "java", argv: argvBroker, tty: pts0, cgroup: cgV2Containerd, nspid: []int{111, 1}}},                                             // container, its tty is the runtime's
		{"rocketmq_broker/container", fakeProcess{pid: 112, comm: "java", argv: argvBroker, cgroup: cgV2DockerScope, nspid: []int{112, 1}}},                                                       // container
		{"rocketmq_broker/container", fakeProcess{pid: 113, comm: "java", argv: argvBroker, cgroup: cgV2Podman, nspid: []int{113, 1}}},                                                            // container
		{"rocketmq_broker/container", fakeProcess{pid: 114, comm: "java", argv: argvBroker, cgroup: cgV2Relative, nspid: []int{114, 7}}},                                                          // container
		{"rocketmq_broker/systemd", fakeProcess{pid: 115, comm: "java", argv: argvBroker, cgroup: cgV2LXCService, nspid: []int{115, 230}}},                                                        // systemd inside an LXC system container
		{"rocketmq_broker/container", fakeProcess{pid: 116, comm: "java", argv: argvBroker, cgroup: cgV2LXC, nspid: []int{116, 230}}},                                                             // container
		{"rocketmq_broker/terminal", fakeProcess{pid: 124, comm: "java", argv: argvBroker, tty: pts0, cgroup: cgV2LXCSession, nspid: []int{124, 310}}},                                            // terminal inside the system container
		{"rocketmq_namesrv/detached", fakeProcess{pid: 125, comm: "java", argv: argvNamesrv, cgroup: cgV2LXCSession, nspid: []int{125, 311}}},                                                     // detached inside it
		{"rocketmq_broker/container", fakeProcess{pid: 117, comm: "java", argv: argvBroker, cgroup: cgV2Unknown, nspid: []int{117, 1}}},                                                           // container, by its PID namespace
		{"rocketmq_namesrv/detached", fakeProcess{pid: 118, comm: "java", argv: argvNamesrv, cgroup: cgV2Unknown, nspid: []int{118}}},                                                             // detached: same path, host namespace
		{"rocketmq_broker/container", fakeProcess{pid: 119, comm: "java", argv: argvBroker, cgroup: cgNoSystemdDocker}},                                                                           // container on a host without systemd
		{"rocketmq_broker/detached", fakeProcess{pid: 120, comm: "java", argv: argvBroker, cgroup: cgNoSystemdRoot}},                                                                              // detached
		{"rocketmq_broker/systemd", fakeProcess{pid: 121, comm: "java", argv: []string{"java", "-jar", "/srv/rocketmq-broker-5.1.4-all.jar"}, cgroup: cgV2Service}},                               // systemd
		{"rocketmq_broker/detached", fakeProcess{pid: 122, comm: "java", argv: []string{"java", "-m", "rocketmq.broker/org.apache.rocketmq.broker.BrokerStartup"}, cgroup: cgV2Root}},             // detached
		{"rocketmq_namesrv/terminal", fakeProcess{pid: 123, comm: "java", argv: []string{"java", "-cp", "lib/*", "com.alibaba.rocketmq.namesrv.NamesrvStartup"}, tty: pts0, cgroup: cgV1Session}}, // terminal (RocketMQ 3.x)
		{"redis/nohup", fakeProcess{pid: 130, comm: "redis-server", argv: argvRedis, tty: pts0, sigIgn: redisIgnores, cgroup: cgV2Session}},                                                       // nohup: Redis ignores SIGHUP itself
		{"redis/systemd", fakeProcess{pid: 131, comm: "redis-server", argv: argvRedis, sigIgn: redisIgnores, cgroup: cgHybridService}},                                                            // systemd
		{"redis/detached", fakeProcess{pid: 132, comm: "valkey-server", argv: []string{"valkey-server *:6380"}, sigIgn: redisIgnores, cgroup: cgV2Root}},                                          // detached
		{"redis/terminal", fakeProcess{pid: 133, comm: "redis-server", argv: argvRedis, tty: pts0, cgroup: cgV2Session}},                                                                          // terminal (a build that handles SIGHUP)

		// Not watched.
		{"", fakeProcess{pid: 2, comm: "kthreadd", flags: 0x00208040, cgroup: cgV2Root}},
		{"", fakeProcess{pid: 3, comm: "java", flags: 0x00208040, cgroup: cgV2Root}},                 // a kernel thread named java
		{"", fakeProcess{pid: 200, comm: "sh", argv: argvRunbroker, tty: pts0, cgroup: cgV1Session}}, // the wrapper script, parent of pid 100
		{"", fakeProcess{pid: 201, comm: "java", state: 'Z', tty: pts0, cgroup: cgV1Session}},        // a zombie broker: exited, not reaped
		{"", fakeProcess{pid: 202, comm: "redis-server", state: 'Z', cgroup: cgV2Root}},              // a zombie redis-server
		{"", fakeProcess{pid: 203, comm: "java", argv: []string{"java", "-Xmx1g", "-cp", "/usr/share/elasticsearch/lib/*", "org.elasticsearch.bootstrap.Elasticsearch"}, cgroup: cgV2Service}},
		{"", fakeProcess{pid: 204, comm: "java", argv: []string{"java", "-cp", "tools.jar", "org.apache.rocketmq.tools.command.MQAdminStartup", "org.apache.rocketmq.broker.BrokerStartup"}, tty: pts0, cgroup: cgV2Session}}, // the class is a program argument
		{"", fakeProcess{pid: 205, comm: "java", argv: []string{"java", "-jar", "app.jar", "rocketmq-broker.jar"}, cgroup: cgV2Root}},
		{"", fakeProcess{pid: 206, comm: "redis-server", argv: []string{"redis-server *:26379 [sentinel]"}, sigIgn: redisIgnores, cgroup: cgV2Root}},
		{"", fakeProcess{pid: 207, comm: "redis-server", argv: []string{"redis-server", "/etc/redis/sentinel.conf", "--sentinel"}, sigIgn: redisIgnores, cgroup: cgV2Root}},
		{"", fakeProcess{pid: 208, comm: "redis-sentinel", argv: []string{"/usr/bin/redis-sentinel *:26379"}, cgroup: cgV2Root}},
		{"", fakeProcess{pid: 209, comm: "redis-check-rdb", argv: []string{"redis-check-rdb", "dump.rdb"}, cgroup: cgV2Root}}, // a symlink to redis-server
		{"", fakeProcess{pid: 210, comm: "mqbroker", argv: argvBroker, cgroup: cgV2Root}},                                     // a renamed launcher is not recognised
	}
	procs := make([]fakeProcess, len(cases))
	for i, tc := range cases {
		procs[i] = tc.p
	}
	proc := writeFakeProc(t, procs...)
	// A process that exited between the directory listing and the reads.
	if err := os.MkdirAll(filepath.Join(proc, "300"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, problems := newTestSupervision(t, proc)
	for _, tc := range cases {
		svc, state, err := c.inspect(mustProc(t, c.fs, tc.p.pid), map[int]knownProc{})
		got := ""
		if svc != "" {
			got = svc + "/" + state
		}
		if got != tc.want || err != nil {
			t.Errorf("pid %d (%s, cgroup %q): %q, %v; want %q", tc.p.pid, tc.p.comm, tc.p.cgroup, got, err, tc.want)
		}
	}
	r := collectSupervision(t, c)
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The scan's totals are the per-process states added up.
	expected := supervisionResult{counts: map[string]float64{}}
	for _, tc := range cases {
		if tc.want != "" {
			expected.counts[tc.want]++
		}
	}
	want := expected.nonZero()
	if got := r.nonZero(); got != want {
		t.Errorf("counts:\n got  %s\n want %s", got, want)
	}
	if n := len(r.counts); n != len(watchedServices)*len(supervisionStates) {
		t.Errorf("%d stall_watched_processes series, want every combination (%d)", n, len(watchedServices)*len(supervisionStates))
	}
	if got := r.gauges["scanned"]; got != float64(len(procs)+1) {
		t.Errorf("scanned = %v, want %d", got, len(procs)+1)
	}
	if got := r.gauges["unreadable"]; got != 0 {
		t.Errorf("unreadable = %v, want 0", got)
	}
	if problems.Count() != 0 {
		t.Errorf("%d problems on well-formed files, want 0 (a vanished process is not a problem)", problems.Count())
	}
}

// TestSupervisionBadFiles: a malformed stat or status is counted as a parse
// error and that process skipped; the others are still counted.
func TestSupervisionBadFiles(t *testing.T) {
	proc := writeFakeProc(t, initProcess,
		fakeProcess{pid: 10, comm: "java", argv: argvBroker, cgroup: cgV2Service},
		fakeProcess{pid: 11, comm: "java", argv: argvBroker, cgroup: cgV2Service},
		fakeProcess{pid: 12, comm: "redis-server", argv: argvRedis, cgroup: cgV2Service},
		fakeProcess{pid: 13, comm: "redis-server", argv: argvRedis, cgroup: cgV2Service},
	)
	for file, content := range map[string]string{
		"11/status": "Name:\tjava\nSigIgn:\tzz\n",
		"12/stat":   "12 (redis-server) S\n",
		"13/cgroup": "garbage without colons\n",
	} {
		replaceFakeFile(t, filepath.Join(proc, file), content)
	}
	c, problems := newTestSupervision(t, proc)
	r := collectSupervision(t, c)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.nonZero(); got != "rocketmq_broker/systemd=1" {
		t.Errorf("counts = %s, want rocketmq_broker/systemd=1", got)
	}
	if problems.Count() != 3 {
		t.Errorf("problems = %d, want 3 (status, stat, cgroup)", problems.Count())
	}
}

// TestSupervisionHiddenProcs: without PID 1 in the listing (hidepid=2 as a
// non-root user), the scrape fails with a message naming hidepid, and the
// counts of what was visible are still exported. An empty directory is not
// a procfs.
func TestSupervisionHiddenProcs(t *testing.T) {
	proc := writeFakeProc(t, fakeProcess{pid: 4242, comm: "java", argv: argvBroker, tty: 34816, cgroup: cgV2Session})
	c, _ := newTestSupervision(t, proc)
	r := collectSupervision(t, c)
	if !errors.Is(r.err, errProcHidden) {
		t.Errorf("err = %v, want errProcHidden", r.err)
	}
	if got := r.nonZero(); got != "rocketmq_broker/terminal=1" {
		t.Errorf("counts = %s, want the visible broker", got)
	}
	c, _ = newTestSupervision(t, t.TempDir())
	if r := collectSupervision(t, c); !errors.Is(r.err, errProcEmpty) || len(r.counts) != 15 {
		t.Errorf("empty procfs: err = %v with %d series, want errProcEmpty and 15 zero series", r.err, len(r.counts))
	}
}

// TestSupervisionCache: scrapes within the interval reuse the scan; a
// process's cmdline is read once for its PID and start time, and read
// again when the PID is reused.
func TestSupervisionCache(t *testing.T) {
	synctest.Test(t, testSupervisionCache)
}

func testSupervisionCache(t *testing.T) {
	proc := writeFakeProc(t, initProcess, fakeProcess{pid: 10, comm: "java", argv: argvBroker, tty: 34816, cgroup: cgV2Session})
	c, _ := newTestSupervision(t, proc)
	if got := collectSupervision(t, c).nonZero(); got != "rocketmq_broker/terminal=1" {
		t.Fatalf("first scan: %s", got)
	}
	// The broker is now under systemd and a name server appeared; within the
	// interval nothing is read.
	writeOver := func(ps ...fakeProcess) {
		t.Helper()
		fresh := writeFakeProc(t, ps...)
		for _, p := range ps {
			dst := filepath.Join(proc, fmt.Sprint(p.pid))
			if err := os.RemoveAll(dst); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(fresh, fmt.Sprint(p.pid)), dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeOver(fakeProcess{pid: 10, comm: "java", argv: argvBroker, cgroup: cgV2Service},
		fakeProcess{pid: 11, comm: "java", argv: argvNamesrv, cgroup: cgV2Service})
	collectortest.Advance(29 * time.Second)
	if got := collectSupervision(t, c).nonZero(); got != "rocketmq_broker/terminal=1" {
		t.Errorf("within the interval: %s, want the cached scan", got)
	}
	collectortest.Advance(time.Second)
	if got := collectSupervision(t, c).nonZero(); got != "rocketmq_broker/systemd=1 rocketmq_namesrv/systemd=1" {
		t.Errorf("after the interval: %s", got)
	}
	// Same PID and start time with another cmdline: the identity is cached.
	replaceFakeFile(t, filepath.Join(proc, "10", "cmdline"), "java\x00-cp\x00x\x00com.example.Other\x00")
	collectortest.Advance(30 * time.Second)
	if got := collectSupervision(t, c).nonZero(); got != "rocketmq_broker/systemd=1 rocketmq_namesrv/systemd=1" {
		t.Errorf("cmdline re-read for a known process: %s", got)
	}
	// PID 10 reused by another JVM (new start time): read again.
	writeOver(fakeProcess{pid: 10, comm: "java", start: 99999, argv: []string{"java", "com.example.Other"}, cgroup: cgV2Service})
	collectortest.Advance(30 * time.Second)
	if got := collectSupervision(t, c).nonZero(); got != "rocketmq_namesrv/systemd=1" {
		t.Errorf("reused PID: %s", got)
	}
	if len(c.known) != 2 {
		t.Errorf("identity cache holds %d entries, want 2 (one per live candidate)", len(c.known))
	}
}

func TestParseStatusFields(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     statusFields
		wantErr  bool
	}{
		{"linux 6.x", "Name:\tjava\nNSpid:\t4711\t1\nSigIgn:\t0000000000000001\nSigCgt:\t0000000000004000\n", statusFields{SigIgn: 1, PIDNamespaces: 2}, false},
		{"linux 3.10 without NSpid", "Name:\tredis-server\nSigIgn:\t0000000000003001\n", statusFields{SigIgn: 0x3001}, false},
		{"no trailing newline", "SigIgn:\t0000000000000000", statusFields{}, false},
		{"no SigIgn", "Name:\tjava\nNSpid:\t1\n", statusFields{}, true},
		{"bad SigIgn", "SigIgn:\tnothex\n", statusFields{}, true},
		{"SigIgn overflow", "SigIgn:\t10000000000000000\n", statusFields{}, true},
	} {
		got, err := parseStatusFields([]byte(tc.in))
		if (err != nil) != tc.wantErr || err == nil && got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestWatchedService(t *testing.T) {
	for _, tc := range []struct {
		comm string
		argv []string
		want string
	}{
		{"java", argvBroker, serviceBroker},
		{"java", argvNamesrv, serviceNamesrv},
		{"java", []string{"java", "--class-path", "lib/*", "--add-opens", "java.base/java.nio=ALL-UNNAMED", "org.apache.rocketmq.broker.BrokerStartup"}, serviceBroker},
		{"java", []string{"java", "--module=rocketmq.namesrv/org.apache.rocketmq.namesrv.NamesrvStartup"}, serviceNamesrv},
		{"java", []string{"java", "-jar", "rocketmq-namesrv-4.9.7.jar"}, serviceNamesrv},
		{"java", []string{"java", "-jar", "/opt/lib/rocketmq-broker"}, ""}, // not a jar
		{"java", []string{"java", "-cp"}, ""},
		{"java", []string{"java", "-jar"}, ""},
		{"java", []string{"java", "@/opt/rocketmq/broker.args"}, ""},
		{"java", []string{"java"}, ""},
		{"sh", argvRunbroker, ""},
		{"redis-server", nil, serviceRedis},
		{"valkey-server", []string{"valkey-server *:26379 [sentinel]"}, ""},
		{"redis-sentinel", []string{"redis-sentinel"}, ""},
	} {
		if got := watchedService(tc.comm, tc.argv); got != tc.want {
			t.Errorf("watchedService(%q, %q) = %q, want %q", tc.comm, tc.argv, got, tc.want)
		}
	}
}

// FuzzSupervisionStatus: parseStatusFields never panics, and what it
// accepts has a SigIgn line.
func FuzzSupervisionStatus(f *testing.F) {
	f.Add([]byte("Name:\tjava\nNSpid:\t4711\t1\nSigIgn:\t0000000000000001\n"))
	f.Add([]byte("SigIgn:\t0000000000003001\nSigIgn:\tffffffffffffffff\n"))
	f.Add([]byte("NSpid:\nSigIgn:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseStatusFields(b)
		if err == nil && !bytes.Contains(b, []byte("SigIgn")) {
			t.Errorf("accepted %q without SigIgn", b)
		}
		if s.PIDNamespaces < 0 {
			t.Errorf("negative namespace count %d", s.PIDNamespaces)
		}
	})
}

// FuzzSupervisionCgroup: any cgroup file classifies to one of the bounded
// states, without panicking. The lines are split as procfs' Cgroups does
// (its parser is procfs'; TestSupervisionBadFiles feeds it garbage), in
// memory so the target stays fast.
func FuzzSupervisionCgroup(f *testing.F) {
	for _, s := range []string{cgV1Session, cgV1Docker, cgHybridV2Only, cgV2Relative, cgV2LXCService, cgNoSystemdDocker, "0::\n", "1:name=systemd:..//..\n"} {
		f.Add(s, 34816, uint64(1), 2)
	}
	states := map[string]bool{}
	for _, s := range supervisionStates {
		states[s] = true
	}
	f.Fuzz(func(t *testing.T, file string, tty int, sigIgn uint64, nspids int) {
		var cgs []procfs.Cgroup
		for _, line := range strings.Split(file, "\n") {
			fields := strings.SplitN(line, ":", 3)
			if len(fields) < 3 {
				continue
			}
			id, err := strconv.Atoi(fields[0])
			if err != nil {
				continue
			}
			cg := procfs.Cgroup{HierarchyID: id, Path: fields[2]}
			if fields[1] != "" {
				cg.Controllers = strings.Split(fields[1], ",")
			}
			cgs = append(cgs, cg)
		}
		got := classify(procFacts{TTY: tty, Status: statusFields{SigIgn: sigIgn, PIDNamespaces: nspids}, Owner: ownerOf(cgs)})
		if !states[got] {
			t.Errorf("state %q is not one of %v", got, supervisionStates)
		}
	})
}

// FuzzSupervisionCmdline: any command line maps to a watched service or
// to nothing, without panicking.
func FuzzSupervisionCmdline(f *testing.F) {
	for _, a := range [][]string{argvBroker, argvNamesrv, argvRunbroker, {"java", "-m", "a/org.apache.rocketmq.broker.BrokerStartup"}, {"java", "-jar"}} {
		f.Add("java", strings.Join(a, "\x00"))
	}
	f.Add("redis-server", "redis-server *:26379 [sentinel]")
	f.Fuzz(func(t *testing.T, comm, cmdline string) {
		switch got := watchedService(comm, strings.Split(cmdline, "\x00")); got {
		case "", serviceBroker, serviceNamesrv, serviceRedis:
		default:
			t.Errorf("service %q", got)
		}
	})
}
