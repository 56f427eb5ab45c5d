package live

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The write throttle of the rig's loop device: a limit of bps bytes a second on the device in a
// child cgroup the rig creates, which the writer (the test process) joins for the load, in
// whichever hierarchy the host gives the block controller:
//
//   - v1 (a hybrid host, blkio mounted as a hierarchy of its own): blkio.throttle.write_bps_device
//     "MAJ:MIN N" in <blkio>/stall-exporter-live;
//   - v2 (io on cgroup2, as on current Debian, Ubuntu, Fedora, RHEL 9): io.max "MAJ:MIN wbps=N"
//     in <cgroup2>/stall-exporter-live, with +io in the root's cgroup.subtree_control (io.max
//     does not exist on the root cgroup).
//
// A write's bio is charged to the cgroup of the writeback it belongs to when cgroup writeback is
// on (memory and io both on cgroup2; the loop device's inode gets the wb of its first writer's
// memory cgroup: block/bdev.c sets SB_I_CGROUPWB), and otherwise to the cgroup of the task that
// submits it (blkcg_css() in block/blk-cgroup.c): the flusher's bios then go to the root cgroup,
// which a child's limit does not slow. So the writer starts the writeback of each chunk it
// writes itself (sync_file_range SYNC_FILE_RANGE_WRITE, shaper_test.go), and its bios are
// throttled either way; the flusher finds next to nothing dirty, since every chunk is under
// writeback microseconds after it is written. A host with cgroup v1 blkio never has cgroup
// writeback, a v2 host without the memory controller on cgroup2 neither: the same mechanism, the
// same blk-throttle limit, on both paths. The writer joins after the exporter, Prometheus and
// Alertmanager have been started, so it is alone in the child cgroup.
//
// The host picks v1 when the blkio hierarchy is mounted with throttling, v2 otherwise;
// STALL_LIVE_CGROUP=v1|v2 forces one. For v2 on a hybrid host the rig hands the block controller
// to cgroup2 by unmounting the blkio hierarchy, which works only while the hierarchy has no child
// cgroups, no other controller, and no open file or working directory in it, through any mount
// (which keeps it alive, unmounted, with io); it mounts it again at the end. Everything it changes is
// recorded in the state file before it is changed (throttleState) and undone by undoThrottle.
const (
	cgroupEnv    = "STALL_LIVE_CGROUP"
	writerGroup  = "stall-exporter-live" // the child cgroup, under the hierarchy's root
	cgroupSettle = 10 * time.Second      // how long a controller may take to move between hierarchies, a cgroup to empty
)

// throttleState is what the rig changed to throttle the loop device, in the state file.
type throttleState struct {
	Kind  string `json:"kind"`            // "v1" or "v2"
	Root  string `json:"root"`            // the hierarchy's mount point
	Group string `json:"group,omitempty"` // the child cgroup the rig created, which holds the rule
	// v2: the cgroup.subtree_control the rig added +io to, if io was not enabled there ...
	EnabledIO string `json:"enabled_io,omitempty"`
	// ... and the blkio v1 hierarchy it unmounted to hand io to cgroup2, if it did.
	Unmounted *cgroupMount `json:"unmounted,omitempty"`
}

// rule returns the file and the line that set the write limit on devNum; bps 0 lifts it.
func (st *throttleState) rule(devNum string, bps int) (file, line string) {
	if st.Kind == "v1" {
		return filepath.Join(st.Group, "blkio.throttle.write_bps_device"), fmt.Sprintf("%s %d", devNum, bps)
	}
	limit := "max"
	if bps > 0 {
		limit = strconv.Itoa(bps)
	}
	return filepath.Join(st.Group, "io.max"), fmt.Sprintf("%s wbps=%s", devNum, limit)
}

// cgroupMount is a cgroup v1 hierarchy's mount, as /proc/self/mountinfo shows it.
type cgroupMount struct {
	Point string  `json:"point"`
	Flags uintptr `json:"flags"` // MS_* from the per-mount options
	Data  string  `json:"data"`  // the super options without rw/ro: the controllers
}

// throttlePlan is where the throttle goes on this host.
type throttlePlan struct {
	kind    string
	root    string       // the hierarchy's mount point
	unmount *cgroupMount // v2: the blkio hierarchy to unmount first
}

func (p throttlePlan) String() string {
	s := fmt.Sprintf("cgroup %s write limit in %s, which the writer joins", p.kind, filepath.Join(p.root, writerGroup))
	if p.unmount != nil {
		s += " (the blkio v1 hierarchy at " + p.unmount.Point + " unmounted for the run)"
	}
	return s
}

// planThrottle chooses the hierarchy (see the top of this file), or says why none will do.
func planThrottle() (throttlePlan, error) {
	force := os.Getenv(cgroupEnv)
	switch force {
	case "", "v1", "v2":
	default:
		return throttlePlan{}, fmt.Errorf("%s=%q: want v1, v2 or nothing (the host decides)", cgroupEnv, force)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return throttlePlan{}, err
	}
	var v1 *mountInfo
	var v2Root string
	for i, m := range mounts {
		switch {
		case m.fsType == "cgroup2" && v2Root == "":
			v2Root = m.point
		case m.fsType == "cgroup" && slices.Contains(m.superOpts, "blkio"):
			v1 = &mounts[i]
		}
	}
	var v1Err error
	if v1 == nil {
		v1Err = errors.New("no cgroup v1 blkio hierarchy is mounted")
	} else if _, err := os.Stat(filepath.Join(v1.point, "blkio.throttle.write_bps_device")); err != nil {
		v1Err = fmt.Errorf("blkio throttling (CONFIG_BLK_DEV_THROTTLING): %w", err)
	}
	if force == "v1" || force == "" && v1Err == nil {
		if v1Err != nil {
			return throttlePlan{}, fmt.Errorf("%s=v1: %w", cgroupEnv, v1Err)
		}
		return throttlePlan{kind: "v1", root: v1.point}, nil
	}
	if v2Root == "" {
		return throttlePlan{}, fmt.Errorf("no blkio throttle (%w) and no cgroup2 mount", v1Err)
	}
	p := throttlePlan{kind: "v2", root: v2Root}
	if hasController(filepath.Join(v2Root, "cgroup.controllers"), "io") {
		return p, nil
	}
	if v1 == nil {
		return throttlePlan{}, fmt.Errorf("the io controller is not in %s/cgroup.controllers, and no v1 hierarchy holds it", v2Root)
	}
	if force != "v2" {
		return throttlePlan{}, fmt.Errorf("the io controller is held by the blkio v1 hierarchy at %s, which has no throttling (%w)", v1.point, v1Err)
	}
	if p.unmount, err = movableBlkio(*v1, mounts); err != nil {
		return throttlePlan{}, fmt.Errorf("%s=v2: the io controller is held by the blkio v1 hierarchy at %s, which cannot be handed to cgroup2: %w", cgroupEnv, v1.point, err)
	}
	return p, nil
}

// movableBlkio returns the blkio hierarchy's mount if unmounting it may hand io to cgroup2: a
// hierarchy goes away on its last unmount only when it has no child cgroups, and it must carry
// no controller but blkio (the others would move too). An open file in it is found only by
// trying (setUpThrottle).
func movableBlkio(m mountInfo, all []mountInfo) (*cgroupMount, error) {
	var data []string
	for _, o := range m.superOpts {
		switch o {
		case "rw", "ro":
		case "blkio":
			data = append(data, o)
		default:
			return nil, fmt.Errorf("mounted with %q besides blkio", o)
		}
	}
	for _, o := range all {
		if o.fsType == "cgroup" && o.point != m.point && o.dev == m.dev {
			return nil, fmt.Errorf("mounted at %s too", o.point)
		}
	}
	entries, err := os.ReadDir(m.point)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() {
			return nil, fmt.Errorf("it has child cgroups (%s)", e.Name())
		}
	}
	return &cgroupMount{Point: m.point, Flags: m.flags, Data: strings.Join(data, ",")}, nil
}

// errPinned is setUpThrottle's error when the blkio hierarchy is in use (an open file or a
// working directory in it): the host cannot run the v2 path, and undo mounts it again.
var errPinned = errors.New("the blkio v1 hierarchy is in use")

// setUpThrottle throttles writes to the device devNum at bps bytes a second as planned,
// recording each change in the rig's state file before making it.
func (r *rig) setUpThrottle(p throttlePlan, devNum string, bps int) error {
	st := &throttleState{Kind: p.kind, Root: p.root}
	r.state.Throttle = st
	if p.unmount != nil {
		st.Unmounted = p.unmount
		if err := r.state.save(); err != nil {
			return err
		}
		// EBUSY: a process has a file or its working directory in the hierarchy, which would
		// keep it alive, and io in it, if it were unmounted lazily.
		if err := unix.Unmount(p.unmount.Point, 0); err != nil {
			return fmt.Errorf("%w: unmounting %s: %w (fuser -vm %[2]s names the processes it can see)", errPinned, p.unmount.Point, err)
		}
		// The hierarchy is destroyed, and its controller rebound to cgroup2, once its last
		// reference is dropped, after the unmount returns.
		if err := settle(func() error {
			if !hasController(filepath.Join(p.root, "cgroup.controllers"), "io") {
				return errors.New("io is not in " + p.root + "/cgroup.controllers")
			}
			return nil
		}); err != nil {
			// A file open in the hierarchy through another mount (one unmounted lazily, in
			// another mount namespace) keeps it alive.
			return fmt.Errorf("%w: unmounted %s, but the hierarchy lives on %s later: %w", errPinned, p.unmount.Point, cgroupSettle, err)
		}
	}
	if p.kind == "v2" {
		control := filepath.Join(p.root, "cgroup.subtree_control")
		if !hasController(control, "io") {
			st.EnabledIO = control
			if err := r.state.save(); err != nil {
				return err
			}
			if err := os.WriteFile(control, []byte("+io"), 0); err != nil {
				return fmt.Errorf("%s +io: %w", control, err)
			}
		}
	}
	st.Group = filepath.Join(p.root, writerGroup)
	if err := r.state.save(); err != nil {
		return err
	}
	if err := os.Mkdir(st.Group, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	file, line := st.rule(devNum, bps)
	if err := os.WriteFile(file, []byte(line), 0); err != nil {
		return fmt.Errorf("%s %q: %w", file, line, err)
	}
	return nil
}

// joinWriterGroup moves the test process into the child cgroup, so that the writes of the load
// are charged to it, and returns the function that moves it back.
func (r *rig) joinWriterGroup() (leave func() error, err error) {
	st := r.state.Throttle
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	// "0::/path" on cgroup2, "7:blkio:/path" on v1
	own := ""
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && (st.Kind == "v2" && f[0] == "0" && f[1] == "" || st.Kind == "v1" && slices.Contains(strings.Split(f[1], ","), "blkio")) {
			own = f[2]
		}
	}
	if own == "" {
		return nil, fmt.Errorf("/proc/self/cgroup: no line for the %s hierarchy", st.Kind)
	}
	back := filepath.Join(st.Root, own, "cgroup.procs")
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(st.Group, "cgroup.procs"), pid, 0); err != nil {
		return nil, fmt.Errorf("joining %s: %w", st.Group, err)
	}
	return func() error {
		if err := os.WriteFile(back, pid, 0); err != nil {
			return fmt.Errorf("moving back to %s: %w", back, err)
		}
		return nil
	}, nil
}

// unthrottle lifts the rule on devNum; the guardian does it before it closes the device, so the
// close writes back at memory speed.
func unthrottle(st *throttleState, devNum string) error {
	if st == nil || st.Group == "" {
		return nil
	}
	file, line := st.rule(devNum, 0)
	err := os.WriteFile(file, []byte(line), 0)
	if errors.Is(err, unix.ENODEV) || errors.Is(err, os.ErrNotExist) {
		// The device or the group is gone, and the rule with it.
		err = nil
	}
	return err
}

// undoThrottle lifts the rules on devNums and undoes, in reverse order, what st records. It is
// idempotent.
func undoThrottle(st *throttleState, devNums map[string]bool) []error {
	var errs []error
	if st == nil {
		return nil
	}
	if st.Group != "" {
		for n := range devNums {
			if err := unthrottle(st, n); err != nil {
				errs = append(errs, fmt.Errorf("lifting the throttle of %s: %w", n, err))
			}
		}
		// The group's rules go with it. A test process killed in the group leaves it only
		// when it has finished exiting, which can be after the guardian learns it died.
		if err := settle(func() error {
			err := unix.Rmdir(st.Group)
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}); err != nil {
			errs = append(errs, fmt.Errorf("removing the cgroup %s: %w", st.Group, err))
		}
	}
	if st.EnabledIO != "" && hasController(st.EnabledIO, "io") {
		if err := os.WriteFile(st.EnabledIO, []byte("-io"), 0); err != nil {
			errs = append(errs, fmt.Errorf("%s -io: %w", st.EnabledIO, err))
		}
	}
	if m := st.Unmounted; m != nil && !blkioMounted() {
		// The kernel refuses (EBUSY) to take io back from cgroup2 while a cgroup there still
		// has an io state, which a removed cgroup keeps for a moment.
		if err := settle(func() error { return unix.Mount("cgroup", m.Point, "cgroup", m.Flags, m.Data) }); err != nil {
			errs = append(errs, fmt.Errorf("mounting the blkio hierarchy at %s again: %w", m.Point, err))
		}
	}
	return errs
}

// settle retries f until it succeeds or cgroupSettle has passed, and returns its last error.
func settle(f func() error) error {
	deadline := time.Now().Add(cgroupSettle)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func blkioMounted() bool {
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		if m.fsType == "cgroup" && slices.Contains(m.superOpts, "blkio") {
			return true
		}
	}
	return false
}

// hasController reports whether a cgroup.controllers or cgroup.subtree_control file lists name.
func hasController(file, name string) bool {
	b, err := os.ReadFile(file)
	return err == nil && slices.Contains(strings.Fields(string(b)), name)
}

// mountInfo is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mountInfo struct {
	dev       string // MAJ:MIN of the superblock: one per hierarchy
	point     string
	flags     uintptr
	fsType    string
	superOpts []string
}

var mountFlags = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"relatime": unix.MS_RELATIME, "noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME,
	"strictatime": unix.MS_STRICTATIME,
}

// cgroupMounts lists the cgroup and cgroup2 mounts of this mount namespace.
func cgroupMounts() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 25 0:31 / /sys/fs/cgroup/blkio rw,relatime shared:13 - cgroup cgroup rw,blkio
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 6 || len(b) < 3 || (b[0] != "cgroup" && b[0] != "cgroup2") {
			continue
		}
		m := mountInfo{dev: a[2], point: a[4], fsType: b[0], superOpts: strings.Split(b[2], ",")}
		for _, o := range strings.Split(a[5], ",") {
			m.flags |= mountFlags[o]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
