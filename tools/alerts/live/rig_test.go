package live

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// The rig makes writeback slower than a writer without writing to a disk: a loop device whose
// backing file is on tmpfs (so the loop's own writes are memory, never dirty pages of their
// own), a write throttle of 1 MiB/s on the loop device in a child cgroup the writer joins (blkio
// on a cgroup v1 host, io.max on a cgroup v2 host: throttle_test.go says which the host gets and
// why the writer's writeback is slowed on both), and vm.dirty_bytes / vm.dirty_background_bytes
// set to 256 / 128 MiB: the default ratios'
// 1 : 2 proportion, the throttle point at 192 MiB, a band of 64 MiB from the background threshold
// to it. The band is as small as the data written allows (the load writes the band's bottom and
// then 1 MiB a second: about 450 MiB, all into tmpfs) and as large as the host's other writers
// require: at 64 / 32 MiB their bursts alone crossed the throttle point. Everything the rig
// changes (sysctls, loop device, throttle rule, cgroup, controllers, mounts) is recorded in a
// state file before it is changed, and undone by undo: at the end of the test, by a guardian
// process if the test dies (SIGINT, -timeout, SIGKILL), and at the start of the next run if the
// guardian died too.
const (
	// rigDir holds the state file, the loop's backing file and the storage of Prometheus and
	// Alertmanager, all on tmpfs.
	rigDir      = "/dev/shm/stall-exporter-live"
	stateFile   = rigDir + "/state.json"
	backingFile = rigDir + "/loop-backing"
	runDir      = rigDir + "/run"
	lockFile    = "/dev/shm/stall-exporter-live.lock"
	sysctlDir   = "/proc/sys/vm/"

	loopSize      = 640 << 20 // bytes; the writer stops (and the test fails) at writeCap, so it never wraps
	writeCap      = 512 << 20
	writebackBps  = 1 << 20 // the loop device's write throttle, bytes per second
	dirtyBytes    = 256 << 20
	dirtyBgBytes  = 128 << 20
	guardianEnv   = "STALL_LIVE_GUARDIAN"
	tmpfsMagic    = 0x01021994
	lockWaitLimit = 10 * time.Minute
)

// dirtySysctls are the tunables the rig records and restores. It sets the two _bytes values,
// and records the _ratio ones too, because setting a _bytes value zeroes the matching _ratio and
// back.
var dirtySysctls = []string{"dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes",
	"dirty_expire_centisecs", "dirty_writeback_centisecs"}

// rigSysctls are the values the rig sets. The count the exporter reads is the host's, every
// writer's: the other processes' dirty pages (a compiler's output, a test's files) go to the real
// disk, which writes them in milliseconds, but only once the flusher picks them up; with the loop
// device's pages under writeback rather than dirty, the host is not over its background threshold
// (which counts dirty pages only), so that is when they expire: after 30 s by default, time for
// tens of MiB next to a band of 64 MiB (measured on a busy build host: bursts of 12 MiB lasting
// seconds even with 1 s). Expiring them after 100 ms, checked every 100 ms, keeps them under about
// 3 MiB. The loop device's pages are over the background threshold all along and written back as
// fast as the throttle lets them either way.
var rigSysctls = [][2]string{
	{"dirty_bytes", strconv.Itoa(dirtyBytes)},
	{"dirty_background_bytes", strconv.Itoa(dirtyBgBytes)},
	{"dirty_expire_centisecs", "10"},
	{"dirty_writeback_centisecs", "10"},
}

// rigState is what the rig has changed, written to stateFile before each change.
type rigState struct {
	Sysctls  map[string]string `json:"sysctls"`            // value before the test, by name under /proc/sys/vm
	Loop     string            `json:"loop"`               // /dev/loopN
	DevNum   string            `json:"dev"`                // its MAJ:MIN, the key of the throttle rule
	Throttle *throttleState    `json:"throttle,omitempty"` // the throttle rule and the cgroup changes it needed
}

func (s *rigState) save() error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := stateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, stateFile)
}

// requireRig checks what the rig needs under the test policy (a failure under make test, a skip
// by hand) and returns where the throttle goes.
func requireRig(t *testing.T) throttlePlan {
	t.Helper()
	collectortest.RequireRoot(t, "it writes vm.dirty_bytes, creates a loop device, a write throttle and a cgroup")
	_, err := os.Stat("/dev/loop-control")
	collectortest.Require(t, "loop devices (CONFIG_BLK_DEV_LOOP, modprobe loop)", err)
	collectortest.Require(t, "a writable "+sysctlDir+" (not a container's read-only /proc/sys)", unix.Access(sysctlDir+"dirty_bytes", unix.W_OK))
	var fs unix.Statfs_t
	err = unix.Statfs("/dev/shm", &fs)
	if err == nil && fs.Type != tmpfsMagic {
		err = fmt.Errorf("/dev/shm is of type %#x", fs.Type)
	}
	collectortest.Require(t, "a tmpfs at /dev/shm for the loop device's backing file", err)
	_, err = exec.LookPath("losetup")
	collectortest.Require(t, "losetup (util-linux)", err)
	p, err := planThrottle()
	collectortest.Require(t, "a block write throttle (cgroup v1 blkio, or cgroup2 with the io controller; CONFIG_BLK_DEV_THROTTLING)", err)
	return p
}

// rig is the slowed-down loop device, open for buffered writes.
type rig struct {
	state rigState
	dev   *os.File
	lock  *os.File
	guard *guardianProc
}

// setUpRig takes the lock, undoes what a killed earlier run left, starts the guardian and builds
// the rig. t.Cleanup undoes it.
func setUpRig(t *testing.T, plan throttlePlan) *rig {
	t.Helper()
	r := &rig{}
	r.lock = takeLock(t)
	if err := os.MkdirAll(rigDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if msg := undoStale(); msg != "" {
		t.Log(msg)
	}
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	r.guard = startGuardian(t, r.lock)
	t.Cleanup(func() {
		if r.dev != nil {
			// The guardian holds the device open too, so this is not the last close, which
			// would write back what is still dirty on it at the throttled rate.
			r.dev.Close()
		}
		if errs := undo(); len(errs) > 0 {
			t.Errorf("restoring the host: %v", errors.Join(errs...))
		}
		// The guardian finds no state file, closes the device (now unthrottled: written back at
		// memory speed, then detached) and exits.
		if err := r.guard.stop(); err != nil {
			t.Errorf("guardian: %v", err)
		}
		r.lock.Close()
		if loops := ourLoops(); len(loops) > 0 {
			t.Errorf("loop devices still bound to %s: %v", backingFile, loops)
		}
	})

	r.state.Sysctls = map[string]string{}
	for _, n := range dirtySysctls {
		b, err := os.ReadFile(sysctlDir + n)
		if err != nil {
			t.Fatal(err)
		}
		r.state.Sysctls[n] = strings.TrimSpace(string(b))
	}
	if err := r.state.save(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backingFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backingFile, loopSize); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", backingFile).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup --find --show: %v: %s", err, out)
	}
	r.state.Loop = strings.TrimSpace(string(out))
	num, err := os.ReadFile("/sys/class/block/" + filepath.Base(r.state.Loop) + "/dev")
	if err != nil {
		t.Fatal(err)
	}
	r.state.DevNum = strings.TrimSpace(string(num))
	if err := r.state.save(); err != nil {
		t.Fatal(err)
	}
	if err := r.guard.hold(r.state.Loop); err != nil {
		t.Fatal(err)
	}
	if err := r.setUpThrottle(plan, r.state.DevNum, writebackBps); errors.Is(err, errPinned) {
		collectortest.Require(t, cgroupEnv+"=v2 on this host: the io controller, which a blkio v1 hierarchy in use holds", err)
	} else if err != nil {
		t.Fatalf("throttling %s: %v", r.state.Loop, err)
	}
	// Flush what the host has dirty now, so lowering the limits does not throttle everyone
	// for the time the disk takes to write it.
	synced := time.Now()
	unix.Sync()
	t.Logf("sync: %s", time.Since(synced).Round(time.Millisecond))
	for _, kv := range rigSysctls {
		if err := os.WriteFile(sysctlDir+kv[0], []byte(kv[1]), 0); err != nil {
			t.Fatalf("vm.%s: %v", kv[0], err)
		}
	}
	if r.dev, err = os.OpenFile(r.state.Loop, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("rig: %s (%s) on tmpfs, written back at %d KiB/s by a %s; vm.dirty_bytes %d MiB, vm.dirty_background_bytes %d MiB (before: %v)",
		r.state.Loop, r.state.DevNum, writebackBps>>10, plan, dirtyBytes>>20, dirtyBgBytes>>20, r.state.Sysctls)
	return r
}

// takeLock serialises runs of this test on the host (two would fight over the sysctls). The
// guardian inherits the lock, so the next run waits until a dead run's state is undone.
func takeLock(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(lockWaitLimit)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("waiting for %s (another run of this test, or its guardian restoring the host): %v", lockFile, err)
		}
		time.Sleep(time.Second)
	}
}

// undoStale undoes what an earlier run left behind (its state file, loop devices on its backing
// file) and says what it found.
func undoStale() string {
	_, err := os.Stat(stateFile)
	loops := ourLoops()
	if err != nil && len(loops) == 0 {
		os.RemoveAll(runDir)
		return ""
	}
	errs := undo()
	msg := fmt.Sprintf("an earlier run left its state (state file: %v, loop devices %v): restored", err == nil, loops)
	if len(errs) > 0 {
		msg += fmt.Sprintf(", with errors: %v", errors.Join(errs...))
	}
	return msg
}

// undo restores the sysctls recorded in the state file, removes the throttle rules and undoes
// the cgroup changes they needed (undoThrottle), detaches the loop devices of the rig's backing
// file, and removes the rig's files. It is idempotent, and
// it is all the guardian runs.
func undo() []error {
	var errs []error
	var st rigState
	b, err := os.ReadFile(stateFile)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", stateFile, err))
		}
	case !errors.Is(err, os.ErrNotExist):
		errs = append(errs, err)
	}
	devNums := map[string]bool{}
	if st.DevNum != "" {
		devNums[st.DevNum] = true
	}
	loops := ourLoops()
	for _, l := range loops {
		if num, err := os.ReadFile("/sys/class/block/" + l + "/dev"); err == nil {
			devNums[strings.TrimSpace(string(num))] = true
		}
	}
	// The throttle first: a detached loop device keeps its rule, and the next user of
	// /dev/loopN in the group would inherit it.
	errs = append(errs, undoThrottle(st.Throttle, devNums)...)
	// A _bytes setting of 0 means the matching _ratio was in force: writing the ratio back
	// zeroes the bytes value, and the other way round.
	for _, pair := range [][2]string{{"dirty_bytes", "dirty_ratio"}, {"dirty_background_bytes", "dirty_background_ratio"}} {
		bytesV, ratioV := st.Sysctls[pair[0]], st.Sysctls[pair[1]]
		name, v := pair[1], ratioV
		if bytesV != "" && bytesV != "0" {
			name, v = pair[0], bytesV
		}
		if v == "" {
			continue
		}
		if err := os.WriteFile(sysctlDir+name, []byte(v), 0); err != nil {
			errs = append(errs, fmt.Errorf("restoring vm.%s=%s: %w", name, v, err))
		}
	}
	for _, name := range []string{"dirty_expire_centisecs", "dirty_writeback_centisecs"} {
		if v := st.Sysctls[name]; v != "" {
			if err := os.WriteFile(sysctlDir+name, []byte(v), 0); err != nil {
				errs = append(errs, fmt.Errorf("restoring vm.%s=%s: %w", name, v, err))
			}
		}
	}
	for _, l := range loops {
		if out, err := exec.Command("losetup", "--detach", "/dev/"+l).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup --detach /dev/%s: %w: %s", l, err, out))
		}
	}
	for _, p := range []string{backingFile, runDir, stateFile} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	os.Remove(rigDir) // empty now, unless a later run has started
	return errs
}

// ourLoops lists the loop devices (loopN) bound to the rig's backing file, deleted or not.
func ourLoops() []string {
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if f := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"); f == backingFile {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return out
}

// guardianProc is the guardian, seen from the test.
type guardianProc struct {
	pipe *os.File // its stdin
	done chan error
}

// startGuardian runs this test binary again as the guardian: in its own process group (a ^C
// in the terminal does not reach it), ignoring SIGINT, SIGTERM, SIGHUP and SIGPIPE, holding the lock,
// reading its stdin until the test process closes it or dies. It then undoes whatever the state
// file still records.
func startGuardian(t *testing.T, lock *os.File) *guardianProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), guardianEnv+"=1")
	cmd.Stdin = pr
	cmd.ExtraFiles = []*os.File{lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out e2etest.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	g := &guardianProc{pipe: pw, done: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out.String())
		}
		g.done <- err
	}()
	return g
}

// hold asks the guardian to open dev: a dying test process then does not block in the last
// close of the device, writing back at the throttled rate what is still dirty on it, before the
// guardian learns it died.
func (g *guardianProc) hold(dev string) error {
	_, err := fmt.Fprintf(g.pipe, "hold %s\n", dev)
	return err
}

// stop closes the guardian's stdin and waits for it to exit.
func (g *guardianProc) stop() error {
	g.pipe.Close()
	select {
	case err := <-g.done:
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("did not exit within a minute")
	}
}

// guardian is the guardian process's whole life (see startGuardian). Its stdout and stderr go
// to the test (and are lost when the test process is gone).
func guardian() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	var held *os.File
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if dev, ok := strings.CutPrefix(sc.Text(), "hold "); ok {
			f, err := os.Open(dev)
			if err != nil {
				fmt.Fprintf(os.Stderr, "guardian: %v\n", err)
				continue
			}
			held = f
		}
	}
	var errs []error
	if held != nil {
		// Unthrottled first, so that closing the device writes back at memory speed.
		if b, err := os.ReadFile(stateFile); err == nil {
			var st rigState
			if json.Unmarshal(b, &st) == nil && st.DevNum != "" {
				if err := unthrottle(st.Throttle, st.DevNum); err != nil {
					errs = append(errs, err)
				}
			}
		}
		held.Close()
	}
	if _, err := os.Stat(stateFile); err == nil {
		errs = append(errs, undo()...)
	}
	if len(errs) > 0 {
		fmt.Fprintln(os.Stderr, errors.Join(errs...))
		return 1
	}
	return 0
}
