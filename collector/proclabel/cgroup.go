package proclabel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/collector"
)

// FindCgroup2Root finds where the cgroup v2 hierarchy is mounted, from the
// mountinfo file at path (proc(5)): /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one, elsewhere in a container. When
// several cgroup2 mounts exist it prefers one whose root is "/" (the whole
// hierarchy rather than a bind-mounted subtree), then the shortest mount
// point. It returns the mount point and the mount's root within the
// hierarchy; a root other than "/" means programs attached there see only
// that subtree (a container's own cgroup namespace).
func FindCgroup2Root(path string) (mountPoint, root string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	found := false
	for line := range strings.Lines(string(b)) {
		// 40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		r, mp := mountUnescaper.Replace(f[3]), mountUnescaper.Replace(f[4])
		better := !found ||
			r == "/" && root != "/" ||
			(r == "/") == (root == "/") && len(mp) < len(mountPoint)
		if better {
			mountPoint, root, found = mp, r, true
		}
	}
	if !found {
		return "", "", fmt.Errorf("%s: no cgroup2 file system mounted (a cgroup v1-only host, or not mounted in the container)", path)
	}
	return mountPoint, root, nil
}

// mountUnescaper undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
var mountUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

// CgroupNames turns cgroup v2 ids (what bpf_get_current_cgroup_id() and
// the writeback tracepoints' cgroup_ino record) into bounded names
// (Cgroup). A cgroup v2 id is the inode number of the
// cgroup's directory, so an id is resolved
//   - from the cache of the last walk, else
//   - for a live process, from /proc/<tgid>/cgroup, confirmed by the inode
//     of that directory, else
//   - by walking the cgroup2 mount (at most maxCgroupWalk directories, at
//     most once per drain, never twice for the same id): the lookups of a
//     command that has exited come from a cgroup that usually still
//     exists (a service, a container), which the walk finds.
//
// An id not found (its cgroup removed before the drain, or a kernel that
// records none and a process already gone) is named "unknown". Not safe for
// concurrent use.
type CgroupNames struct {
	root     string // the cgroup2 mount (or subtree) the ids come from
	procPath func(elem ...string) string
	byID     map[uint64]string // id → path under root ("/" for root itself)
	missed   map[uint64]bool   // ids a walk did not find: not walked for again
	walked   bool              // a walk in this drain already
}

// maxCgroupWalk bounds a walk of the cgroup hierarchy, and with it the
// cache: a host with more cgroups names the rest "unknown".
const maxCgroupWalk = 65536

// Unknown names a cgroup that could not be resolved.
const Unknown = "unknown"

// NewCgroupNames names the cgroups under root, the cgroup2 mount (or the
// subtree) the ids come from; procPath joins a path under /proc.
func NewCgroupNames(root string, procPath func(elem ...string) string) *CgroupNames {
	return &CgroupNames{root: root, procPath: procPath, byID: map[uint64]string{}, missed: map[uint64]bool{}}
}

// StartDrain allows one walk in the drain that follows.
func (c *CgroupNames) StartDrain() { c.walked = false }

// Name returns the bounded name of cgroup id, which process tgid (live or
// not) was in at its first lookup. id 0 means the kernel recorded none.
func (c *CgroupNames) Name(id uint64, tgid uint32, live bool) string {
	if p, ok := c.byID[id]; ok && id != 0 {
		return Cgroup(p)
	}
	if live {
		if p, ok := ProcCgroup(c.procPath(strconv.FormatUint(uint64(tgid), 10), "cgroup")); ok {
			if id == 0 {
				return Cgroup(p)
			}
			if ino, err := dirInode(filepath.Join(c.root, p)); err == nil && ino == id {
				if len(c.byID) >= maxCgroupWalk {
					clear(c.byID)
				}
				c.byID[id] = p
				return Cgroup(p)
			}
		}
	}
	if id == 0 || c.missed[id] || c.walked {
		return Unknown
	}
	c.walk()
	if p, ok := c.byID[id]; ok {
		return Cgroup(p)
	}
	if len(c.missed) >= maxCgroupWalk {
		clear(c.missed)
	}
	c.missed[id] = true
	return Unknown
}

// walk replaces the cache with the directories under the cgroup2 mount:
// their inode numbers and names straight from getdents(2) (linux_dirent64's
// d_ino and d_type), so a cgroup costs one open and one read of its
// directory, and only subdirectories' names are kept; cgroupfs' interface
// files are skipped without a stat or an allocation. Errors (a cgroup
// removed while walked, an unreadable directory) skip that directory.
func (c *CgroupNames) walk() {
	c.walked = true
	found := make(map[uint64]string, len(c.byID))
	if ino, err := dirInode(c.root); err == nil {
		found[ino] = "/"
	}
	buf := make([]byte, 32<<10)
	type sub struct {
		ino  uint64
		name string
	}
	var visit func(dir, rel string, depth int)
	visit = func(dir, rel string, depth int) {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		var subs []sub
		for {
			n, err := unix.ReadDirent(fd, buf)
			if err != nil || n <= 0 {
				break
			}
			for off := 0; off+19 < n; {
				// struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[].
				reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
				if reclen < 20 || off+reclen > n {
					break
				}
				name := buf[off+19 : off+reclen]
				if i := bytes.IndexByte(name, 0); i >= 0 {
					name = name[:i]
				}
				// cgroupfs (kernfs) always gives d_type.
				if buf[off+18] == unix.DT_DIR && string(name) != "." && string(name) != ".." {
					subs = append(subs, sub{binary.NativeEndian.Uint64(buf[off:]), string(name)})
				}
				off += reclen
			}
		}
		unix.Close(fd)
		for _, s := range subs {
			if len(found) >= maxCgroupWalk {
				return
			}
			path := rel + "/" + s.name
			found[s.ino] = path
			if depth < maxCgroupDepth {
				visit(dir+"/"+s.name, path, depth+1)
			}
		}
	}
	visit(c.root, "", 1)
	c.byID = found
}

// maxCgroupDepth bounds the walk's recursion (cgroup.max.depth is
// unlimited by default; systemd and the kubelet nest 5 or 6 levels).
const maxCgroupDepth = 32

func dirInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// ProcCgroup reads a process's cgroup v2 path from /proc/<pid>/cgroup (its
// "0::/path" line, cgroups(7)); ok is false when the process is gone or
// has none.
func ProcCgroup(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok && strings.HasPrefix(p, "/") {
			return p, true
		}
	}
	return "", false
}

// MaxCgroupLen bounds a cgroup label value.
const MaxCgroupLen = 64

// Cgroup turns a cgroup v2 path into a bounded name that says what
// runs there:
//   - a Kubernetes pod's container: "pod:<pod UID>/<container ID, 12 hex>"
//     ("pod:<UID>" for the pod's own cgroup), for both cgroup drivers
//     (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope
//     and kubepods/burstable/pod<UID>/<ID>);
//   - another container: "<runtime>:<ID, 12 hex>" (docker-<ID>.scope,
//     cri-containerd-, crio-, libpod- as podman; /docker/<ID>);
//   - a systemd unit: the innermost one (cron.service, session-3.scope,
//     user@1000.service), else the innermost slice;
//   - anything else: the path, its last 64 bytes if longer; "/" is the root.
func Cgroup(path string) string {
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	// Read from inside another cgroup namespace, /proc/<pid>/cgroup starts
	// with a ".." per level above the namespace's root.
	for len(parts) > 0 && (parts[0] == ".." || parts[0] == ".") {
		parts = parts[1:]
	}
	if len(parts) == 0 {
		return "/"
	}
	if name, ok := kubernetesName(parts); ok {
		return name
	}
	for i := len(parts) - 1; i >= 0; i-- {
		parent := ""
		if i > 0 {
			parent = parts[i-1]
		}
		if rt, id, ok := containerID(parts[i], parent); ok {
			return rt + ":" + id
		}
	}
	slice := ""
	for i := len(parts) - 1; i >= 0; i-- {
		switch {
		case systemdUnit.MatchString(parts[i]):
			return collector.LabelValue(parts[i], MaxCgroupLen)
		case slice == "" && strings.HasSuffix(parts[i], ".slice"):
			slice = parts[i]
		}
	}
	if slice != "" {
		return collector.LabelValue(slice, MaxCgroupLen)
	}
	// The tail says more than the head of a long path.
	path = collector.LabelValue("/"+strings.Join(parts, "/"), 0)
	if len(path) > MaxCgroupLen {
		cut := len(path) - MaxCgroupLen
		for !utf8.RuneStart(path[cut]) {
			cut++
		}
		path = "…" + path[cut:]
	}
	return path
}

// systemdUnit matches a cgroup directory named after a systemd unit other
// than a slice.
var systemdUnit = regexp.MustCompile(`(?s).\.(?:service|scope|socket|mount|swap)$`)

// containerScope matches a container runtime's systemd scope,
// "<prefix>-<64 hex>.scope"; runtimeNames names the runtime of each prefix.
var (
	containerScope = regexp.MustCompile(`^(cri-containerd|docker|crio|libpod)-([0-9a-f]{64})\.scope$`)
	hexID          = regexp.MustCompile(`^[0-9a-f]{64}$`)
	runtimeNames   = map[string]string{"cri-containerd": "containerd", "docker": "docker", "crio": "crio", "libpod": "podman"}
)

// containerID recognises a container's cgroup directory: a runtime's
// systemd scope (containerScope), or a bare "<64 hex>" directory (the
// cgroupfs driver) named by its parent ("docker") or "container". It
// returns the runtime and the short (12 hex) id.
func containerID(dir, parent string) (runtime, id string, ok bool) {
	if hexID.MatchString(dir) {
		switch {
		case parent == "docker":
			return "docker", dir[:12], true
		case strings.HasPrefix(parent, "libpod"):
			return "podman", dir[:12], true
		}
		return "container", dir[:12], true
	}
	if m := containerScope.FindStringSubmatch(dir); m != nil {
		return runtimeNames[m[1]], m[2][:12], true
	}
	return "", "", false
}

// kubernetesName names a cgroup under the kubelet's hierarchy: the pod by
// its UID, and the container within it by its short id.
func kubernetesName(parts []string) (string, bool) {
	if !strings.HasPrefix(parts[0], "kubepods") {
		return "", false
	}
	for i, p := range parts {
		uid, ok := podUID(p)
		if !ok {
			continue
		}
		name := "pod:" + uid
		if i+1 < len(parts) {
			if _, id, ok := containerID(parts[i+1], p); ok {
				name += "/" + id
			}
		}
		return name, true
	}
	return "", false
}

// podDir matches a pod's cgroup directory: "pod<UID>" (cgroupfs driver) or
// "kubepods-burstable-pod<UID with _>.slice" (systemd driver).
var podDir = regexp.MustCompile(`^pod([0-9a-f-]{36})$|-pod([0-9a-f_-]{36})\.slice$`)

// podUID extracts the pod UID (36 characters, 4 dashes) from a podDir.
func podUID(dir string) (string, bool) {
	m := podDir.FindStringSubmatch(dir)
	if m == nil {
		return "", false
	}
	uid := strings.ReplaceAll(m[1]+m[2], "_", "-")
	return uid, strings.Count(uid, "-") == 4
}
