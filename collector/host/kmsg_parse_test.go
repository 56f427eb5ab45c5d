package host

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stall-exporter/stall_exporter/collector"
)

// kmsgFixturePaths has the block devices the fixtures name, laid out as in
// sysfs: /sys/class/block/<name> links to …/<disk>/<name> for a partition.
var kmsgFixturePaths = collector.Paths{Sysfs: "fixtures/kmsg/sys"}

// kmsgDefaultFilter is the diskstats device filter with its default flags
// over the fixture sysfs.
func kmsgDefaultFilter(t testing.TB) *deviceFilter {
	return newDeviceFilter(kmsgFixturePaths, testSettings(t).devices)
}

func TestKmsgParseRecord(t *testing.T) {
	for _, c := range []struct {
		in                  string
		fac, lvl, seq, usec uint64
		flags, msg          string
	}{
		{"6,339,5140900,-;NET: Registered protocol family 10\n", 0, 6, 339, 5140900, "-", "NET: Registered protocol family 10"},
		{"30,340,5690716,-;udevd[80]: starting version 181\n", 3, 6, 340, 5690716, "-", "udevd[80]: starting version 181"},
		{"3,1534,99,-;end_request: I/O error, dev sdb, sector 1\n SUBSYSTEM=block\n DEVICE=b8:16\n", 0, 3, 1534, 99, "-", "end_request: I/O error, dev sdb, sector 1"},
		{"4,7,8,c;frag", 0, 4, 7, 8, "c", "frag"},
		{"4,7,8,-,caller=T2911;msg;with;semicolons\n", 0, 4, 7, 8, "-", "msg;with;semicolons"},
		{"4,18446744073709551615,0,-;", 0, 4, 1<<64 - 1, 0, "-", ""},
	} {
		r, err := parseKmsgRecord([]byte(c.in))
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if r.Facility != c.fac || r.Level != c.lvl || r.Seq != c.seq || r.Usec != c.usec || string(r.Flags) != c.flags || string(r.Message) != c.msg {
			t.Errorf("%q: got fac %d lvl %d seq %d usec %d flags %q msg %q", c.in, r.Facility, r.Level, r.Seq, r.Usec, r.Flags, r.Message)
		}
	}
	for in, want := range map[string]error{
		"":                                     errKmsgNoSemicolon,
		"no header at all":                     errKmsgNoSemicolon,
		" SUBSYSTEM=block\n;x":                 errKmsgNoSemicolon,
		"6,339;short header":                   errKmsgFields,
		"x,1,2,-;bad prio":                     errKmsgPrio,
		"6,-1,2,-;bad seq":                     errKmsgSeq,
		"6,1,99999999999999999999999,-;bad ts": errKmsgTimestamp,
	} {
		if _, err := parseKmsgRecord([]byte(in)); !errors.Is(err, want) {
			t.Errorf("%q: err %v, want %v", in, err, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		parseKmsgRecord([]byte("4,7,8,-,caller=T2911;INFO: task java:1 blocked for more than 120 seconds.\n"))
	}); n != 0 {
		t.Errorf("parsing a record allocates %v times, want 0", n)
	}
}

// kmsgClassifyAll classifies messages in order, as the reader does, with
// the default device filter over the fixture sysfs.
func kmsgClassifyAll(t testing.TB, msgs ...string) []kmsgEvent {
	c := kmsgClassifier{excluded: kmsgDefaultFilter(t).excludesIOError}
	var got []kmsgEvent
	for _, m := range msgs {
		e, _ := c.event([]byte(m))
		got = append(got, e)
	}
	return got
}

// TestKmsgClassify: one message each, with no OOM announcement before it.
func TestKmsgClassify(t *testing.T) {
	for msg, want := range map[string]kmsgEvent{
		"java: page allocation failure. order:1, mode:0x20":                                        kmsgPageAllocationFailure, // 2.6.32
		"java: page allocation failure: order:1, mode:0x20":                                        kmsgPageAllocationFailure,
		"java: page allocation failure: order:0, mode:0x820(GFP_ATOMIC), nodemask=(null),cpuset=/": kmsgPageAllocationFailure,
		"page allocation failure":                                                                  kmsgNoEvent,
		"java: page allocation stalls for 10012ms, order:0":                                        kmsgNoEvent,
		"INFO: task java:2911 blocked for more than 120 seconds.":                                  kmsgHungTask,
		"INFO: task kworker/u8:2:1234 blocked for more than 1234 seconds.":                         kmsgHungTask,
		"INFO: task java:2911 is blocked on a mutex likely owned by task kworker/u8:2:1234.":       kmsgNoEvent,
		"rcu: INFO: rcu_sched self-detected stall on CPU":                                          kmsgNoEvent,
		"BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:1234]":                               kmsgSoftLockup,
		"watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [java:2911]":                            kmsgSoftLockup,
		"NMI watchdog: Watchdog detected hard LOCKUP on cpu 2":                                     kmsgNoEvent,

		// OOM kills, 5.1+: the kill carries its reason.
		"Out of memory: Killed process 2911 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:8kB oom_score_adj:0": kmsgOOMKill,
		"Out of memory (oom_kill_allocating_task): Killed process 2911 (java) total-vm:1kB":                                                        kmsgOOMKill,
		"Memory cgroup out of memory: Killed process 3050 (redis-server) total-vm:1kB":                                                             kmsgOOMKillCgroup,
		"Memory cgroup out of memory: OOM victim 3050 (redis-server) is already exiting. Skip killing the task":                                    kmsgNoEvent,
		// Up to 5.0: announcements are not counted; a bare kill with no
		// announcement before it is global.
		"Out of memory: Kill process 2911 (java) score 912 or sacrifice child":                       kmsgNoEvent,
		"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child": kmsgNoEvent,
		"Out of memory: kill process 2911 (java) score 1834567 or a child":                           kmsgNoEvent, // 2.6.32
		"Killed process 2911 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB":                        kmsgOOMKill,
		"Killed process 2911 (java)": kmsgOOMKill, // 2.6.32
		"Killed process 2911, UID 500, (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB":                  kmsgOOMKill, // RHEL 6
		"Killed process 2911 (java), UID 1000, total-vm:1kB, anon-rss:1kB, file-rss:0kB":                 kmsgOOMKill, // RHEL 7
		"Kill process 2912 (java) sharing same memory":                                                   kmsgNoEvent,
		"Would have killed process 2911 (java). But continuing instead.":                                 kmsgNoEvent, // RHEL 6
		"oom_reaper: reaped process 2911 (java), now anon-rss:0kB":                                       kmsgNoEvent,
		"Out of memory and no killable processes...":                                                     kmsgNoEvent,
		"Out of memory: compulsory panic_on_oom is enabled":                                              kmsgNoEvent,
		"Tasks in /system.slice/redis-server.service are going to be killed due to memory.oom.group set": kmsgNoEvent,
		"audit: Killed process list: none":                                                               kmsgNoEvent,

		// I/O errors: whole disks from the block layer, the device (a
		// partition or a disk) from the buffer cache; default filter.
		"end_request: I/O error, dev sdb, sector 1953525000":                                     kmsgIOError,
		"blk_update_request: I/O error, dev sdb, sector 2048 op 0x1:(WRITE) flags 0x800":         kmsgIOError,
		"print_req_error: critical medium error, dev sdb, sector 1953525000":                     kmsgIOError,
		"I/O error, dev sda, sector 2048 op 0x0:(READ) flags 0x80700 phys_seg 1 prio class 2":    kmsgIOError,
		"critical target error, dev dm-0, sector 0 op 0x1:(WRITE) flags 0x0 phys_seg 1":          kmsgIOError,
		"blk_update_request: operation not supported error, dev nvme0n1, sector 0 op 0x0:(READ)": kmsgIOError,
		"I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2":           kmsgIOErrorExcluded,
		"print_req_error: I/O error, dev sr0, sector 0":                                          kmsgIOErrorExcluded,
		"blk_update_request: I/O error, dev loop3, sector 0 op 0x0:(READ) flags 0x80700":         kmsgIOErrorExcluded,
		"blk_update_request: I/O error, dev ?, sector 0":                                         kmsgIOError, // no disk: counted where it alerts
		"Buffer I/O error on device sdb1, logical block 244190625":                               kmsgIOError,
		"Buffer I/O error on dev sdb1, logical block 0, async page read":                         kmsgIOError,
		"Buffer I/O error on dev nvme0n1p2, logical block 131072, lost async page write":         kmsgIOError,
		"Buffer I/O error on dev dm-0, logical block 3670000, async page read":                   kmsgIOError,
		"Buffer I/O error on device fd0, logical block 0":                                        kmsgIOErrorExcluded,
		"Buffer I/O error on dev sr0, logical block 0, async page read":                          kmsgIOErrorExcluded,
		"Buffer I/O error on dev loop0p1, logical block 0, async page read":                      kmsgIOErrorExcluded, // partition of loop0
		"Buffer I/O error on dev loop3, logical block 0, async page read":                        kmsgIOErrorExcluded,
		"Buffer I/O error on dev":                               kmsgIOError,
		"Buffer I/O error on dev ../../../etc, logical block 0": kmsgIOError,
		"lost page write due to I/O error on sdb1":              kmsgNoEvent,
	} {
		if got := kmsgClassifyAll(t, msg)[0]; got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}

	// The reader's path allocates nothing once a device is decided.
	c := kmsgClassifier{excluded: kmsgDefaultFilter(t).excludesIOError}
	msgs := [][]byte{
		[]byte("Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child"),
		[]byte("Killed process 3050 (redis-server) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"),
		[]byte("Out of memory: Killed process 2911 (java) total-vm:1kB"),
		[]byte("Buffer I/O error on dev nvme0n1p2, logical block 131072, lost async page write"),
		[]byte("I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2"),
		[]byte("e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: None"),
		[]byte("swapper/3: page allocation failure: order:3, mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null),cpuset=/,mems_allowed=0"),
		[]byte("kworker/0:1: page allocation failure: order:13, mode:0x484020(GFP_ATOMIC|__GFP_COMP), nodemask=(null)"),
	}
	for _, m := range msgs {
		c.event(m)
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, m := range msgs {
			c.event(m)
		}
	}); n != 0 {
		t.Errorf("classifying allocates %v times per round, want 0", n)
	}
}

// TestKmsgAllocOrder: the order of a page allocation failure report, in
// the shapes kernels from 2.6 to 6.x print (process names, modes and
// orders as in public reports; the message texts of each version).
func TestKmsgAllocOrder(t *testing.T) {
	const (
		other    = kmsgOrderOther
		unparsed = kmsgOrderUnparsed
	)
	for _, c := range []struct {
		kernel, msg string
		want        kmsgOrder
	}{
		{"2.6.9", "kswapd0: page allocation failure. order:3, mode:0xd0", 3},
		{"2.6.32", "swapper: page allocation failure. order:1, mode:0x20", 1},
		{"2.6.32", "java: page allocation failure. order:0, mode:0x20", 0},
		{"2.6.32", "node_exporter: page allocation failure. order:5, mode:0xd0", 5},
		{"3.3", "z_wr_iss/2: page allocation failure: order:0, mode:0x20", 0},
		{"3.10", "swapper/21: page allocation failure: order:0, mode:0x20", 0},
		{"3.10 fragment", "kswapd0: page allocation failure: order:1", 1}, // ", mode:0x20" follows as a '+' record
		{"3.18", "dmwb_writeback_: page allocation failure: order:8, mode:0x204010", 8},
		{"4.9", "java: page allocation failure: order:0, mode:0x2084120(GFP_ATOMIC|__GFP_COLD|__GFP_COMP)", 0},
		{"4.9", "AiApp: page allocation failure: order:10, mode:0x2084020(GFP_ATOMIC|__GFP_COMP)", 10},
		// 4.9: the comm, the text and the mode are separate fragments;
		// another CPU's output can end up between and after them.
		{"4.9 fragment", "page allocation failure: order:0", 0},
		{"4.9 interleaved", "page allocation failure: order:0 0000000000000000", 0},
		{"4.12", "cc1plus: page allocation failure: order:0, mode:0x1082020(GFP_ATOMIC|__GFP_MEMALLOC), nodemask=(null)", 0},
		{"4.19", "swapper/5: page allocation failure: order:3, mode:0x484020(GFP_ATOMIC|__GFP_COMP), nodemask=(null)", 3},
		{"5.4", "kworker/u16:3: page allocation failure: order:4, mode:0x40dc0(GFP_KERNEL|__GFP_COMP|__GFP_ZERO), nodemask=(null),cpuset=/,mems_allowed=0", 4},
		{"5.15", "swapper/3: page allocation failure: order:2, mode:0x40a20(GFP_ATOMIC|__GFP_COMP), nodemask=(null),cpuset=/,mems_allowed=0", 2},
		{"6.8", "irq/5-600c0004.: page allocation failure: order:0, mode:0x820(GFP_ATOMIC), nodemask=(null)", 0},
		{"6.8", "swapper/5: page allocation failure: order:9, mode:0x40820(GFP_ATOMIC|__GFP_COMP), nodemask=0-1,cpuset=/,mems_allowed=0-1", 9},
		// Above the x86 maximum: arm64 with 16 or 64 KiB pages.
		{"arm64 16K", "kworker/2:1: page allocation failure: order:11, mode:0x40820(GFP_ATOMIC|__GFP_COMP), nodemask=(null)", other},
		{"arm64 64K", "kworker/2:1: page allocation failure: order:13, mode:0x40820(GFP_ATOMIC|__GFP_COMP), nodemask=(null)", other},
		// Not what a kernel prints.
		{"", "x: page allocation failure: order:99999999999999999999999999, mode:0x20", other},
		{"", "x: page allocation failure: order:, mode:0x20", unparsed},
		{"", "x: page allocation failure: order:-1, mode:0x20", unparsed},
		{"", "x: page allocation failure: mode:0x20", unparsed},
		{"", "x: page allocation failure:", unparsed},
		{"", "x: page allocation failure. order 3", unparsed},
	} {
		var cl kmsgClassifier
		e, got := cl.event([]byte(c.msg))
		if e != kmsgPageAllocationFailure || got != c.want {
			t.Errorf("%s %q: %s order %d, want page_allocation_failure order %d", c.kernel, c.msg, e, got, c.want)
		}
	}
	for o, want := range map[kmsgOrder]string{0: "0", 7: "7", 10: "10", other: "other", unparsed: "other"} {
		if got := kmsgOrderNames[o.label()]; got != want {
			t.Errorf("order %d has label %q, want %q", o, got, want)
		}
	}
}

// TestKmsgClassifyOOMSequences: up to 5.0 the bare "Killed process" record
// is classified by the reason of the announcement before it, for every
// process one announcement kills; 5.1+ records carry their own reason.
func TestKmsgClassifyOOMSequences(t *testing.T) {
	const (
		none   = kmsgNoEvent
		global = kmsgOOMKill
		cgroup = kmsgOOMKillCgroup
	)
	for _, c := range []struct {
		name string
		msgs []string
		want []kmsgEvent
	}{
		{"2.6.32 global then memcg", []string{
			"java invoked oom-killer: gfp_mask=0x201da, order=0, oom_adj=0",
			"Out of memory: kill process 2911 (java) score 1834567 or a child",
			"Killed process 2911 (java)",
			"Memory cgroup out of memory: kill process 3050 (redis-server) score 998 or a child",
			"Killed process 3051 (redis-server)",
		}, []kmsgEvent{none, none, global, none, cgroup}},
		{"2.6.32 MPOL_BIND", []string{
			"No available memory (MPOL_BIND): kill process 4100 (java) score 0 or a child",
			"Killed process 4100 (java)",
		}, []kmsgEvent{none, global}},
		{"3.10 memcg then oom_kill_allocating_task", []string{
			"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Killed process 3050 (redis-server), UID 114, total-vm:2097152kB, anon-rss:1048576kB, file-rss:0kB, shmem-rss:0kB",
			"Kill process 3052 (redis-server) sharing same memory",
			"Out of memory (oom_kill_allocating_task): Kill process 4100 (java) score 0 or sacrifice child",
			"Killed process 4100 (java), UID 1000, total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
		}, []kmsgEvent{none, cgroup, none, none, global}},
		{"4.19 memory.oom.group, memcg", []string{
			"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Killed process 3050 (redis-server) total-vm:2097152kB, anon-rss:1048576kB, file-rss:0kB, shmem-rss:0kB",
			"Tasks in /system.slice/redis-server.service are going to be killed due to memory.oom.group set",
			"Killed process 3052 (redis-sentinel) total-vm:52000kB, anon-rss:3000kB, file-rss:0kB, shmem-rss:0kB",
			"Killed process 3071 (redis-rdb-bgsav) total-vm:2097152kB, anon-rss:900000kB, file-rss:0kB, shmem-rss:0kB",
			"Out of memory: Kill process 2911 (java) score 912 or sacrifice child",
			"Killed process 2911 (java) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
		}, []kmsgEvent{none, cgroup, none, cgroup, cgroup, none, global}},
		{"4.19 memory.oom.group, global", []string{
			"Out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Killed process 3050 (redis-server) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
			"Tasks in /system.slice/redis-server.service are going to be killed due to memory.oom.group set",
			"Killed process 3052 (redis-sentinel) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
		}, []kmsgEvent{none, global, none, global}},
		{"5.x after a 4.x-style announcement", []string{
			"Memory cgroup out of memory: Kill process 3050 (redis-server) score 998 or sacrifice child",
			"Out of memory: Killed process 2911 (java) total-vm:1kB",
			"Memory cgroup out of memory: Killed process 3060 (java) total-vm:1kB",
			"Tasks in /kubepods/pod1 are going to be killed due to memory.oom.group set",
			"Memory cgroup out of memory: Killed process 3061 (sidecar) total-vm:1kB",
		}, []kmsgEvent{none, global, cgroup, none, cgroup}},
	} {
		if got := kmsgClassifyAll(t, c.msgs...); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestKmsgIODevices: the disk of the device an I/O error names, by sysfs
// (partition file and link), else by the common partition names, else the
// name; and the device filter's include and exclude flags applied to it.
func TestKmsgIODevices(t *testing.T) {
	for _, c := range []struct {
		sysfs string
		name  string
		disk  string
	}{
		{"fixtures/kmsg/sys", "sda", "sda"},
		{"fixtures/kmsg/sys", "sda1", "sda"},
		{"fixtures/kmsg/sys", "nvme0n1p2", "nvme0n1"},
		{"fixtures/kmsg/sys", "loop0p1", "loop0"},
		{"fixtures/kmsg/sys", "dm-3", "dm-3"},               // not a partition, though it ends in a digit
		{"fixtures/linux-4.19/sys", "nvme0n1p2", "nvme0n1"}, // a partition file without sysfs' links: by name
		{"fixtures/linux-6.8/sys", "vda1", "vda"},
		{"no-such-sysfs", "sdb1", "sdb"},
		{"no-such-sysfs", "mmcblk0p1", "mmcblk0"},
		{"no-such-sysfs", "md127", "md127"},
		{"no-such-sysfs", "cciss/c0d0p1", "cciss/c0d0"},
		{"no-such-sysfs", "sata1p2", "sata1"}, // Synology DSM
	} {
		if got, _ := diskOf(collector.Paths{Sysfs: c.sysfs}, c.name); got != c.disk {
			t.Errorf("%s: diskOf(%s) = %s, want %s", c.sysfs, c.name, got, c.disk)
		}
	}

	// This machine's sysfs: every disk is its own disk, every partition
	// maps to another device sysfs knows (a CI runner has partitions; this
	// development VM's kernel parses no partition tables).
	sysDevs, err := os.ReadDir("/sys/class/block")
	if err != nil || len(sysDevs) == 0 {
		t.Fatalf("no block devices in this machine's /sys/class/block (%v)", err)
	}
	for _, e := range sysDevs {
		name := strings.ReplaceAll(e.Name(), "!", "/")
		disk, _ := diskOf(collector.Paths{Sysfs: "/sys"}, name)
		_, perr := os.Stat(filepath.Join("/sys/class/block", e.Name(), "partition"))
		switch {
		case perr != nil && disk != name:
			t.Errorf("/sys: disk %s maps to %s", name, disk)
		case perr == nil && disk == name:
			t.Errorf("/sys: partition %s maps to itself", name)
		case perr == nil:
			if _, err := os.Stat(filepath.Join("/sys/class/block", strings.ReplaceAll(disk, "/", "!"), "partition")); err == nil {
				t.Errorf("/sys: partition %s maps to %s, another partition", name, disk)
			}
			t.Logf("/sys: partition %s is on %s", name, disk)
		}
	}

	d := newDeviceFilter(kmsgFixturePaths, testSettings(t, `--diskstats.device-include=nvme\d+n\d+`).devices)
	for _, c := range []struct {
		name      string
		partition bool
		excluded  bool
	}{
		{"nvme0n1", false, false},
		{"nvme0n1p2", true, false}, // its disk is included
		{"sda", false, true},
		{"sda1", true, true},
		{"loop3", false, true},
	} {
		for range 2 { // the second answer comes from the cache
			if got := d.excludesIOError([]byte(c.name), c.partition); got != c.excluded {
				t.Errorf("--diskstats.device-include=nvme\\d+n\\d+: excluded(%s) = %v, want %v", c.name, got, c.excluded)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { d.excludesIOError([]byte("nvme0n1p2"), true) }); n != 0 {
		t.Errorf("a cached device decision allocates %v times, want 0", n)
	}
}

var kmsgHeaderRe = regexp.MustCompile(`^\d+,\d+,\d+,[^;]*;`)

// FuzzKmsgRecord: the parser never panics, accepts exactly the records whose
// header has the documented shape, and never returns a message with a
// newline; classification is total, an OOM event needs a "Killed process"
// record, an I/O event an " error", an excluded one a device name that is
// safe in a sysfs path, and only an announcement changes the reason a later
// bare kill gets.
func FuzzKmsgRecord(f *testing.F) {
	files, _ := filepath.Glob("fixtures/kmsg/*.kmsg")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && l[0] != '#' && l[0] != ' ' {
				f.Add([]byte(l + "\n SUBSYSTEM=block\n"))
			}
		}
	}
	f.Add([]byte("4,1,2,-,caller=T1;x"))
	f.Add([]byte(";"))
	f.Add([]byte("3,1,1,-;Buffer I/O error on dev ../../x, logical block 0"))
	f.Add([]byte("3,1,1,-;OOM[2]: Memory cgroup out of memory: Kill process 1 (x) score 1 or sacrifice child"))
	f.Add([]byte("4,1,1,-;x: page allocation failure: order:10, mode:0x2084020(GFP_ATOMIC|__GFP_COMP)"))
	f.Add([]byte("4,1,1,-;x: page allocation failure. order:13, mode:0x20"))
	f.Add([]byte("4,1,1,c;page allocation failure: order:"))
	f.Add([]byte("4,1,1,-;x: page allocation failure: order:99999999999999999999999, mode:0x20"))
	excluded := kmsgDefaultFilter(f).excludesIOError
	bare := []byte("Killed process 1 (x)")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseKmsgRecord(b)
		if err != nil {
			return
		}
		if bytes.IndexByte(r.Message, '\n') >= 0 {
			t.Fatalf("message holds a newline: %q", r.Message)
		}
		if !kmsgHeaderRe.Match(b) {
			t.Fatalf("accepted a record without a valid header: %q", b)
		}
		if r.Level > 7 {
			t.Fatalf("level %d", r.Level)
		}
		m := parseKmsgMessage(r.Message)
		if m.Device != nil && kmsgDeviceName(m.Device) == nil {
			t.Fatalf("device %q is not a device name: %q", m.Device, r.Message)
		}
		c := kmsgClassifier{excluded: excluded}
		e, order := c.event(r.Message)
		switch {
		case e >= kmsgEventCount:
			t.Fatalf("event %d out of range", e)
		case e != kmsgPageAllocationFailure && order != 0:
			t.Fatalf("%s with order %d: %q", e, order, r.Message)
		case order > kmsgOrderUnparsed:
			t.Fatalf("order %d out of range: %q", order, r.Message)
		case order != kmsgOrderUnparsed && e == kmsgPageAllocationFailure && !bytes.Contains(r.Message, kmsgAllocOrderField):
			t.Fatalf("order %d from a report without \" order:\": %q", order, r.Message)
		case (e == kmsgOOMKill || e == kmsgOOMKillCgroup) && !bytes.Contains(r.Message, kmsgKilledProcess):
			t.Fatalf("%s without a kill: %q", e, r.Message)
		case (e == kmsgIOError || e == kmsgIOErrorExcluded) && !bytes.Contains(r.Message, []byte(" error")):
			t.Fatalf("%s without an error: %q", e, r.Message)
		case e == kmsgIOErrorExcluded && m.Device == nil:
			t.Fatalf("excluded without a device: %q", r.Message)
		}
		want := kmsgOOMKill // nothing announced yet
		if m.Kind == kmsgOOMAnnouncement {
			want = m.Event
		}
		if got, _ := c.event(bare); got != want {
			t.Fatalf("a bare kill after %q is %s, want %s", r.Message, got, want)
		}
	})
}
