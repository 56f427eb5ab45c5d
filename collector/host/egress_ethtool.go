package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cloud allowance counters: a cloud's virtual NIC that counts the packets
// it shaped or dropped because the instance went over its network
// allowance publishes the counts as driver statistics (ethtool -S), read
// here with the SIOCETHTOOL ioctl (ETHTOOL_GDRVINFO, ETHTOOL_GSTRINGS,
// ETHTOOL_GSTATS).
//
// Supported drivers and where their names come from:
//   - ena (AWS Elastic Network Adapter),
//     drivers/net/ethernet/amazon/ena/ena_ethtool.c, the ENI statistics
//     (table ena_stats_eni_strings; ena_hw_stats_strings in the drivers
//     that read them with the customer-metrics admin command, same names;
//     shown only when the device offers them): bw_in_allowance_exceeded,
//     bw_out_allowance_exceeded, pps_allowance_exceeded,
//     conntrack_allowance_exceeded, linklocal_allowance_exceeded. The
//     gauge conntrack_allowance_available is not a count and is left out.
//
// Looked at and without an equivalent (their shaping is invisible to the
// guest): gve (Google gVNIC, drivers/net/ethernet/google/gve/gve_ethtool.c:
// packets, drops, timeouts, queue and admin-queue counters), mana (Azure
// MANA, drivers/net/ethernet/microsoft/mana/mana_ethtool.c: queue
// stop/wake, completion errors, per-queue packets), hv_netvsc (Azure
// synthetic NIC, drivers/net/hyperv/netvsc_drv.c: tx_no_space,
// tx_send_full are the guest's own ring, not the allowance) and virtio_net
// (Alibaba, Tencent, Hetzner, GCP's older NIC: per-queue counters only).
//
// Ours rather than github.com/safchain/ethtool v0.7.0 (node_exporter's):
// its driver name (DriverName, ETHTOOL_GDRVINFO) costs what ours does,
// but its statistics (Stats, StatsWithBuffer) are three ioctls on every
// read (the driver info, every name with ETHTOOL_GSTRINGS, which the
// driver formats each time, and the values) returned as a new map with a
// new string per statistic, in buffers sized for its MAX_GSTRINGS (32,768
// names, 1.3 MB) that Stats pools, so the GCs between two scrapes free
// them. Per read of one NIC, on a veth with 64 queues (577 statistics;
// ENA has about 800 on a 32-queue instance): Stats 115–145 µs and 42 KB
// in 581 allocations back to back, 1.37 MB in 587 after a GC; ours, which
// reads the names once per NIC (BenchmarkEthtool/names+stats, 100–113 µs)
// and then only ETHTOOL_GSTATS into a kept buffer, 4.8 µs and none
// (BenchmarkEthtool/stats, docs/benchmarks.md). What is ours is the three
// ioctls below, run on a real veth (TestEthtoolVeth) and checked against
// `ethtool -S` of an ENA NIC (fixtures/ethtool).

// allowanceStats maps a driver's statistic names to the reason label, by
// driver name (ETHTOOL_GDRVINFO's driver).
var allowanceStats = map[string]map[string]string{
	"ena": {
		"bw_in_allowance_exceeded":     "bw_in",
		"bw_out_allowance_exceeded":    "bw_out",
		"pps_allowance_exceeded":       "pps",
		"conntrack_allowance_exceeded": "conntrack",
		"linklocal_allowance_exceeded": "linklocal",
	},
}

// ethSSStats is ETH_SS_STATS, the string set of the statistics' names.
const ethSSStats = 1

// ethGStringLen is ETH_GSTRING_LEN: each statistic's name is a 32-byte,
// NUL-padded field of ETHTOOL_GSTRINGS' reply.
const ethGStringLen = 32

// ethtoolMaxStats bounds the statistics read from one NIC: ENA on a
// 32-queue instance has about 800, mlx5 thousands; a driver that claims
// more is not believed (its strings would be 32 bytes each).
const ethtoolMaxStats = 1 << 16

// allowanceIndex is one allowance counter's position in its NIC's
// ETHTOOL_GSTATS reply.
type allowanceIndex struct {
	reason string
	index  int
}

// findAllowanceStats returns the positions of driver's allowance counters
// in strs, the ETHTOOL_GSTRINGS(ETH_SS_STATS) reply of n names: none for a
// driver without them, or a NIC that does not expose them.
func findAllowanceStats(driver string, strs []byte, n int) []allowanceIndex {
	names := allowanceStats[driver]
	if names == nil {
		return nil
	}
	var out []allowanceIndex
	for i := 0; i < n && (i+1)*ethGStringLen <= len(strs); i++ {
		name := cString(strs[i*ethGStringLen : (i+1)*ethGStringLen])
		if reason, ok := names[string(name)]; ok {
			out = append(out, allowanceIndex{reason: reason, index: i})
		}
	}
	return out
}

// ethtoolIfreq is struct ifreq with ifr_data, the pointer SIOCETHTOOL
// takes (40 bytes on 64-bit, as x/sys/unix lays it out).
type ethtoolIfreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolConn issues SIOCETHTOOL ioctls on a datagram socket, which
// resolves interface names in the network namespace it was opened in.
// Its buffers are reused; not safe for concurrent use.
type ethtoolConn struct {
	fd    int
	strs  []byte // ETHTOOL_GSTRINGS reply
	stats []byte // ETHTOOL_GSTATS reply
}

func openEthtool() (*ethtoolConn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ethtool socket: %w", err)
	}
	return &ethtoolConn{fd: fd}, nil
}

func (e *ethtoolConn) Close() error { return unix.Close(e.fd) }

func (e *ethtoolConn) ioctl(name string, data unsafe.Pointer) error {
	var ifr ethtoolIfreq
	if len(name) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q longer than %d bytes", name, unix.IFNAMSIZ-1)
	}
	copy(ifr.name[:], name)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(e.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(data)
	if errno != 0 {
		return errno
	}
	return nil
}

// Driver returns an interface's driver name and its number of statistics
// (ETHTOOL_GDRVINFO). A device without ethtool operations (loopback, a
// bridge) answers EOPNOTSUPP; one that is gone, ENODEV.
func (e *ethtoolConn) Driver(name string) (driver string, nStats int, err error) {
	info := unix.EthtoolDrvinfo{Cmd: unix.ETHTOOL_GDRVINFO}
	if err := e.ioctl(name, unsafe.Pointer(&info)); err != nil {
		return "", 0, fmt.Errorf("ETHTOOL_GDRVINFO %s: %w", name, err)
	}
	return string(cString(info.Driver[:])), int(info.N_stats), nil
}

// Strings returns the names of an interface's n statistics
// (ETHTOOL_GSTRINGS, ETH_SS_STATS: struct ethtool_gstrings, cmd,
// string_set, len, then len 32-byte names), aliasing a buffer the next
// call reuses, and how many names the driver gave.
func (e *ethtoolConn) Strings(name string, n int) ([]byte, int, error) {
	if n < 0 || n > ethtoolMaxStats {
		return nil, 0, fmt.Errorf("%s: %d statistics claimed", name, n)
	}
	need := 12 + n*ethGStringLen
	if cap(e.strs) < need {
		e.strs = make([]byte, need)
	}
	b := e.strs[:need]
	clear(b[:12])
	binary.NativeEndian.PutUint32(b[0:], unix.ETHTOOL_GSTRINGS)
	binary.NativeEndian.PutUint32(b[4:], ethSSStats)
	binary.NativeEndian.PutUint32(b[8:], uint32(n))
	if err := e.ioctl(name, unsafe.Pointer(&b[0])); err != nil {
		return nil, 0, fmt.Errorf("ETHTOOL_GSTRINGS %s: %w", name, err)
	}
	got := min(int(binary.NativeEndian.Uint32(b[8:])), n)
	return b[12 : 12+got*ethGStringLen], got, nil
}

// errEthtoolStatsChanged: the driver now reports another number of
// statistics (queues added or removed), so the names must be read again.
var errEthtoolStatsChanged = errors.New("number of ethtool statistics changed")

// Stats reads an interface's n statistics (ETHTOOL_GSTATS: struct
// ethtool_stats, cmd, n_stats, then n_stats __u64) and returns the value
// at each index; the returned slice is reused by the next call.
func (e *ethtoolConn) Stats(name string, n int, idx []allowanceIndex, dst []uint64) ([]uint64, error) {
	if n < 0 || n > ethtoolMaxStats {
		return dst, fmt.Errorf("%s: %d statistics claimed", name, n)
	}
	need := 8 + n*8
	if cap(e.stats) < need {
		e.stats = make([]byte, need)
	}
	b := e.stats[:need]
	binary.NativeEndian.PutUint32(b[0:], unix.ETHTOOL_GSTATS)
	binary.NativeEndian.PutUint32(b[4:], uint32(n))
	if err := e.ioctl(name, unsafe.Pointer(&b[0])); err != nil {
		return dst, fmt.Errorf("ETHTOOL_GSTATS %s: %w", name, err)
	}
	if got := int(binary.NativeEndian.Uint32(b[4:])); got != n {
		return dst, fmt.Errorf("%s: %w (%d, was %d)", name, errEthtoolStatsChanged, got, n)
	}
	return appendStatValues(dst[:0], b[8:], idx), nil
}

// appendStatValues appends the value at each index of an ETHTOOL_GSTATS
// data array (__u64 each); an index past its end is left out.
func appendStatValues(dst []uint64, data []byte, idx []allowanceIndex) []uint64 {
	for _, x := range idx {
		if off := x.index * 8; off >= 0 && off+8 <= len(data) {
			dst = append(dst, binary.NativeEndian.Uint64(data[off:]))
		} else {
			dst = append(dst, 0)
		}
	}
	return dst
}

// isNoDevice reports whether an ioctl error says the interface is gone.
func isNoDevice(err error) bool { return errors.Is(err, unix.ENODEV) }

// isNoEthtool reports whether an ioctl error says the device has no such
// ethtool operation: no statistics to read, and no error.
func isNoEthtool(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL)
}
