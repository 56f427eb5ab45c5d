package host

import (
	"bytes"

	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// The /dev/kmsg record format (Documentation/ABI/testing/dev-kmsg): every
// read returns exactly one record,
//
//	<prio>,<seq>,<timestamp usec>,<flags>[,<more fields>];<message>\n
//	 KEY=value\n            (zero or more continuation lines)
//
// prio is facility<<3 | level; seq is the record's 64-bit sequence number,
// which increases by one per record since boot, so a gap is records that
// were overwritten before they were read; flags is '-', or on 3.x–4.x
// kernels 'c'/'+' for the first/later fragments of a continued line; 5.1+
// kernels built with CONFIG_PRINTK_CALLER add ",caller=T123". Non-printable
// bytes and '\' in the message are escaped as \xNN, so the message never
// holds a newline. Continuation lines ("SUBSYSTEM=block", "DEVICE=b8:0")
// start with a space; the exporter does not use them.

// kmsgRecord is one parsed /dev/kmsg record. Message aliases the input.
type kmsgRecord struct {
	Facility uint64 // 0 is the kernel; records written by user space have 1 (LOG_USER) or more
	Level    uint64 // syslog level, 0 (emerg) … 7 (debug)
	Seq      uint64
	Usec     uint64 // microseconds since boot (monotonic clock)
	Flags    []byte
	Message  []byte
}

// kmsgParseError describes what is wrong with a record; its values are
// constants so parsing never allocates.
type kmsgParseError string

func (e kmsgParseError) Error() string { return "/dev/kmsg record: " + string(e) }

const (
	errKmsgNoSemicolon = kmsgParseError("no ';' between header and message")
	errKmsgFields      = kmsgParseError("header has fewer than 4 comma-separated fields")
	errKmsgPrio        = kmsgParseError("priority is not an unsigned integer")
	errKmsgSeq         = kmsgParseError("sequence number is not an unsigned integer")
	errKmsgTimestamp   = kmsgParseError("timestamp is not an unsigned integer")
	errKmsgAllocOrder  = kmsgParseError(`"page allocation failure" without "order:N" after it; counted under order="other"`)
)

// parseKmsgRecord parses one record as returned by one read of /dev/kmsg.
// It does not allocate.
func parseKmsgRecord(b []byte) (kmsgRecord, error) {
	var r kmsgRecord
	hdr, msg, ok := bytes.Cut(b, []byte{';'})
	// The header never holds a newline; one before ';' means no header.
	if !ok || bytes.IndexByte(hdr, '\n') >= 0 {
		return r, errKmsgNoSemicolon
	}
	msg, _, _ = bytes.Cut(msg, []byte{'\n'})
	var f [3][]byte
	for i := range f {
		if f[i], hdr, ok = bytes.Cut(hdr, []byte{','}); !ok {
			return r, errKmsgFields
		}
	}
	prio, ok := scan.Uint(f[0])
	if !ok {
		return r, errKmsgPrio
	}
	if r.Seq, ok = scan.Uint(f[1]); !ok {
		return r, errKmsgSeq
	}
	if r.Usec, ok = scan.Uint(f[2]); !ok {
		return r, errKmsgTimestamp
	}
	flags, _, _ := bytes.Cut(hdr, []byte{','}) // later fields (caller=T123) are not used
	r.Facility, r.Level, r.Flags, r.Message = prio>>3, prio&7, flags, msg
	return r, nil
}

// kmsgEvent is one of the bounded set of kernel log events the exporter
// counts.
type kmsgEvent uint8

const (
	kmsgNoEvent kmsgEvent = iota
	kmsgPageAllocationFailure
	kmsgHungTask
	kmsgOOMKill       // the OOM killer killed a process because the host ran out of memory
	kmsgOOMKillCgroup // … because the process's memory cgroup reached its limit
	kmsgIOError
	kmsgIOErrorExcluded // an I/O error on a device the diskstats device filter leaves out
	kmsgSoftLockup
	kmsgEventCount
)

// kmsgEventNames are the values of the event label.
var kmsgEventNames = [kmsgEventCount]string{
	kmsgNoEvent:               "",
	kmsgPageAllocationFailure: "page_allocation_failure",
	kmsgHungTask:              "hung_task",
	kmsgOOMKill:               "oom_kill",
	kmsgOOMKillCgroup:         "oom_kill_cgroup",
	kmsgIOError:               "io_error",
	kmsgIOErrorExcluded:       "io_error_excluded",
	kmsgSoftLockup:            "soft_lockup",
}

func (e kmsgEvent) String() string { return kmsgEventNames[e] }

// kmsgMessageKind says how a message becomes an event: by itself, or with
// what the reader remembers (kmsgClassifier).
type kmsgMessageKind uint8

const (
	kmsgPlain           kmsgMessageKind = iota // Event is the event (kmsgNoEvent: none)
	kmsgOOMAnnouncement                        // "<reason>: Kill process …" (up to 5.0): Event is the reason's; not counted itself
	kmsgOOMKilledBare                          // "Killed process …" (up to 5.0): the reason of the last announcement
	kmsgDiskError                              // "<kind> error, dev <disk>, sector …": Device is a whole disk
	kmsgBufferError                            // "Buffer I/O error on dev(ice) <dev>, …": Device may be a partition
)

// kmsgMessage is what one kernel message says by itself.
type kmsgMessage struct {
	Kind   kmsgMessageKind
	Event  kmsgEvent
	Device []byte    // kmsgDiskError, kmsgBufferError: the kernel's name of the device, nil when it cannot be parsed; aliases the message
	Order  kmsgOrder // kmsgPageAllocationFailure: the order of the allocation that failed
}

// kmsgOrder is the order of a failed page allocation (2^order contiguous
// pages) as the value of the order label: 0 to kmsgMaxOrder, or
// kmsgOrderOther above.
//
// The bound: the buddy allocator's largest block is order 10 on x86 and on
// arm64 with 4 KiB pages (MAX_ORDER 11 exclusive up to 6.3, 10 inclusive
// from 6.4, MAX_PAGE_ORDER from 6.8); arm64 with 16 or 64 KiB pages,
// powerpc and ia64 configurations go to 11-13 and beyond. A request above
// the largest block never reaches warn_alloc (__alloc_pages warns once and
// fails it), so 0-10 holds every order that can fail on the hosts this
// exporter is for, each its own series, and the rarer larger ones share
// "other": at most 12 series per host.
type kmsgOrder uint8

const (
	kmsgMaxOrder   = 10
	kmsgOrderOther = kmsgOrder(kmsgMaxOrder + 1)
	// kmsgOrderUnparsed: the report has no "order:N" where the kernel puts
	// it. Counted under other, and as bad input: every kernel prints it.
	kmsgOrderUnparsed = kmsgOrderOther + 1
	kmsgOrderLabels   = int(kmsgOrderOther) + 1 // values of the order label
)

// kmsgOrderNames are the values of the order label.
var kmsgOrderNames = [kmsgOrderLabels]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "other"}

// label is the order label's value; kmsgOrderUnparsed is "other".
func (o kmsgOrder) label() int { return int(min(o, kmsgOrderOther)) }

var (
	kmsgPageAllocFailure = []byte("page allocation failure")
	kmsgAllocOrderField  = []byte(" order:")
	kmsgTaskPrefix       = []byte("INFO: task ")
	kmsgBlockedFor       = []byte(" blocked for more than ")
	kmsgKilledProcess    = []byte("Killed process ")
	kmsgOOMKilled        = []byte(": Killed process ")
	kmsgOOMAnnounce      = []byte(": Kill process ") // 2.6.35 to 5.0
	kmsgOOMAnnounceOld   = []byte(": kill process ") // 2.6.32 and earlier
	kmsgMemoryWord       = []byte("memory")
	kmsgReasonCgroup     = []byte("Memory cgroup out of memory")
	kmsgReasonGlobal     = []byte("Out of memory")       // also "Out of memory (oom_kill_allocating_task)"
	kmsgReasonPolicy     = []byte("No available memory") // "… (MPOL_BIND)", 2.6.34 and earlier
	kmsgBufferIOError    = []byte("Buffer I/O error on dev")
	kmsgReqError         = []byte(" error, dev ")
	kmsgSector           = []byte(", sector ")
	kmsgSoftLockupText   = []byte("BUG: soft lockup - CPU#")
)

// parseKmsgMessage says what the message of one kernel-facility record is.
// It does not allocate. The texts matched, by kernel (mm/oom_kill.c,
// block/blk-core.c and blk-mq.c, fs/buffer.c, mm/page_alloc.c,
// kernel/hung_task.c, kernel/watchdog.c):
//
//   - page_allocation_failure: "<comm>: page allocation failure: order:N,
//     mode:0x…" with (4.9+) or without the named GFP flags, and the 2.6 form
//     "page allocation failure. order:N, mode:0x…"; N is the Order. Around
//     4.9, where warn_alloc prints "<comm>: " and the rest as separate
//     fragments, another CPU's output can come between them, so the record
//     may start at "page allocation failure" and hold anything after N
//     ("order:0 0000000000000000" has been seen).
//   - hung_task: "INFO: task <comm>:<pid> blocked for more than N seconds."
//     (N is kernel.hung_task_timeout_secs on older kernels and the time
//     actually blocked on newer ones; not always 120).
//   - OOM kills, by the reason the kernel gives: "Memory cgroup out of
//     memory" is a cgroup at its limit (oom_kill_cgroup); "Out of memory",
//     "Out of memory (oom_kill_allocating_task)" and 2.6.32's "No available
//     memory (MPOL_BIND)" (logged "Out of memory" from 2.6.35 on) are the host
//     or its NUMA nodes out of memory (oom_kill). From 5.1 the record of the
//     kill carries the reason: "<reason>: Killed process <pid> (<comm>)
//     total-vm:…". Up to 5.0 the reason is in an announcement, "<reason>: Kill
//     process <pid> (<comm>) score N or sacrifice child" (2.6.35+; 2.6.32:
//     "<reason>: kill process … score N or a child"), followed by one bare
//     "Killed process <pid> (<comm>) …" record per process killed (the child
//     sacrificed for its parent, each member of a 4.19 memory.oom.group; RHEL
//     6 and 7 print "Killed process <pid>, UID <uid>, (<comm>) …" and "Killed
//     process <pid> (<comm>), UID <uid>, …"). Announcements are not counted,
//     so one kill counts once. Not kills: "Would have killed process" (RHEL
//     6 test mode), "<reason>: OOM victim … is already exiting" (5.x), "Kill
//     process … sharing same memory" (up to 5.0: another process of the same
//     kill, which 5.x kills without a record and /proc/vmstat does not count).
//   - I/O errors: the block layer's request errors name the whole disk:
//     "end_request: <kind> error, dev sdb, sector N" (≤ 3.17),
//     "blk_update_request: <kind> error, dev …" (3.18 to 4.12 and 5.3 to
//     5.15), "print_req_error: <kind> error, dev …" (4.13 to 5.2) and "<kind>
//     error, dev sdb, sector N op 0x1:(WRITE) …" (5.16+); kind is "I/O",
//     "critical medium", "critical target", "operation not supported", … .
//     The buffer cache names the device the filesystem is on, a partition or
//     a disk: "Buffer I/O error on device sdb1, logical block N" (≤ 3.x),
//     "Buffer I/O error on dev sdb1, logical block N, async page read" (4.x+).
//   - soft_lockup: "BUG: soft lockup - CPU#N stuck for Ns! [comm:pid]",
//     prefixed "watchdog: " since 4.15.
func parseKmsgMessage(msg []byte) kmsgMessage {
	switch {
	case bytes.HasPrefix(msg, kmsgTaskPrefix) && bytes.Contains(msg, kmsgBlockedFor):
		return kmsgMessage{Event: kmsgHungTask}
	case bytes.HasPrefix(msg, kmsgKilledProcess):
		return kmsgMessage{Kind: kmsgOOMKilledBare}
	case bytes.Contains(msg, kmsgSoftLockupText):
		return kmsgMessage{Event: kmsgSoftLockup}
	}
	if i := bytes.Index(msg, kmsgBufferIOError); i >= 0 {
		return kmsgMessage{Kind: kmsgBufferError, Event: kmsgIOError, Device: kmsgBufferDevice(msg[i+len(kmsgBufferIOError):])}
	}
	if m, ok := parseKmsgOOM(msg); ok {
		return m
	}
	if i := bytes.Index(msg, kmsgPageAllocFailure); i >= 0 {
		if j := i + len(kmsgPageAllocFailure); j < len(msg) && (msg[j] == ':' || msg[j] == '.') {
			return kmsgMessage{Event: kmsgPageAllocationFailure, Order: kmsgAllocOrder(msg[j+1:])}
		}
	}
	if i := bytes.Index(msg, kmsgReqError); i >= 0 {
		rest := msg[i+len(kmsgReqError):]
		if j := bytes.Index(rest, kmsgSector); j >= 0 {
			return kmsgMessage{Kind: kmsgDiskError, Event: kmsgIOError, Device: kmsgDeviceName(rest[:j])}
		}
	}
	return kmsgMessage{}
}

// kmsgAllocOrder parses the order out of what follows "page allocation
// failure:" (or '.'): " order:N" and then anything (", mode:…", the end of
// a 3.x fragment). N is decimal (%u/%d in every kernel); any N above
// kmsgMaxOrder is kmsgOrderOther, and no " order:" with a digit after it is
// kmsgOrderUnparsed.
func kmsgAllocOrder(rest []byte) kmsgOrder {
	if !bytes.HasPrefix(rest, kmsgAllocOrderField) {
		return kmsgOrderUnparsed
	}
	rest = rest[len(kmsgAllocOrderField):]
	n, digits := 0, 0
	for ; digits < len(rest) && '0' <= rest[digits] && rest[digits] <= '9'; digits++ {
		if n <= kmsgMaxOrder { // stops growing past the bound: no overflow
			n = 10*n + int(rest[digits]-'0')
		}
	}
	switch {
	case digits == 0:
		return kmsgOrderUnparsed
	case n > kmsgMaxOrder:
		return kmsgOrderOther
	}
	return kmsgOrder(n)
}

// parseKmsgOOM recognises the OOM killer's records that carry a reason: the
// kill itself (5.1+) and the announcement of a kill (up to 5.0).
func parseKmsgOOM(msg []byte) (kmsgMessage, bool) {
	// Every reason has "memory": one search rules out nearly every message.
	if !bytes.Contains(msg, kmsgMemoryWord) {
		return kmsgMessage{}, false
	}
	if i := bytes.Index(msg, kmsgOOMKilled); i >= 0 {
		if e := kmsgOOMReason(msg[:i]); e != kmsgNoEvent {
			return kmsgMessage{Event: e}, true
		}
	}
	for _, verb := range [...][]byte{kmsgOOMAnnounce, kmsgOOMAnnounceOld} {
		if i := bytes.Index(msg, verb); i >= 0 {
			if e := kmsgOOMReason(msg[:i]); e != kmsgNoEvent {
				return kmsgMessage{Kind: kmsgOOMAnnouncement, Event: e}, true
			}
		}
	}
	return kmsgMessage{}, false
}

// kmsgOOMReason maps the reason the OOM killer gives to the event of its
// kills, kmsgNoEvent when the text is no such reason.
func kmsgOOMReason(reason []byte) kmsgEvent {
	switch {
	case bytes.Contains(reason, kmsgReasonCgroup):
		return kmsgOOMKillCgroup
	case bytes.Contains(reason, kmsgReasonGlobal), bytes.Contains(reason, kmsgReasonPolicy):
		return kmsgOOMKill
	}
	return kmsgNoEvent
}

// kmsgBufferDevice parses the device out of what follows "Buffer I/O error
// on dev": "ice sdb1, logical block N" (≤ 3.x) or " sdb1, logical block N,
// …" (4.x+).
func kmsgBufferDevice(rest []byte) []byte {
	rest = bytes.TrimPrefix(rest, []byte("ice"))
	if len(rest) == 0 || rest[0] != ' ' {
		return nil
	}
	rest = rest[1:]
	j := bytes.IndexByte(rest, ',')
	if j < 0 {
		return nil
	}
	return kmsgDeviceName(rest[:j])
}

// kmsgDeviceName returns b if it can be the kernel's name of a block device
// (sda, nvme0n1p2, dm-3, md127, cciss/c0d0p1: at most 64 bytes of letters,
// digits and "-_.:+/", not starting with "." and without ".."), else nil:
// the block layer logs "?" for a request without a disk, and a name goes
// into a sysfs path.
func kmsgDeviceName(b []byte) []byte {
	if len(b) == 0 || len(b) > 64 || b[0] == '.' || bytes.Contains(b, []byte("..")) {
		return nil
	}
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '+', c == '/':
		default:
			return nil
		}
	}
	return b
}

// kmsgClassifier turns the messages of kernel-facility records, in order,
// into events, with what one message does not say: the reason of the last
// OOM-kill announcement, and whether an I/O error's device is one the
// exporter watches. The reader goroutine owns it; it lives as long as the
// collector, so a kill read after a reopen is classified by the announcement
// read before it.
type kmsgClassifier struct {
	// oomReason is the event of the last "<reason>: Kill process"
	// announcement; kmsgNoEvent before the first one and after records were
	// lost, when the bare kill that follows may belong to an announcement
	// that was lost: such a kill counts as oom_kill, the one that pages, as
	// /proc/vmstat's oom_kill does in the alert where nothing tells the kind.
	oomReason kmsgEvent
	// excluded reports whether the device filter leaves out the device an
	// I/O error names (partition true: it may be a partition); nil leaves
	// out none.
	excluded func(device []byte, partition bool) bool
}

// event returns the event of the next message, kmsgNoEvent for none, and
// for kmsgPageAllocationFailure the order of the allocation (0 for any
// other event).
func (c *kmsgClassifier) event(msg []byte) (kmsgEvent, kmsgOrder) {
	m := parseKmsgMessage(msg)
	switch m.Kind {
	case kmsgOOMAnnouncement:
		c.oomReason = m.Event
		return kmsgNoEvent, 0
	case kmsgOOMKilledBare:
		if c.oomReason == kmsgNoEvent {
			return kmsgOOMKill, 0
		}
		return c.oomReason, 0
	case kmsgDiskError, kmsgBufferError:
		// A name that cannot be parsed is counted where it alerts.
		if m.Device != nil && c.excluded != nil && c.excluded(m.Device, m.Kind == kmsgBufferError) {
			return kmsgIOErrorExcluded, 0
		}
		return kmsgIOError, 0
	}
	return m.Event, m.Order
}

// recordsLost tells the classifier that records between the last message
// and the next were lost (overwritten before they were read).
func (c *kmsgClassifier) recordsLost() { c.oomReason = kmsgNoEvent }
