package writeback

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// eventPath is the balance_dirty_pages format file under a tracefs mount.
const eventPath = "events/writeback/balance_dirty_pages/format"

// errNoTracepoint says the kernel has tracefs but not the event: built
// without CONFIG_TRACEPOINTS' writeback events, or older than 3.2.
var errNoTracepoint = errors.New("the kernel has no writeback:balance_dirty_pages tracepoint")

// readEventFormat returns the balance_dirty_pages format file and where it
// was read, from the first tracefs that has one: sysPath("kernel/tracing")
// (where systemd mounts it), sysPath("kernel/debug/tracing") (debugfs'
// automount on older hosts), and where neither is mounted — as on a host
// or a container that mounts no tracefs — from a tracefs mounted
// privately (privateTracefs): the event's id and offsets are the kernel's,
// the same in every tracefs instance, and perf_event_open(2) needs only the
// id, not a mount. A tracefs that is mounted but lacks the event means the
// kernel has no such tracepoint (errNoTracepoint).
func readEventFormat(sysPath func(elem ...string) string) (data []byte, from string, err error) {
	var errs []error
	for _, dir := range []string{sysPath("kernel", "tracing"), sysPath("kernel", "debug", "tracing")} {
		data, err := os.ReadFile(filepath.Join(dir, eventPath))
		if err == nil {
			return data, dir, nil
		}
		if _, serr := os.Stat(filepath.Join(dir, "events")); serr == nil {
			return nil, dir, fmt.Errorf("%w (%s has no %s: %w)", errNoTracepoint, dir, eventPath, err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", dir, err))
	}
	data, err = privateTracefs(eventPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "a private tracefs mount", fmt.Errorf("%w (%w)", errNoTracepoint, err)
	}
	if err != nil {
		errs = append(errs, err)
		return nil, "", fmt.Errorf("no tracefs mounted and none could be mounted privately: %w", errors.Join(errs...))
	}
	return data, "a private tracefs mount", nil
}

// privateTracefs reads the file at rel in a tracefs instance that no
// process sees: fsopen(2) and fsmount(2) make a mount attached to no mount
// namespace (Linux 5.2+), which is gone when its descriptor is closed, here
// before returning. Nothing on the host changes. It needs CAP_SYS_ADMIN in
// the initial user namespace (tracefs cannot be mounted in a user
// namespace).
func privateTracefs(rel string) ([]byte, error) {
	fsfd, err := unix.Fsopen("tracefs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tracefs (needs CAP_SYS_ADMIN, Linux 5.2+): %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("fsconfig tracefs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsmount tracefs: %w", err)
	}
	defer unix.Close(mfd)
	fd, err := unix.Openat(mfd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "tracefs/" + rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), "tracefs/"+rel)
	defer f.Close()
	return io.ReadAll(f) // a tracefs file's size is 0: read to EOF
}
