package dns

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// cgroup2Root finds where the cgroup v2 hierarchy is mounted, from
// /proc/self/mountinfo (proc(5)): /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one, elsewhere in a container. When
// several cgroup2 mounts exist it prefers one whose root is "/" (the whole
// hierarchy rather than a bind-mounted subtree), then the shortest mount
// point. It returns the mount point and the mount's root within the
// hierarchy; a root other than "/" means programs attached there see only
// that subtree (a container's own cgroup namespace).
func cgroup2Root(mountinfo io.Reader) (mountPoint, root string, err error) {
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		// 40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		r, mp := unescapeMount(f[3]), unescapeMount(f[4])
		better := !found ||
			r == "/" && root != "/" ||
			(r == "/") == (root == "/") && len(mp) < len(mountPoint)
		if better {
			mountPoint, root, found = mp, r, true
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	if !found {
		return "", "", errors.New("no cgroup2 file system mounted (a cgroup v1-only host, or not mounted in the container)")
	}
	return mountPoint, root, nil
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// findCgroup2Root reads the mountinfo file at path.
func findCgroup2Root(path string) (string, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	mp, root, err := cgroup2Root(f)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	return mp, root, nil
}
