package host

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// cgroupLayout is where the memory controller's hierarchy is mounted.
type cgroupLayout struct {
	v2   bool   // the unified hierarchy (else the v1 memory hierarchy)
	root string // its mount point
}

// findMemoryCgroups finds the memory controller's hierarchy from the
// mountinfo file at mountinfo: the cgroup2 mount when its root lists the
// memory controller in cgroup.controllers, else a v1 cgroup mount with the
// memory option (a hybrid host: cgroup2 at /sys/fs/cgroup/unified without
// controllers, memory on v1).
func findMemoryCgroups(mountinfo string) (cgroupLayout, error) {
	var errs []error
	if mp, _, err := proclabel.FindCgroup2Root(mountinfo); err == nil {
		b, err := os.ReadFile(mp + "/cgroup.controllers")
		if err == nil && hasWord(b, "memory") {
			return cgroupLayout{v2: true, root: mp}, nil
		}
		errs = append(errs, fmt.Errorf("the cgroup2 mount %s has no memory controller", mp))
	} else {
		errs = append(errs, err)
	}
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return cgroupLayout{}, err
	}
	for line := range strings.Lines(string(b)) {
		// 35 25 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(g[2], ",") {
			if o == "memory" {
				return cgroupLayout{root: mountUnescape(f[4])}, nil
			}
		}
	}
	errs = append(errs, errors.New("no cgroup v1 mount with the memory controller"))
	return cgroupLayout{}, errors.Join(errs...)
}

var mountUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

func mountUnescape(s string) string { return mountUnescaper.Replace(s) }

// hasWord reports whether the space-separated list b contains w.
func hasWord(b []byte, w string) bool {
	for _, f := range bytes.Fields(b) {
		if string(f) == w {
			return true
		}
	}
	return false
}

// cgroupGone reports whether a read failed because the cgroup was removed:
// ENOENT opening its file, ENODEV reading one opened before.
func cgroupGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// memStatReader reads memory.stat files into one reused buffer.
type memStatReader struct {
	buf []byte
}

// read parses dir's memory.stat into m; bad and perr are ParseMemStat's.
func (r *memStatReader) read(dir string, m *MemStat) (bad int, perr, err error) {
	f, err := os.Open(dir + "/memory.stat")
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	if cap(r.buf) == 0 {
		r.buf = make([]byte, 0, 8<<10)
	}
	for {
		n, err := f.ReadAt(r.buf[:cap(r.buf)], 0)
		if err != nil && n == 0 && !errors.Is(err, io.EOF) {
			return 0, nil, err
		}
		if n < cap(r.buf) {
			bad, perr = ParseMemStat(r.buf[:n], m)
			return bad, perr, nil
		}
		if cap(r.buf) >= 1<<20 {
			return 0, nil, fmt.Errorf("%s/memory.stat is larger than 1 MiB", dir)
		}
		r.buf = make([]byte, 0, 2*cap(r.buf))
	}
}

// readCeiling reads a v2 cgroup's min(memory.max, memory.high) in bytes;
// finite is false when both are "max".
func readCeiling(dir string) (ceiling uint64, finite bool, err error) {
	ceiling = noHeadroom
	for _, name := range [...]string{"memory.max", "memory.high"} {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, false, err
		}
		v := bytes.TrimSpace(b)
		if string(v) == "max" {
			continue
		}
		x, ok := scan.Uint(v)
		if !ok {
			return 0, false, fmt.Errorf("%s/%s: %q is not a number or max", dir, name, v)
		}
		ceiling, finite = min(ceiling, x), true
	}
	return ceiling, finite, nil
}

// ancestors returns the cgroup path p and its ancestors below the root,
// innermost first ("/a/b" → "/a/b", "/a").
func ancestors(p string) []string {
	var out []string
	for p != "/" && p != "" && p != "." {
		out = append(out, p)
		p = path.Dir(p)
	}
	return out
}

// cgroupDirtyNode is one cgroup the walk read: its hierarchical dirty and
// writeback bytes.
type cgroupDirtyNode struct {
	path             string // under the hierarchy's root; "/" is the root
	depth            int
	dirty, writeback uint64
	stat             MemStat
}

func (n *cgroupDirtyNode) total() uint64 { return n.dirty + n.writeback }

// cgroupWalk is the result of one bounded walk.
type cgroupWalk struct {
	dirty     uint64             // dirty bytes of the whole hierarchy (the root's, else the sum of the top level's)
	writeback uint64             // likewise, under writeback
	frontier  []*cgroupDirtyNode // cgroups read but not expanded, with dirty or writeback pages: disjoint subtrees
	read      map[string]*cgroupDirtyNode
	reads     int // memory.stat files and directories read
	bad       int // malformed memory.stat lines
	badErr    error
	err       error // the first error other than a removed cgroup
}

// maxWalkDepth bounds the walk's depth (systemd and the kubelet nest 5 or
// 6 levels).
const maxWalkDepth = 16

// walkCgroups reads the memory hierarchy at root best first: it starts at
// the root and always expands the cgroup read so far with the most dirty
// and writeback bytes (lists its subdirectories and reads their
// memory.stat), never descending into a cgroup without any, until
// maxReads files and directories were read. The cgroups read and not
// expanded form the frontier: disjoint subtrees that hold, with the pages
// charged directly to the expanded cgroups (their own processes, or
// children left unread at the bound), all of the hierarchy's dirty pages.
// On an idle host it reads the root and its top level only; on a host with
// 10,000 cgroups it reads at most maxReads of them, those on the paths to
// the dirty pages first (docs/benchmarks.md).
func walkCgroups(l cgroupLayout, maxReads int, r *memStatReader) *cgroupWalk {
	w := &cgroupWalk{read: map[string]*cgroupDirtyNode{}}
	root := &cgroupDirtyNode{path: "/"}
	rootKnown := w.readNode(l, root, r)
	var h nodeHeap
	heap.Push(&h, root)
	expanded := map[*cgroupDirtyNode]bool{}
	first := true
	for h.Len() > 0 && w.reads < maxReads {
		n := heap.Pop(&h).(*cgroupDirtyNode)
		expanded[n] = true
		if !first && n.total() == 0 {
			continue
		}
		if n.depth >= maxWalkDepth {
			w.frontier = append(w.frontier, n)
			continue
		}
		names, err := subdirs(l.root + n.path)
		w.reads++
		if err != nil {
			if !cgroupGone(err) && w.err == nil {
				w.err = err
			}
			if n.total() > 0 {
				w.frontier = append(w.frontier, n)
			}
			continue
		}
		var sum uint64
		for _, name := range names {
			if w.reads >= maxReads {
				break
			}
			c := &cgroupDirtyNode{path: path.Join(n.path, name), depth: n.depth + 1}
			if !w.readNode(l, c, r) {
				continue
			}
			sum += c.total()
			if c.total() > 0 {
				heap.Push(&h, c)
			}
		}
		if sum == 0 && n.total() > 0 && (n.path != "/" || rootKnown) {
			// A leaf, or its pages are all its own: the cgroup itself
			// is where they are.
			w.frontier = append(w.frontier, n)
		}
		if first && !rootKnown {
			root.dirty, root.writeback = 0, 0
			for _, c := range h {
				root.dirty += c.dirty
				root.writeback += c.writeback
			}
		}
		first = false
	}
	// Read but never expanded: the frontier.
	for _, n := range h {
		if !expanded[n] && n.total() > 0 {
			w.frontier = append(w.frontier, n)
		}
	}
	w.dirty, w.writeback = root.dirty, root.writeback
	return w
}

// readNode reads n's memory.stat; false when it cannot (removed, or the
// root of a v2 hierarchy, which has no memory.stat before 6.x kernels… or
// a layout without dirty fields).
func (w *cgroupWalk) readNode(l cgroupLayout, n *cgroupDirtyNode, r *memStatReader) bool {
	w.reads++
	bad, perr, err := r.read(l.root+n.path, &n.stat)
	if err != nil {
		if !cgroupGone(err) && w.err == nil && n.path != "/" {
			w.err = err
		}
		return false
	}
	if bad > 0 {
		w.bad += bad
		if w.badErr == nil {
			w.badErr = fmt.Errorf("%s%s: %w", l.root, n.path, perr)
		}
	}
	d, wb, ok := n.stat.Dirty()
	if !ok {
		return false
	}
	n.dirty, n.writeback = d, wb
	w.read[n.path] = n
	return true
}

// subdirs lists the subdirectories of dir (the child cgroups): cgroupfs
// gives each entry's type, so no stat is made.
func subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, 8)
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// nodeHeap is a max-heap of cgroups by dirty + writeback bytes.
type nodeHeap []*cgroupDirtyNode

func (h nodeHeap) Len() int { return len(h) }
func (h nodeHeap) Less(i, j int) bool {
	if h[i].total() != h[j].total() {
		return h[i].total() > h[j].total()
	}
	return h[i].path < h[j].path
}
func (h nodeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)   { *h = append(*h, x.(*cgroupDirtyNode)) }
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}
