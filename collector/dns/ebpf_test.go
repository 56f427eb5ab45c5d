package dns

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/stall-exporter/stall_exporter/collector/proclabel"
)

// shortNames are the question names shortNamesChild asks for (PTR, over
// UDP, without EDNS): the root (1 byte on the wire, the shortest query
// there is: 45 bytes with its IPv4 and UDP headers), a one-letter name
// (3 bytes), and longer ones as controls.
var shortNames = []string{".", "a.", "ab.", "in-addr.arpa.", "1.0.0.127.in-addr.arpa."}

// shortNamesChild sends one PTR query for each of shortNames to
// 127.0.0.1:53 from a connected UDP socket (nothing needs to answer: the
// egress program sees the packet as it leaves).
func shortNamesChild() int {
	for i, n := range shortNames {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(i + 1), RecursionDesired: true})
		b.EnableCompression()
		if err := b.StartQuestions(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: dnsmessage.TypePTR, Class: dnsmessage.ClassINET}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		msg, err := b.Finish()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c, err := net.Dial("udp", "127.0.0.1:53")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := c.Write(msg); err != nil {
			fmt.Fprintln(os.Stderr, n, err)
			return 1
		}
		c.Close()
	}
	return 0
}

// TestEgressCountsShortQuestionNames: the egress program joins every UDP
// query to its process by type, whatever the length of its name. A PTR for
// the root (`dig . NS` style) or a one-letter name makes a packet of 45 or
// 47 bytes; the program used to drop anything under 48 bytes before
// looking. The programs are attached to a cgroup of
// this test only, and the child that sends runs in it, alone, in a network
// namespace of its own, so the counts are exact.
func TestEgressCountsShortQuestionNames(t *testing.T) {
	needRoot(t)
	pid := os.Getpid()
	ns := fmt.Sprintf("stdnsshort%d", pid)
	addNetns(t, ns)
	rel := fmt.Sprintf("stdnsshort%d", pid)
	cg := testCgroup(t, rel)
	root, _, err := proclabel.FindCgroup2Root("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	a, err := newEBPFAttribution(filepath.Join(root, rel), nil, func(elem ...string) string {
		return filepath.Join(append([]string{"/proc"}, elem...)...)
	})
	if err != nil {
		t.Fatalf("eBPF attribution: %v", err)
	}
	defer a.Close()
	if a.typeErr != nil {
		t.Fatalf("the egress program did not attach: %v", a.typeErr)
	}
	child := inCgroup(exec.Command("ip", "netns", "exec", ns, os.Args[0]), cg)
	child.Env = append(os.Environ(), childEnv+"="+shortNamesMode)
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var (
		tgid     uint32
		v        processValue
		lookups  uint64
		byType   [numQTypes]uint64
		children int
	)
	for it := a.counts.Iterate(); it.Next(&tgid, &v); {
		children++
		lookups += v.Count
		for q := range numQTypes {
			byType[q] += v.Queries[q]
		}
	}
	if children != 1 || lookups != uint64(len(shortNames)) {
		t.Errorf("%d processes with %d lookups, want 1 with %d (one connect per name)", children, lookups, len(shortNames))
	}
	want := [numQTypes]uint64{}
	want[qtPTR] = uint64(len(shortNames))
	if byType != want {
		t.Errorf("queries by type %v, want %v (%d PTR: %q)", byType, want, len(shortNames), shortNames)
	}
}
