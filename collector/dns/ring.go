package dns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is the capture: an AF_PACKET socket (SOCK_DGRAM, so packets start at
// their IP header; ETH_P_ALL, so outgoing packets are seen too) whose
// packets the kernel writes into a receive ring of TPACKET_V3 blocks mapped
// into the exporter (packet(7), the kernel's
// Documentation/networking/packet_mmap.rst). The reader is woken once per
// block handed over (full, or blockTimeout after it was opened), walks its
// packets in place and gives it back: no system call, wake-up or copy per
// packet (docs/dns.md, "How it works").
//
// The socket is made with protocol 0, which receives nothing; the filter
// and the ring are in place before bind(2) starts the capture, so no
// packet is queued unfiltered or outside the ring.
type ring struct {
	file   *os.File // the socket, in the Go poller: deadlines, wake-ups
	rc     syscall.RawConn
	mem    []byte // blocks × blockSize, shared with the kernel
	blocks int
	next   int // the block the kernel fills next, in order

	fn    func([]byte, int64) // the packet handler of the read in progress
	walk  func(uintptr) bool  // r.drain, built once: a method value per read would allocate
	drain time.Time           // when drain last found no block ready
}

const (
	// blockSize bounds a packet: a larger one (a TCP segment over 128 KiB,
	// which only GRO/GSO on loopback makes) is cut, its direction unsynced.
	blockSize = 128 << 10
	minBlocks = 4
	// blockTimeout is tp_retire_blk_tov: the longest a packet waits in a
	// block that is not full, and so the reader's wake-ups on a quiet host.
	blockTimeout = 20 * time.Millisecond
	// ringLag is how far behind the clock the reader can be sure it has
	// seen every packet: blockTimeout and the kernel timer's slack.
	ringLag = blockTimeout + 80*time.Millisecond
	// frameSize only has to divide blockSize: TPACKET_V3 packs packets of
	// any size into a block.
	frameSize = 2048
)

// Offsets in the ring (include/uapi/linux/if_packet.h): struct
// tpacket_block_desc with its tpacket_hdr_v1, and struct tpacket3_hdr.
const (
	blockStatus   = 8  // __u32 block_status
	blockNumPkts  = 12 // __u32 num_pkts
	blockFirstPkt = 16 // __u32 offset_to_first_pkt
	pktNext       = 0  // __u32 tp_next_offset
	pktSec        = 4  // __u32 tp_sec
	pktNsec       = 8  // __u32 tp_nsec
	pktSnaplen    = 12 // __u32 tp_snaplen
	pktMac        = 24 // __u16 tp_mac: the packet's start (the IP header, for SOCK_DGRAM)
	pktHdrLen     = 28
)

// openCapture opens the capture on the named interface, or on all
// interfaces when ifname is empty, with a ring of about size bytes (at
// least minBlocks blocks).
func openCapture(ifname string, size int) (_ *ring, err error) {
	ifindex := 0 // every interface
	if ifname != "" {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return nil, fmt.Errorf("--dns.interface %q: %w", ifname, err)
		}
		ifindex = ifi.Index
	}
	filter, err := captureFilter(loopbackIndex())
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the AF_PACKET capture socket (needs CAP_NET_RAW): %w", err)
	}
	r := &ring{blocks: max(size/blockSize, minBlocks)}
	defer func() {
		if err != nil {
			if r.mem != nil {
				_ = unix.Munmap(r.mem)
			}
			if r.file != nil {
				r.file.Close()
			} else {
				_ = unix.Close(fd)
			}
		}
	}()
	prog := make([]unix.SockFilter, len(filter))
	for i, ins := range filter {
		prog[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return nil, fmt.Errorf("attaching the capture filter: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, fmt.Errorf("TPACKET_V3 ring (Linux 3.2+): %w", err)
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &unix.TpacketReq3{
		Block_size:     blockSize,
		Block_nr:       uint32(r.blocks),
		Frame_size:     frameSize,
		Frame_nr:       uint32(r.blocks * blockSize / frameSize),
		Retire_blk_tov: uint32(blockTimeout / time.Millisecond),
	}); err != nil {
		return nil, fmt.Errorf("creating the capture ring of %d blocks of %d bytes: %w", r.blocks, blockSize, err)
	}
	if r.mem, err = unix.Mmap(fd, 0, r.blocks*blockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("mapping the capture ring: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return nil, fmt.Errorf("binding the capture socket: %w", err)
	}
	r.file = os.NewFile(uintptr(fd), "dns-capture")
	if r.rc, err = r.file.SyscallConn(); err != nil {
		return nil, err
	}
	r.walk = r.drainBlocks
	return r, nil
}

func htons(v uint16) uint16 { return binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, v)) }

// read hands fn every packet of the blocks the kernel hands over until
// deadline. A socket error (ENETDOWN: the interface it is bound to went
// away) wakes no reader of a ring, so it is looked for whenever a read
// ends without a block.
func (r *ring) read(deadline time.Time, fn func([]byte, int64)) (time.Time, error) {
	if err := r.file.SetReadDeadline(deadline); err != nil {
		return time.Time{}, err
	}
	r.fn = fn
	err := r.rc.Read(r.walk)
	r.fn = nil
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = r.socketError()
	}
	return r.drain.Add(-ringLag), err
}

// socketError reads and clears SO_ERROR.
func (r *ring) socketError() error {
	var soErr error
	if err := r.rc.Control(func(fd uintptr) {
		n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			soErr = os.NewSyscallError("getsockopt SO_ERROR", err)
		case n != 0:
			soErr = os.NewSyscallError("capture socket", syscall.Errno(n))
		}
	}); err != nil {
		return err
	}
	return soErr
}

// drainBlocks walks every block the kernel has handed over, in ring order,
// and gives each back; it reports whether there was one. A packet not yet
// handed over is at most ringLag old when it finds none.
func (r *ring) drainBlocks(uintptr) bool {
	n := 0
	for {
		b := r.mem[r.next*blockSize : (r.next+1)*blockSize]
		status := (*uint32)(unsafe.Pointer(&b[blockStatus]))
		if atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0 {
			break
		}
		r.packets(b)
		atomic.StoreUint32(status, unix.TP_STATUS_KERNEL)
		r.next = (r.next + 1) % r.blocks
		n++
	}
	r.drain = time.Now()
	return n > 0
}

// packets hands fn each packet of block b. The kernel wrote the offsets;
// they are checked all the same, and a block that does not add up is
// skipped from there.
func (r *ring) packets(b []byte) {
	ne := binary.NativeEndian
	off := int(ne.Uint32(b[blockFirstPkt:]))
	for n := ne.Uint32(b[blockNumPkts:]); n > 0; n-- {
		if off < 0 || off+pktHdrLen > len(b) {
			return
		}
		h := b[off:]
		start := int(ne.Uint16(h[pktMac:]))
		end := start + int(ne.Uint32(h[pktSnaplen:]))
		if end > len(h) {
			return
		}
		ts := int64(ne.Uint32(h[pktSec:]))*1e9 + int64(ne.Uint32(h[pktNsec:]))
		if ts == 0 {
			ts = time.Now().UnixNano()
		}
		r.fn(h[start:end], ts)
		next := int(ne.Uint32(h[pktNext:]))
		if next <= 0 {
			return
		}
		off += next
	}
}

// stats reads PACKET_STATISTICS, which the kernel resets on every read:
// packets that passed the filter since the last read and, of those, the
// ones dropped because no block was free.
func (r *ring) stats() (passed, drops uint64) {
	_ = r.rc.Control(func(fd uintptr) {
		if s, err := unix.GetsockoptTpacketStatsV3(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			passed, drops = uint64(s.Packets), uint64(s.Drops)
		}
	})
	return passed, drops
}

// Close closes the socket and unmaps the ring; only the reader calls it,
// after its last read.
func (r *ring) Close() error {
	err := r.file.Close()
	return errors.Join(err, unix.Munmap(r.mem))
}
