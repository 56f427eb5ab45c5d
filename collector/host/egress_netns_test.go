package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The egress tests on the kernel's real interfaces and qdiscs: network
// namespaces of their own (removed at cleanup, never the host's
// interfaces), veth pairs, tbf, UDP traffic sent from inside a namespace.

// testNetns is a network namespace created for one test.
type testNetns struct {
	t    testing.TB
	name string
}

// netnsSeq tells apart the namespaces of the tests running in parallel.
var netnsSeq atomic.Int64

// newTestNetns creates a network namespace named for the test and the
// process, removed at cleanup, after checking the prerequisites.
func newTestNetns(t testing.TB, tag string) *testNetns {
	t.Helper()
	collectortest.RequireRoot(t, "CAP_NET_ADMIN creates network namespaces, veth pairs and qdiscs")
	collectortest.RequireTool(t, "ip")
	name := fmt.Sprintf("stalleg%s%d-%d", tag, os.Getpid(), netnsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		collectortest.Require(t, "network namespaces (`ip netns add` as root, CAP_SYS_ADMIN; not inside an unprivileged container)",
			fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return &testNetns{t: t, name: name}
}

// run runs a command inside the namespace (ip -n, tc -n, or ip netns
// exec), failing the test with its output; it returns stdout.
func (n *testNetns) run(args ...string) []byte {
	n.t.Helper()
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		msg := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		n.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out
}

// batch runs `ip -n <ns> -batch -` with the given commands.
func (n *testNetns) batch(cmds []string) {
	n.t.Helper()
	cmd := exec.Command("ip", "-n", n.name, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("ip -batch: %v\n%s", err, out)
	}
}

// do runs f on an OS thread that has entered the namespace: sockets f
// opens belong to it (a socket keeps the namespace it was created in).
func (n *testNetns) do(f func()) {
	n.t.Helper()
	ns, err := os.Open("/run/netns/" + n.name)
	if err != nil {
		n.t.Fatal(err)
	}
	defer ns.Close()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: it exits with the goroutine rather
		// than go back to the pool in another namespace.
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		n.t.Fatalf("setns %s: %v", n.name, err)
	}
}

// ipLinkStats is `ip -s -j link show dev`'s transmit part.
type ipLinkStats struct {
	Stats64 struct {
		Tx struct {
			Bytes, Packets, Errors, Dropped uint64
		}
	}
}

func (n *testNetns) linkStats(dev string) ipLinkStats {
	n.t.Helper()
	var out []ipLinkStats
	if err := json.Unmarshal(n.run("ip", "-n", n.name, "-s", "-j", "link", "show", "dev", dev), &out); err != nil || len(out) != 1 {
		n.t.Fatalf("ip -s -j link show dev %s: %v (%d entries)", dev, err, len(out))
	}
	return out[0]
}

// tcQdisc is one qdisc of `tc -s -j qdisc show dev`.
type tcQdisc struct {
	Kind                        string
	Root                        bool
	Drops, Overlimits, Requeues uint64
	Backlog, Qlen               uint64
}

func (n *testNetns) rootQdisc(dev string) tcQdisc {
	n.t.Helper()
	var out []tcQdisc
	if err := json.Unmarshal(n.run("tc", "-n", n.name, "-s", "-j", "qdisc", "show", "dev", dev), &out); err != nil {
		n.t.Fatalf("tc -s -j qdisc show dev %s: %v", dev, err)
	}
	for _, q := range out {
		if q.Root {
			return q
		}
	}
	n.t.Fatalf("tc shows no root qdisc on %s", dev)
	return tcQdisc{}
}

// udpFlood sends 1,200-byte UDP datagrams from inside ns to addr as fast
// as it can until stop is closed; packets the qdisc drops are what the
// test wants.
func udpFlood(t testing.TB, ns *testNetns, addr string, stop <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	var conn net.Conn
	ns.do(func() {
		var err error
		if conn, err = net.Dial("udp4", addr); err != nil {
			t.Fatal(err)
		}
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer conn.Close()
		payload := make([]byte, 1200)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = conn.Write(payload) // ENOBUFS when the qdisc drops: expected
		}
	}()
}

// egressPair is a veth pair across two test namespaces: dev in ns, shaped
// by tbf at 8 Mbit/s, peerDev in peer at peerAddr (UDP port 9, discard).
type egressPair struct {
	ns, peer     *testNetns
	dev, peerDev string
	peerAddr     string
}

// egressNetns sets up an egressPair. IPv6 is off in both namespaces, so
// nothing but the test's traffic leaves dev.
func egressNetns(t testing.TB) egressPair {
	t.Helper()
	collectortest.RequireTool(t, "tc")
	ns, peer := newTestNetns(t, "a"), newTestNetns(t, "b")
	pid := os.Getpid()
	dev, peerDev := fmt.Sprintf("ega%d", pid%100000), fmt.Sprintf("egb%d", pid%100000)
	subnet := fmt.Sprintf("198.18.%d", pid%256)
	for _, n := range []*testNetns{ns, peer} {
		n.run("ip", "netns", "exec", n.name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	ns.batch([]string{
		"link add " + dev + " type veth peer name " + peerDev + " netns " + peer.name,
		"addr add " + subnet + ".1/30 dev " + dev,
		"link set " + dev + " up",
	})
	peer.batch([]string{
		"addr add " + subnet + ".2/30 dev " + peerDev,
		"link set " + peerDev + " up",
	})
	ns.run("tc", "-n", ns.name, "qdisc", "add", "dev", dev, "root", "tbf", "rate", "8mbit", "burst", "10kb", "limit", "30kb")
	return egressPair{ns: ns, peer: peer, dev: dev, peerDev: peerDev, peerAddr: subnet + ".2:9"}
}

// ifindex is an interface's index, from ip -j link.
func (n *testNetns) ifindex(dev string) int32 {
	n.t.Helper()
	var out []struct{ Ifindex int32 }
	if err := json.Unmarshal(n.run("ip", "-n", n.name, "-j", "link", "show", "dev", dev), &out); err != nil || len(out) != 1 {
		n.t.Fatalf("ip -j link show dev %s: %v", dev, err)
	}
	return out[0].Ifindex
}
