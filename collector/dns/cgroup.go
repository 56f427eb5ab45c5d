package dns

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openCgroup2 opens the cgroup v2 hierarchy without mounting it where any
// process sees it, for hosts where nothing mounts it (systemd's legacy
// mode, a cgroup v1-only host): the kernel has the hierarchy, and attaches
// programs to its root, whether or not it is mounted. It returns the
// descriptor of the hierarchy's root and a path through it
// (/proc/self/fd/N), valid while the descriptor is open; closing it leaves
// nothing behind. Both ways need CAP_SYS_ADMIN: fsopen(2) and fsmount(2)
// make a mount attached to no namespace (Linux 5.2+); before that the
// hierarchy is mounted on a temporary directory, opened and at once
// detached (umount2 MNT_DETACH) and the directory removed.
func openCgroup2() (*os.File, string, error) {
	fd, err := fsmountCgroup2()
	if err != nil {
		var err2 error
		if fd, err2 = detachedCgroup2(); err2 != nil {
			return nil, "", fmt.Errorf("opening the cgroup v2 hierarchy privately (needs CAP_SYS_ADMIN): %w", errors.Join(err, err2))
		}
	}
	return os.NewFile(uintptr(fd), "cgroup2"), fmt.Sprintf("/proc/self/fd/%d", fd), nil
}

func fsmountCgroup2() (int, error) {
	fs, err := unix.Fsopen("cgroup2", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("fsconfig: %w", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return fd, nil
}

func detachedCgroup2() (int, error) {
	dir, err := os.MkdirTemp("", "stall-dns-cgroup2-")
	if err != nil {
		return -1, err
	}
	defer os.Remove(dir)
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return -1, fmt.Errorf("mount: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if uerr := unix.Unmount(dir, unix.MNT_DETACH); uerr != nil && err == nil {
		unix.Close(fd)
		return -1, fmt.Errorf("detaching the mount: %w", uerr)
	}
	if err != nil {
		return -1, fmt.Errorf("open: %w", err)
	}
	return fd, nil
}
