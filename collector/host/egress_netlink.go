package host

import (
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stall-exporter/stall_exporter/internal/netlinkdump"
)

// rtnlConn is one NETLINK_ROUTE socket that asks the kernel for dumps
// (links, link statistics, qdiscs) through internal/netlinkdump, which
// reads the replies into one buffer it keeps: after the first dump, a
// dump allocates nothing. The socket belongs to the network namespace it
// was opened in, as the kernel's netlink sockets do. Not safe for
// concurrent use: each user (the scrape, the sampler) has its own.
//
// Why not a library: github.com/jsimonetti/rtnetlink/v2 v2.3.0 and
// github.com/vishvananda/netlink v1.3.1 decode every attribute of every
// link into new values: listing 1,000 interfaces allocated 5.8 MB (76,000
// objects) and 7.5 MB (18,000 objects) per call, while the sampler reads
// the statistics every second. This reader asks for the statistics alone
// (RTM_GETSTATS) and decodes only the fields it exports
// (egress_parse.go), as the /proc readers do (source.go): 0 allocations
// and 0.3 ms of CPU per dump of 1,000 interfaces (docs/benchmarks.md).
type rtnlConn struct {
	nl *netlinkdump.Conn
}

// openRTNL opens a NETLINK_ROUTE socket in the calling thread's network
// namespace.
func openRTNL() (*rtnlConn, error) {
	nl, err := netlinkdump.Open(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, err
	}
	return &rtnlConn{nl: nl}, nil
}

func (c *rtnlConn) Close() error { return c.nl.Close() }

// Dump requests the kernel's RTM_GETLINK, RTM_GETSTATS or RTM_GETQDISC
// table (typ) with the fixed header hdr after the nlmsghdr, and calls each
// with the type and body of every reply message until NLMSG_DONE. Each
// body aliases the buffer, valid until each returns. Each receive waits
// netlinkdump.DefaultTimeout at most. interrupted reports NLM_F_DUMP_INTR:
// the table changed during the dump (an interface came or went), so the
// messages are each consistent but not one snapshot. An error from each
// stops the dump (the socket is drained on the next Dump, by sequence
// number); a refusal is a netlinkdump.Errno (errors.Is with the errno); a
// datagram cut short is an error wrapping errNetlinkShort, after the
// messages that were whole.
func (c *rtnlConn) Dump(typ uint16, hdr []byte, each func(typ uint16, body []byte) error) (interrupted bool, err error) {
	st, err := c.nl.Dump(typ, hdr, time.Time{}, each)
	if err == nil && st.Truncated > 0 {
		err = fmt.Errorf("%w: %d datagrams of the dump cut short", errNetlinkShort, st.Truncated)
	}
	return st.Interrupted > 0, err
}

// The fixed headers of the three dumps.
var (
	// struct ifinfomsg, all zero: every interface of every family.
	dumpLinksHdr = make([]byte, unix.SizeofIfInfomsg)
	// struct if_stats_msg with filter_mask IFLA_STATS_LINK_64 only: per
	// interface, its index and rtnl_link_stats64, ~220 bytes instead of
	// RTM_GETLINK's kilobyte and more.
	dumpStatsHdr = func() []byte {
		b := make([]byte, sizeofIfStatsMsg)
		binary.NativeEndian.PutUint32(b[8:], 1<<(unix.IFLA_STATS_LINK_64-1))
		return b
	}()
	// struct tcmsg, all zero: every qdisc of every interface.
	dumpQdiscsHdr = make([]byte, sizeofTcMsg)
)
