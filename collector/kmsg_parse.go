package collector

import (
	"bytes"
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
)

// parseKmsgRecord parses one record as returned by one read of /dev/kmsg.
// It does not allocate.
func parseKmsgRecord(b []byte) (kmsgRecord, error) {
	var r kmsgRecord
	semi := bytes.IndexByte(b, ';')
	if semi < 0 {
		return r, errKmsgNoSemicolon
	}
	// The header never holds a newline; one before ';' means no header.
	if bytes.IndexByte(b[:semi], '\n') >= 0 {
		return r, errKmsgNoSemicolon
	}
	hdr, msg := b[:semi], b[semi+1:]
	if i := bytes.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	var f [3][]byte
	for i := range f {
		c := bytes.IndexByte(hdr, ',')
		if c < 0 {
			return r, errKmsgFields
		}
		f[i], hdr = hdr[:c], hdr[c+1:]
	}
	prio, ok := parseUint(f[0])
	if !ok {
		return r, errKmsgPrio
	}
	if r.Seq, ok = parseUint(f[1]); !ok {
		return r, errKmsgSeq
	}
	if r.Usec, ok = parseUint(f[2]); !ok {
		return r, errKmsgTimestamp
	}
	if c := bytes.IndexByte(hdr, ','); c >= 0 {
		hdr = hdr[:c] // later fields (caller=T123) are not used
	}
	r.Facility, r.Level, r.Flags, r.Message = prio>>3, prio&7, hdr, msg
	return r, nil
}

// kmsgEvent is one of the bounded set of kernel log events the exporter
// counts.
type kmsgEvent uint8

const (
	kmsgNoEvent kmsgEvent = iota
	kmsgPageAllocationFailure
	kmsgHungTask
	kmsgOOMKill
	kmsgIOError
	kmsgSoftLockup
	kmsgEventCount
)

// kmsgEventNames are the values of the event label.
var kmsgEventNames = [kmsgEventCount]string{
	kmsgNoEvent:               "",
	kmsgPageAllocationFailure: "page_allocation_failure",
	kmsgHungTask:              "hung_task",
	kmsgOOMKill:               "oom_kill",
	kmsgIOError:               "io_error",
	kmsgSoftLockup:            "soft_lockup",
}

func (e kmsgEvent) String() string { return kmsgEventNames[e] }

var (
	kmsgPageAllocFailure = []byte("page allocation failure")
	kmsgTaskPrefix       = []byte("INFO: task ")
	kmsgBlockedFor       = []byte(" blocked for more than ")
	kmsgKilledProcess    = []byte("Killed process ")
	kmsgOOMKilled        = []byte("out of memory: Killed process ") // "Out of …" and "Memory cgroup out of …"
	kmsgOOMKilledUpper   = []byte("Out of memory: Killed process ")
	kmsgBufferIOError    = []byte("Buffer I/O error on dev")
	kmsgReqError         = []byte(" error, dev ")
	kmsgSector           = []byte(", sector ")
	kmsgSoftLockupText   = []byte("BUG: soft lockup - CPU#")
)

// classifyKmsg maps the message of one kernel-facility record to an event.
// The texts matched, by kernel:
//
//   - page_allocation_failure: "<comm>: page allocation failure: order:N,
//     mode:0x…" with (4.9+) or without the named GFP flags, and the 2.6
//     form "page allocation failure. order:N, mode:0x…".
//   - hung_task: "INFO: task <comm>:<pid> blocked for more than N seconds."
//     (N is kernel.hung_task_timeout_secs on older kernels and the time
//     actually blocked on newer ones; not always 120).
//   - oom_kill: the record of the kill itself: "Killed process <pid> (…)"
//     (3.x/4.x, after an "Out of memory: Kill process … score … or
//     sacrifice child" record that is not counted), "Out of memory: Killed
//     process …" and "Memory cgroup out of memory: Killed process …" (5.x+).
//   - io_error: "Buffer I/O error on dev(ice) …", and the block layer's
//     request errors "end_request: I/O error, dev sdb, sector N" (≤3.17),
//     "blk_update_request: I/O error, dev …" (3.18 to 5.x),
//     "print_req_error: I/O error, dev …" (4.13+), "I/O error, dev sdb,
//     sector N op 0x1:(WRITE) …" (recent kernels) and the other "<kind>
//     error, dev X, sector N" kinds (critical medium error, …).
//   - soft_lockup: "BUG: soft lockup - CPU#N stuck for Ns! [comm:pid]",
//     prefixed "watchdog: " since 4.15.
func classifyKmsg(msg []byte) kmsgEvent {
	switch {
	case bytes.HasPrefix(msg, kmsgTaskPrefix) && bytes.Contains(msg, kmsgBlockedFor):
		return kmsgHungTask
	case bytes.HasPrefix(msg, kmsgKilledProcess) || bytes.Contains(msg, kmsgOOMKilled) || bytes.Contains(msg, kmsgOOMKilledUpper):
		return kmsgOOMKill
	case bytes.Contains(msg, kmsgSoftLockupText):
		return kmsgSoftLockup
	case bytes.Contains(msg, kmsgBufferIOError):
		return kmsgIOError
	}
	if i := bytes.Index(msg, kmsgPageAllocFailure); i >= 0 {
		if j := i + len(kmsgPageAllocFailure); j < len(msg) && (msg[j] == ':' || msg[j] == '.') {
			return kmsgPageAllocationFailure
		}
	}
	if i := bytes.Index(msg, kmsgReqError); i >= 0 && bytes.Contains(msg[i:], kmsgSector) {
		return kmsgIOError
	}
	return kmsgNoEvent
}
