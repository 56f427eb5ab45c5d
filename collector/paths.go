package collector

import "path/filepath"

// Paths are the mount points every file read goes through (a container
// with the host under /host, tests on fixtures).
type Paths struct {
	Procfs string // --path.procfs, default /proc
	Sysfs  string // --path.sysfs, default /sys
	Rootfs string // --path.rootfs, default /
}

// Proc returns a path under the procfs mount point.
func (p Paths) Proc(elem ...string) string {
	return filepath.Join(append([]string{p.Procfs}, elem...)...)
}

// Sys returns a path under the sysfs mount point.
func (p Paths) Sys(elem ...string) string {
	return filepath.Join(append([]string{p.Sysfs}, elem...)...)
}

// Root returns an absolute host path (such as /dev/kmsg or a log directory)
// re-rooted under --path.rootfs.
func (p Paths) Root(path string) string {
	if p.Rootfs == "" || p.Rootfs == "/" {
		return path
	}
	return filepath.Join(p.Rootfs, path)
}
