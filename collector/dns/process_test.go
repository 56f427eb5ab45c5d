package dns

import (
	"strings"
	"testing"
	"time"
)

func TestProcessTable(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newProcessTable(2, 10*time.Minute)
	p.now = func() time.Time { return now }
	p.add("java", 5)
	p.add("getent", 1)
	p.add("curl", 2) // full, nothing idle: other
	p.add("", 1)     // no name: other
	if p.other.n != 3 || p.names["java"].n != 5 || len(p.names) != 2 {
		t.Fatalf("other %d names %v", p.other.n, p.names)
	}
	now = now.Add(11 * time.Minute)
	p.add("java", 1)
	p.add("storm", 300) // getent idle for 11 min: replaced
	if _, ok := p.names["getent"]; ok || p.names["storm"].n != 300 || p.names["java"].n != 6 || p.other.n != 3 {
		t.Fatalf("after eviction: other %d names %v", p.other.n, p.names)
	}
	p.add(strings.Repeat("x", 100)+"\xff", 1) // bounded and valid UTF-8 even from /proc
	for k := range p.names {
		if len(k) > maxCommLen+len("…") {
			t.Errorf("label %q longer than %d bytes", k, maxCommLen)
		}
	}
}

func TestCgroup2Root(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, mp, root string
	}{
		{"unified", "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n", "/sys/fs/cgroup", "/"},
		{"hybrid", "30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified", "/"},
		{"container with the host's mounted", "500 400 0:30 /kubepods/pod1/abc /sys/fs/cgroup ro - cgroup2 cgroup rw\n501 400 0:30 / /host/sys/fs/cgroup ro - cgroup2 cgroup rw\n", "/host/sys/fs/cgroup", "/"},
		{"escaped space", "40 30 0:37 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n", "/mnt/cg two", "/"},
	} {
		mp, root, err := cgroup2Root(strings.NewReader(tc.mountinfo))
		if err != nil || mp != tc.mp || root != tc.root {
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, mp, root, err, tc.mp, tc.root)
		}
	}
	if _, _, err := cgroup2Root(strings.NewReader("31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")); err == nil {
		t.Error("cgroup v1 only: no error")
	}
}
