package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// Real processes in each supervision state: a pseudo-terminal session, nohup,
// setsid, a daemonizing redis-server, real cgroups and a real PID namespace.
// The RocketMQ JVMs are stand-ins: this test binary, reached through a
// symlink named java (so the kernel sets comm to "java"), started by shell
// scripts shaped like RocketMQ's bin/runbroker.sh and bin/runserver.sh, so
// the process tree and command lines are a real broker's: a `sh
// runbroker.sh org.apache.rocketmq.broker.BrokerStartup …` parent and a java
// child whose argv has the JVM options, -cp and the main class. Redis is the
// installed redis-server.
//
// Each test scans a procfs made of symlinks to /proc/<pid> of its own
// processes (and PID 1), so the counts are exact whatever else runs on the
// machine, and every file read is the kernel's.

// standInPIDFlag marks a stand-in JVM: the test binary run with this JVM
// system property writes its PID to the named file and sleeps until killed,
// keeping the signal dispositions it was started with (the Go runtime, like
// HotSpot, leaves an ignored SIGHUP ignored and otherwise dies of it).
const standInPIDFlag = "-Dstall.test.pidfile="

// scanAsEnv makes the test binary scan the procfs it names and print the
// result, for TestSupervisionRealHidepid, which runs it as an unprivileged
// user.
const scanAsEnv = "STALL_TEST_SUPERVISION_SCAN"

func TestMain(m *testing.M) {
	if proc := os.Getenv(scanAsEnv); proc != "" {
		os.Exit(scanAndPrint(proc))
	}
	for _, a := range os.Args[1:] {
		if path, ok := strings.CutPrefix(a, standInPIDFlag); ok {
			runStandInJVM(path)
		}
	}
	os.Exit(m.Run())
}

func runStandInJVM(pidfile string) {
	// /proc/self names the PID in the procfs mount's namespace, which is the
	// host's even inside `unshare --pid`, where getpid() would say 1 or 2.
	self, err := os.Readlink("/proc/self")
	if err == nil {
		tmp := pidfile + ".tmp"
		if err = os.WriteFile(tmp, []byte(self), 0o644); err == nil {
			err = os.Rename(tmp, pidfile)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in JVM:", err)
		os.Exit(1)
	}
	for {
		time.Sleep(time.Hour)
	}
}

func scanAndPrint(proc string) int {
	fs, err := procfs.NewFS(proc)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	c := newSupervision(collector.Config{Paths: collector.Paths{Procfs: proc}, ProcFS: fs,
		Problems: collector.NewProblems("supervision", slog.New(slog.DiscardHandler))}, settings{supervisionInterval: time.Minute})
	ch := make(chan prometheus.Metric, 64)
	err = c.Update(context.Background(), ch)
	close(ch)
	for range ch {
	}
	fmt.Printf("scanned=%d unreadable=%d err=%v\n", c.last.scanned, c.last.unreadable, err)
	return 0
}

// rocketmqRig is a RocketMQ installation whose java is the stand-in.
type rocketmqRig struct {
	dir      string // scratch directory (pidfiles, sockets, logs)
	home     string // ROCKETMQ_HOME
	javaHome string // JAVA_HOME; bin/java is the stand-in
}

// The start scripts, in the shape of RocketMQ 4.9's: JVM options, a
// classpath of conf and lib/*, the JVM run as a child of the shell (not
// exec'd), the main class and its arguments passed through "$@".
const (
	rigRunbroker = `#!/bin/sh
BASE_DIR=$(dirname "$0")/..
CLASSPATH=.:${BASE_DIR}/conf:${BASE_DIR}/lib/*
JAVA="$JAVA_HOME/bin/java"
JAVA_OPT="-server -Xms8g -Xmx8g -XX:+UseG1GC -XX:G1HeapRegionSize=16m -XX:G1ReservePercent=25"
JAVA_OPT="${JAVA_OPT} -XX:InitiatingHeapOccupancyPercent=30 -XX:SoftRefLRUPolicyMSPerMB=0 -verbose:gc"
JAVA_OPT="${JAVA_OPT} -XX:-OmitStackTraceInFastThrow -XX:+AlwaysPreTouch -XX:MaxDirectMemorySize=15g"
JAVA_OPT="${JAVA_OPT} -XX:-UseLargePages -XX:-UseBiasedLocking ${JAVA_OPT_EXT} -cp ${CLASSPATH}"
$JAVA ${JAVA_OPT} "$@"
`
	rigRunserver = `#!/bin/sh
BASE_DIR=$(dirname "$0")/..
CLASSPATH=.:${BASE_DIR}/conf:${BASE_DIR}/lib/*
JAVA="$JAVA_HOME/bin/java"
JAVA_OPT="-server -Xms4g -Xmx4g -Xmn2g -XX:MetaspaceSize=128m -XX:MaxMetaspaceSize=320m"
JAVA_OPT="${JAVA_OPT} -XX:+UseConcMarkSweepGC -XX:+UseCMSCompactAtFullCollection -XX:CMSInitiatingOccupancyFraction=70"
JAVA_OPT="${JAVA_OPT} -XX:-OmitStackTraceInFastThrow -XX:-UseLargePages ${JAVA_OPT_EXT} -cp ${CLASSPATH}"
$JAVA ${JAVA_OPT} "$@"
`
)

func newRocketMQRig(t *testing.T) *rocketmqRig {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &rocketmqRig{dir: dir, home: filepath.Join(dir, "rocketmq-4.9.7"), javaHome: filepath.Join(dir, "jdk8")}
	for _, d := range []string{filepath.Join(r.home, "bin"), filepath.Join(r.home, "conf"), filepath.Join(r.javaHome, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(self, filepath.Join(r.javaHome, "bin", "java")); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"bin/runbroker.sh": rigRunbroker, "bin/runserver.sh": rigRunserver,
		"conf/broker.conf": "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n",
	} {
		if err := os.WriteFile(filepath.Join(r.home, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// env is the environment of a start script; name picks the pidfile the
// stand-in JVM writes.
func (r *rocketmqRig) env(name string) []string {
	return append(os.Environ(), "JAVA_HOME="+r.javaHome, "ROCKETMQ_HOME="+r.home,
		"JAVA_OPT_EXT="+standInPIDFlag+r.pidfile(name))
}

func (r *rocketmqRig) pidfile(name string) string { return filepath.Join(r.dir, name+".pid") }

// broker and namesrv are what RocketMQ's bin/mqbroker and bin/mqnamesrv run.
func (r *rocketmqRig) broker() []string {
	return []string{"sh", filepath.Join(r.home, "bin", "runbroker.sh"), "org.apache.rocketmq.broker.BrokerStartup",
		"-c", filepath.Join(r.home, "conf", "broker.conf")}
}

func (r *rocketmqRig) namesrv() []string {
	return []string{"sh", filepath.Join(r.home, "bin", "runserver.sh"), "org.apache.rocketmq.namesrv.NamesrvStartup"}
}

// redis returns redis-server arguments: no TCP port, a unix socket and a
// pidfile in the scratch directory, no persistence.
func (r *rocketmqRig) redis(name string, extra ...string) []string {
	return append([]string{"redis-server", "--port", "0", "--unixsocket", filepath.Join(r.dir, name+".sock"),
		"--pidfile", r.pidfile(name), "--save", "", "--appendonly", "no", "--dir", r.dir}, extra...)
}

// waitPID waits for the pidfile a stand-in JVM or redis-server writes and
// arranges for that process to be killed when the test ends.
func (r *rocketmqRig) waitPID(t *testing.T, name string) int {
	t.Helper()
	var pid int
	collectortest.WaitFor(t, 15*time.Second, name+" to write "+r.pidfile(name), func() error {
		b, err := os.ReadFile(r.pidfile(name))
		if err != nil {
			return err
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || pid <= 0 {
			return fmt.Errorf("pidfile holds %q", b)
		}
		return nil
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// start runs argv with no controlling terminal (its own session, as
// setsid(1) does), so the state does not depend on whether `go test` runs
// in a terminal.
func start(t *testing.T, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return startCmd(t, cmd)
}

func startCmd(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// defaultSIGHUP makes the processes this test starts begin with SIGHUP at its
// default action even when `go test` itself was started with SIGHUP ignored
// (under nohup, or by a CI runner): while a handler is installed, exec
// resets SIGHUP to default in children instead of passing SIG_IGN on.
func defaultSIGHUP(t *testing.T) {
	t.Helper()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(ch) })
}

// openPTY allocates a pseudo-terminal pair (posix_openpt, unlockpt,
// ptsname without cgo). The master stays non-blocking in Go's poller so
// that closing it returns promptly and hangs the terminal up.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr == nil {
			n, ioErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ioErr != nil {
		t.Fatalf("unlocking the pty: %v %v", err, ioErr)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the session writes (Redis' banner) is drained, so a full
	// terminal buffer never blocks it.
	go func() { _, _ = io.Copy(io.Discard, master) }()
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// startOnTerminal runs argv as the leader of a new session whose controlling
// terminal is slave: an operator's login shell.
func startOnTerminal(t *testing.T, slave *os.File, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	return startCmd(t, cmd)
}

// sessionMembers lists the processes of a session (stat field 6).
func sessionMembers(t *testing.T, sid int) []int {
	t.Helper()
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	procs, err := fs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.Session == sid {
			out = append(out, p.PID)
		}
	}
	return out
}

// procView builds a procfs of symlinks to /proc/1 and /proc/<pid> of the
// given processes: the collector reads the kernel's own files, but sees
// only these processes. A process that exits leaves a dangling link, as a
// process that exits mid-scan leaves ENOENT.
func procView(t *testing.T, pids ...int) string {
	t.Helper()
	dir := t.TempDir()
	for _, pid := range append([]int{1}, pids...) {
		name := strconv.Itoa(pid)
		if err := os.Symlink(filepath.Join("/proc", name), filepath.Join(dir, name)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	return dir
}

// scanView scans the given processes with a fresh collector and returns the
// non-zero counts.
func scanView(t *testing.T, pids ...int) string {
	t.Helper()
	c, problems := newTestSupervision(t, procView(t, pids...))
	r := collectSupervision(t, c)
	if r.err != nil {
		t.Fatalf("scan: %v", r.err)
	}
	if problems.Count() != 0 {
		t.Errorf("%d parse problems reading real /proc files", problems.Count())
	}
	return r.nonZero()
}

// dead reports whether pid has exited (gone, or a zombie nobody reaped).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// waitDead waits until pid has exited.
func waitDead(t *testing.T, pid int, what string) {
	t.Helper()
	collectortest.WaitFor(t, 10*time.Second, what, func() error {
		if !dead(pid) {
			return fmt.Errorf("process %d still runs", pid)
		}
		return nil
	})
}

func requireRedisServer(t *testing.T) {
	t.Helper()
	collectortest.RequireTool(t, "redis-server")
}

// TestSupervisionRealTerminalSession replays incident 1 with real
// processes. An operator's shell on a pseudo-terminal starts a name server
// with nohup in the background, a redis-server in the background and the
// broker in the foreground, as bin/mqbroker does. While the session lives
// the broker is "terminal", the name server "nohup", and redis-server
// "nohup" too, because Redis ignores SIGHUP by itself. Then the terminal
// hangs up (an ssh connection dropping): the broker dies, exactly what the
// state predicted, and the survivors, whose terminal the kernel took away,
// are "detached".
func TestSupervisionRealTerminalSession(t *testing.T) {
	requireRedisServer(t)
	defaultSIGHUP(t)
	r := newRocketMQRig(t)
	master, slave := openPTY(t)
	q := func(argv []string) string { return "'" + strings.Join(argv, "' '") + "'" }
	script := fmt.Sprintf(`cd %s
JAVA_OPT_EXT=%s nohup %s >namesrv.out 2>&1 &
%s &
JAVA_OPT_EXT=%s %s
`, r.dir, standInPIDFlag+r.pidfile("namesrv"), q(r.namesrv()), q(r.redis("redis")), standInPIDFlag+r.pidfile("broker"), q(r.broker()))
	shell := startOnTerminal(t, slave, r.env("unused"), "sh", "-c", script)
	slave.Close()
	broker, namesrv, redis := r.waitPID(t, "broker"), r.waitPID(t, "namesrv"), r.waitPID(t, "redis")
	members := sessionMembers(t, shell.Process.Pid)
	// The login shell, the two start scripts (whose argv names the main
	// class too), the two JVMs, nohup's exec'd shell and redis-server.
	if len(members) < 6 {
		t.Fatalf("session %d has %d members %v, want at least 6", shell.Process.Pid, len(members), members)
	}
	if got, want := scanView(t, members...), "redis/nohup=1 rocketmq_broker/terminal=1 rocketmq_namesrv/nohup=1"; got != want {
		t.Errorf("live session: %s, want %s", got, want)
	}

	// The whole host's /proc holds them as well (other tests' processes may
	// add to these counts, never subtract).
	c, _ := newTestSupervision(t, "/proc")
	whole := collectSupervision(t, c)
	for _, k := range []string{"rocketmq_broker/terminal", "rocketmq_namesrv/nohup", "redis/nohup"} {
		if whole.counts[k] < 1 {
			t.Errorf("scan of the real /proc: %s = %v, want ≥ 1 (err %v)", k, whole.counts[k], whole.err)
		}
	}
	if whole.gauges["scanned"] < float64(len(members)) {
		t.Errorf("scan of the real /proc listed %v processes, fewer than this session's %d", whole.gauges["scanned"], len(members))
	}

	master.Close()
	waitDead(t, broker, "the broker in the terminal to die of the hangup")
	if got, want := scanView(t, members...), "redis/detached=1 rocketmq_namesrv/detached=1"; got != want {
		t.Errorf("after the hangup: %s, want %s", got, want)
	}
	for name, pid := range map[string]int{"name server": namesrv, "redis-server": redis} {
		if dead(pid) {
			t.Errorf("the %s died with the session although it ignores SIGHUP", name)
		}
	}
}

// TestSupervisionRealDetached: a broker started with setsid, a redis-server
// that daemonizes, a Redis Sentinel (not counted) and a zombie JVM (not
// counted).
func TestSupervisionRealDetached(t *testing.T) {
	requireRedisServer(t)
	r := newRocketMQRig(t)
	shell := start(t, r.env("broker"), append([]string{"setsid"}, r.broker()...)...)
	start(t, os.Environ(), r.redis("redis", "--daemonize", "yes")...)
	sentinelConf := filepath.Join(r.dir, "sentinel.conf")
	if err := os.WriteFile(sentinelConf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, os.Environ(), "redis-server", sentinelConf, "--sentinel", "--port", "0",
		"--unixsocket", filepath.Join(r.dir, "sentinel.sock"), "--pidfile", r.pidfile("sentinel"))
	// A broker JVM that was killed and not reaped yet by its parent (this
	// test): a zombie, which keeps comm "java".
	zombie := start(t, nil, append([]string{filepath.Join(r.javaHome, "bin", "java"), standInPIDFlag + r.pidfile("zombie"), "-cp", "."},
		"org.apache.rocketmq.broker.BrokerStartup")...)
	broker, redis, sentinel := r.waitPID(t, "broker"), r.waitPID(t, "redis"), r.waitPID(t, "sentinel")
	r.waitPID(t, "zombie")
	if err := zombie.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, zombie.Process.Pid, "the killed JVM to become a zombie")
	pids := []int{shell.Process.Pid, broker, redis, sentinel, zombie.Process.Pid}
	if got, want := scanView(t, pids...), "redis/detached=1 rocketmq_broker/detached=1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// cgroupMounts finds the v1 name=systemd hierarchy and the v2 hierarchy in
// /proc/self/mounts; either may be missing.
func cgroupMounts(t *testing.T) (v1, v2 string) {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 4 {
			continue
		}
		switch {
		case fields[2] == "cgroup2":
			v2 = fields[1]
		case fields[2] == "cgroup" && strings.Contains(","+fields[3]+",", ",name=systemd,"):
			v1 = fields[1]
		}
	}
	return v1, v2
}

// placeInCgroup moves pid into the cgroup rel under root, creating it, as
// systemd or a container runtime does; cleanup moves what is left back to
// the root and removes the directories it created.
func placeInCgroup(t *testing.T, root, rel string, pid int) {
	t.Helper()
	var created []string
	dir := root
	for _, c := range strings.Split(rel, "/") {
		dir = filepath.Join(dir, c)
		if err := os.Mkdir(dir, 0o755); err == nil {
			created = append(created, dir)
		} else if !os.IsExist(err) {
			t.Fatalf("creating cgroup %s: %v", dir, err)
		}
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, p := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(p), 0o644)
			}
		}
		for i := len(created) - 1; i >= 0; i-- {
			_ = os.Remove(created[i])
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("moving %d into %s: %v", pid, dir, err)
	}
}

// TestSupervisionRealCgroups places real processes in cgroups the way
// systemd and container runtimes do — a .service in the v1 name=systemd
// hierarchy and in the v2 hierarchy, a Kubernetes pod's container, a Docker
// container holding a terminal — and starts one in a new PID namespace.
// systemd itself is not needed: the collector reads only the kernel's
// /proc/<pid>/cgroup, which is the same whoever created the cgroup.
func TestSupervisionRealCgroups(t *testing.T) {
	// Cgroups of its own, removed after, like the dns tests' (not a change
	// of the host: collectortest.RequireDisposable).
	collectortest.RequireRoot(t, "creating cgroups and a PID namespace")
	collectortest.RequireTool(t, "unshare")
	requireRedisServer(t)
	v1, v2 := cgroupMounts(t)
	if v1 == "" && v2 == "" {
		t.Fatal("no cgroup hierarchy mounted")
	}
	serviceRoot, otherRoot := v1, v2 // one .service in each hierarchy when both exist
	if serviceRoot == "" {
		serviceRoot = v2
	}
	if otherRoot == "" {
		otherRoot = v1
	}
	defaultSIGHUP(t)
	r := newRocketMQRig(t)
	tag := fmt.Sprintf("stall-test-%d", os.Getpid())

	namesrvShell := start(t, r.env("namesrv"), r.namesrv()...)
	start(t, os.Environ(), r.redis("redis", "--daemonize", "yes")...)
	podShell := start(t, r.env("pod"), r.broker()...)
	nsShell := start(t, r.env("pidns"), append([]string{"unshare", "--pid", "--fork"}, r.broker()...)...)
	_, slave := openPTY(t)
	ttyBroker := startOnTerminal(t, slave, r.env("docker"), append([]string{filepath.Join(r.javaHome, "bin", "java"), standInPIDFlag + r.pidfile("docker"), "-cp", "."},
		"org.apache.rocketmq.broker.BrokerStartup")...)

	namesrv, redis, pod, pidns, docker := r.waitPID(t, "namesrv"), r.waitPID(t, "redis"), r.waitPID(t, "pod"), r.waitPID(t, "pidns"), r.waitPID(t, "docker")
	placeInCgroup(t, serviceRoot, "system.slice/"+tag+"-namesrv.service", namesrv)
	placeInCgroup(t, otherRoot, "system.slice/"+tag+"-redis.service", redis)
	placeInCgroup(t, serviceRoot, "kubepods/besteffort/pod"+tag+"/0c3f5e", pod)
	placeInCgroup(t, otherRoot, "system.slice/docker-"+tag+".scope", docker)

	pids := []int{namesrvShell.Process.Pid, podShell.Process.Pid, nsShell.Process.Pid, ttyBroker.Process.Pid, namesrv, redis, pod, pidns, docker}
	if got, want := scanView(t, pids...), "redis/systemd=1 rocketmq_broker/container=3 rocketmq_namesrv/systemd=1"; got != want {
		t.Errorf("got %s, want %s (v1 name=systemd at %q, v2 at %q)", got, want, v1, v2)
	}
}

// TestSupervisionRealSystemdRun starts the name server as a transient
// service with systemd-run. Where systemd runs this machine, the unit is a
// system unit of its manager. Elsewhere (a container, a CI runner whose PID
// 1 is something else) the test starts a systemd user manager of its own
// (startUserManager) and the unit is one of its user units: the same
// systemd, and the same .service cgroup the collector reads.
func TestSupervisionRealSystemdRun(t *testing.T) {
	collectortest.RequireRoot(t, "starting a systemd service")
	collectortest.RequireTool(t, "systemd-run")
	collectortest.RequireTool(t, "systemctl")
	var manager []string // systemd-run's and systemctl's flag and environment for the manager
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		collectortest.RequireDisposable(t, "starts a transient system service under this machine's systemd")
	} else {
		collectortest.RequireDisposable(t, "creates a cgroup in each of this machine's cgroup hierarchies, for a systemd user manager of its own")
		manager = startUserManager(t)
	}
	systemd := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, append(manager[:min(len(manager), 1)], args...)...)
		cmd.Env = append(os.Environ(), manager[min(len(manager), 1):]...)
		return cmd
	}
	r := newRocketMQRig(t)
	unit := fmt.Sprintf("stall-test-%d-namesrv", os.Getpid())
	args := []string{"--unit=" + unit, "--collect", "--quiet"}
	for _, e := range r.env("namesrv") {
		if strings.HasPrefix(e, "JAVA_HOME=") || strings.HasPrefix(e, "JAVA_OPT_EXT=") || strings.HasPrefix(e, "ROCKETMQ_HOME=") {
			args = append(args, "--setenv="+e)
		}
	}
	if out, err := systemd("systemd-run", append(args, r.namesrv()...)...).CombinedOutput(); err != nil {
		t.Fatalf("systemd-run: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = systemd("systemctl", "stop", unit+".service").Run() })
	pid := r.waitPID(t, "namesrv")
	if got, want := scanView(t, pid), "rocketmq_namesrv/systemd=1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// startUserManager runs `systemd --user` as root for the test, and returns
// what systemd-run and systemctl need to reach it: --user, and its
// XDG_RUNTIME_DIR. systemd refuses to run where /run/systemd/system is
// missing (the sign that systemd booted the machine), so the manager runs
// in a mount namespace of its own with that directory on a tmpfs. It runs
// in a cgroup of its own in every hierarchy: a manager started in a root
// cgroup moves every process of the machine into init.scope. Its units'
// cgroups are made under it; cleanup stops it and removes them all.
func startUserManager(t *testing.T) []string {
	t.Helper()
	var bin string
	var err error
	for _, bin = range []string{"/lib/systemd/systemd", "/usr/lib/systemd/systemd"} {
		if _, err = os.Stat(bin); err == nil {
			break
		}
	}
	collectortest.Require(t, "systemd, the service manager (Debian's systemd package)", err)
	collectortest.RequireTool(t, "unshare")
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var procs []string // cgroup.procs of the manager's cgroup in each hierarchy
	own := fmt.Sprintf("stall-test-%d-systemd", os.Getpid())
	s := bufio.NewScanner(f)
	for s.Scan() {
		// A new v1 cpuset cgroup has no CPUs, so nothing could join it;
		// systemd does not use that controller on v1.
		fields := strings.Fields(s.Text())
		if len(fields) < 4 || !(fields[2] == "cgroup2" || fields[2] == "cgroup" && !strings.Contains(","+fields[3]+",", ",cpuset,")) {
			continue
		}
		dir := filepath.Join(fields[1], own)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("creating the manager's cgroup: %v", err)
		}
		t.Cleanup(func() { removeCgroupTree(t, dir) })
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	f.Close()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	runtime := t.TempDir()
	// $$ joins the cgroups before exec, so the manager starts in them.
	script := `set -e
runtime=$1 bin=$2
shift 2
for procs; do echo $$ >"$procs"; done
if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; else mount -t tmpfs tmpfs /run; mkdir /run/systemd; fi
mkdir /run/systemd/system
XDG_RUNTIME_DIR=$runtime exec "$bin" --user --log-target=console
`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", runtime, bin}, procs...)...)
	out := &e2etest.Output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // the manager stops its units
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("systemd --user:\n%s", out.String())
		}
	})
	collectortest.WaitFor(t, 15*time.Second, "systemd --user to listen", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("systemd --user exited: %v\n%s", err, out.String())
		default:
		}
		_, err := os.Stat(filepath.Join(runtime, "systemd", "private"))
		return err
	})
	return []string{"--user", "XDG_RUNTIME_DIR=" + runtime}
}

// removeCgroupTree kills what is left in the cgroup tree at dir and removes
// it, deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if b, err := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs")); err == nil {
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		// A killed process leaves its cgroup a moment after the signal.
		collectortest.WaitFor(t, 10*time.Second, "removing cgroup "+dirs[i], func() error { return os.Remove(dirs[i]) })
	}
}

// TestSupervisionRealHidepid runs a scan as an unprivileged user on a procfs
// mounted with hidepid=2 (other users' processes invisible) and hidepid=1
// (listed, but their files refused), in a private mount namespace. Both
// make the scrape fail with a message naming hidepid; hidepid=1 also
// counts the refused processes.
func TestSupervisionRealHidepid(t *testing.T) {
	collectortest.RequireRoot(t, "mounting a procfs in a private mount namespace")
	collectortest.RequireTool(t, "unshare")
	collectortest.RequireTool(t, "setpriv")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy of this test binary where the unprivileged user can run it.
	dir, err := os.MkdirTemp("", "stall-hidepid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "collector.test")
	if b, err := os.ReadFile(self); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "proc")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		hidepid string
		want    *regexp.Regexp
	}{
		{"2", regexp.MustCompile(`^scanned=\d+ unreadable=0 err=other users' processes are hidden \(/proc mounted with hidepid=2`)},
		{"1", regexp.MustCompile(`^scanned=\d+ unreadable=[1-9]\d* err=[1-9]\d* processes: /proc/<pid> files refused \(/proc mounted with hidepid=1`)},
	} {
		out, err := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
			`mount -t proc -o hidepid="$1" proc "$2" && exec setpriv --reuid=65534 --regid=65534 --clear-groups env `+scanAsEnv+`="$2" "$3"`,
			"sh", tc.hidepid, mnt, bin).CombinedOutput()
		if err != nil || !tc.want.Match(out) {
			t.Errorf("hidepid=%s: %v\n%s\nwant %s", tc.hidepid, err, out, tc.want)
		}
	}
}
