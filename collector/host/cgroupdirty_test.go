package host

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// The kernel's formula (cgroupdirty_limits.go), computed by hand for the
// issue's case: a broker in a pod limited to 8 GiB on a node with ~229 GiB
// of dirtyable memory, 4 KiB pages, vm.dirty_ratio 20, _background_ratio 10.
//
//	host:   gavail = 60,000,000 pages, gdirty = 1,000,000 pages
//	cgroup: filepages = 7 GiB = 1,835,008; dirty 900 MiB = 230,400;
//	        writeback 100 MiB = 25,600; memory.max 8 GiB = 2,097,152,
//	        memory.current 8 GiB - 64 MiB = 2,080,768 → headroom 16,384
//	clean        = 1,835,008 - 256,000        = 1,579,008
//	global_clean = 60,000,000 - 1,000,000     = 59,000,000
//	other_clean  = 59,000,000 - 1,579,008     = 57,420,992
//	avail        = 1,835,008 + min(16,384, 57,420,992) = 1,851,392
//	ratio = 20·4096/100 = 819 (per 4096), bg_ratio = 10·4096/100 = 409
//	thresh = 819 · 1,851,392 / 4096 = 370,188
//	bg     = 409 · 1,851,392 / 4096 = 184,868
//	freerun = (370,188 + 184,868) / 2 = 277,528 → ratio 256,000 / 277,528 = 0.9224
//
// The host's own: thresh = 819 · 60,000,000 / 4096 = 11,997,070,
// bg = 5,991,210, ratio 1,000,000 / 8,994,140 = 0.111: the host's alerts
// stay silent while the pod's writers are a few MiB from the throttle.
func TestCgroupDirtyLimitsByHand(t *testing.T) {
	sys := dirtySysctls{ratio: 20, bgRatio: 10}
	pod := memcgDirty{filePages: 1835008, headroom: 16384, dirty: 230400, writeback: 25600}
	avail, th, bg := memcgDirtyLimits(sys, 4096, 60000000, 1000000, pod)
	if avail != 1851392 || th != 370188 || bg != 184868 {
		t.Errorf("pod: avail, thresh, bg = %d, %d, %d; want 1851392, 370188, 184868", avail, th, bg)
	}
	if r, _ := throttleRatio(230400+25600, th, bg); math.Abs(r-256000.0/277528) > 1e-12 {
		t.Errorf("pod ratio %v, want %v", r, 256000.0/277528)
	}

	// No memory.max or memory.high anywhere: the headroom is unlimited
	// and other_clean bounds avail: a cgroup with 512 MiB of file pages,
	// 36 MiB dirty or under writeback (131,072 and 9,216 pages):
	// avail = 131,072 + (59,000,000 - (131,072 - 9,216)) = 59,009,216;
	// thresh = 819 · 59,009,216 / 4096 = 11,798,961 (of 11,798,961.9);
	// bg = 409 · 59,009,216 / 4096 = 5,892,277 — about the host's.
	svc := memcgDirty{filePages: 131072, headroom: noHeadroom, dirty: 8192, writeback: 1024}
	avail, th, bg = memcgDirtyLimits(sys, 4096, 60000000, 1000000, svc)
	if avail != 59009216 || th != 11798961 || bg != 5892277 {
		t.Errorf("unlimited: avail, thresh, bg = %d, %d, %d; want 59009216, 11798961, 5892277", avail, th, bg)
	}

	// vm.dirty_bytes = 2 GiB is scaled to the host for a memcg domain:
	// ratio = DIV_ROUND_UP(2,147,483,648, 60,000,000) = 36 (per 4096),
	// thresh = 36 · 1,851,392 / 4096 = 16,272 pages (63.6 MiB); the
	// background ratio 409 gives 184,868 ≥ thresh, so bg = thresh / 2.
	bytesSys := dirtySysctls{bytes: 2 << 30, bgRatio: 10}
	_, th, bg = memcgDirtyLimits(bytesSys, 4096, 60000000, 1000000, pod)
	if th != 16272 || bg != 8136 {
		t.Errorf("dirty_bytes: thresh, bg = %d, %d; want 16272, 8136", th, bg)
	}

	// A dirty cgroup whose dirty pages exceed its file pages (they are
	// counted at different times): clean is 0, not negative.
	odd := memcgDirty{filePages: 100, headroom: 50, dirty: 200, writeback: 0}
	if avail, _, _ = memcgDirtyLimits(sys, 4096, 1000, 100, odd); avail != 150 {
		t.Errorf("dirty > file: avail %d, want 100 + min(50, 900) = 150", avail)
	}
}

// hostDirtyable inverts /proc/vmstat's nr_dirty_threshold: with ratio 20
// the kernel printed 11,997,070 for 60,000,000 dirtyable pages;
// (11,997,070 · 4096 + 2048) / 819 = 60,000,000.
func TestHostDirtyable(t *testing.T) {
	var v VMStat
	ParseVMStat([]byte("nr_free_pages 1000\nnr_inactive_file 2000\nnr_active_file 3000\nnr_dirty 10\nnr_writeback 5\n"+
		"nr_dirty_threshold 11997070\nnr_dirty_background_threshold 5991210\n"), &v)
	for _, tc := range []struct {
		name string
		sys  dirtySysctls
		want uint64
	}{
		{"ratio", dirtySysctls{ratio: 20, bgRatio: 10}, 60000000},
		// vm.dirty_bytes set: the background threshold, by ratio, is inverted.
		{"dirty_bytes", dirtySysctls{bytes: 1 << 30, bgRatio: 10}, (5991210*4096 + 2048) / 409},
		// both in bytes: free + file pages + 1 (without totalreserve_pages).
		{"both bytes", dirtySysctls{bytes: 1 << 30, bgBytes: 1 << 29}, 6001},
	} {
		got, ok := hostDirtyable(&v, tc.sys, 4096)
		if !ok || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, ok, tc.want)
		}
	}
	if d, ok := hostDirtyPages(&v); !ok || d != 15 {
		t.Errorf("host dirty pages %d, %v; want 15", d, ok)
	}
}

const podUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

var podContainer = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
	strings.ReplaceAll(podUID, "-", "_") + ".slice/cri-containerd-" + strings.Repeat("ab", 32) + ".scope"

func stat(dirty, writeback, active, inactive uint64) string {
	return fmt.Sprintf("anon 0\nfile_dirty %d\nfile_writeback %d\nactive_file %d\ninactive_file %d\n", dirty, writeback, active, inactive)
}

// cgroupHost writes a cgroup v2 host: a procfs with mountinfo, vmstat and
// the dirty sysctls, and a cgroup2 tree with the broker's pod (the
// v2-6.8-pod fixture, memory.max 8 GiB), redis-server.service (the
// v2-5.4-service fixture, no limit), noio.service (memory without io),
// other.service and an idle user.slice. It returns procfs and the
// cgroup root.
func cgroupHost(t testing.TB) (proc, cg string) {
	dir := t.TempDir()
	proc, cg = filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	writeFiles(t, proc, map[string]string{
		"self/mountinfo": "25 1 0:22 / /sys rw - sysfs sysfs rw\n" +
			"30 25 0:26 / " + cg + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
		"vmstat": "nr_free_pages 1000\nnr_dirty 900000\nnr_writeback 100000\nnr_inactive_file 2000\nnr_active_file 3000\n" +
			"nr_dirty_threshold 11997070\nnr_dirty_background_threshold 5991210\n",
		"sys/vm/dirty_ratio": "20\n", "sys/vm/dirty_background_ratio": "10\n",
		"sys/vm/dirty_bytes": "0\n", "sys/vm/dirty_background_bytes": "0\n",
	})
	pod := string(readFixture(t, "memstat/v2-6.8-pod.stat"))
	redis := string(readFixture(t, "memstat/v2-5.4-service.stat"))
	podSlice := filepath.Dir(podContainer)
	files := map[string]string{
		"cgroup.controllers":                                   "cpuset cpu io memory pids\n",
		"kubepods.slice/memory.stat":                           stat(943722496, 104857600, 5368709120, 2147487744),
		"kubepods.slice/kubepods-burstable.slice/memory.stat":  stat(943722496, 104857600, 5368709120, 2147487744),
		podSlice + "/memory.stat":                              stat(943722496, 104857600, 5368709120, 2147487744),
		podSlice + "/cri-containerd-pause.scope/memory.stat":   stat(4096, 0, 0, 4096),
		podContainer + "/memory.stat":                          pod,
		podContainer + "/memory.max":                           "8589934592\n",
		podContainer + "/memory.high":                          "max\n",
		podContainer + "/memory.current":                       "8522825728\n",
		podContainer + "/cgroup.controllers":                   "io memory pids\n",
		"system.slice/memory.stat":                             stat(87040000, 4194304, 134217728+52428800, 402653184),
		"system.slice/redis-server.service/memory.stat":        redis,
		"system.slice/redis-server.service/cgroup.controllers": "memory io\n",
		"system.slice/noio.service/memory.stat":                stat(52428800, 0, 52428800, 0),
		"system.slice/noio.service/cgroup.controllers":         "memory pids\n",
		"system.slice/other.service/memory.stat":               stat(1048576, 0, 0, 1048576),
		"user.slice/memory.stat":                               stat(0, 0, 4096, 0),
		"user.slice/user-1000.slice/memory.stat":               stat(0, 0, 4096, 0),
	}
	for _, d := range []string{"kubepods.slice", "kubepods.slice/kubepods-burstable.slice", podSlice, "system.slice", "system.slice/redis-server.service"} {
		files[d+"/memory.max"], files[d+"/memory.high"] = "max\n", "max\n"
	}
	writeFiles(t, cg, files)
	return proc, cg
}

func newTestCgroupDirty(t testing.TB, proc string, args ...string) *cgroupDirtyCollector {
	t.Helper()
	return newCgroupDirty(testConfig(t, "cgroup_dirty", proc, "", nil), testSettings(t, args...))
}

// TestCgroupDirtyV2 scrapes the host of cgroupHost: the watched broker's
// and Redis' cgroups with their own limits, the top cgroup by dirty pages,
// and the rest as other.
func TestCgroupDirtyV2(t *testing.T) {
	proc, _ := cgroupHost(t)
	watchedAt(proc).publish([]watchedCgroup{
		{service: serviceBroker, v2Path: podContainer},
		{service: serviceRedis, v2Path: "/system.slice/redis-server.service"},
		{service: serviceRedis, v2Path: "/system.slice/redis-server.service"}, // a second redis-server in the unit
		{service: serviceBroker, v2Path: "/kubepods.slice/removed-since-the-scan.scope"},
	})
	r := scrape(t, newTestCgroupDirty(t, proc, "--cgroup-dirty.top=1"))
	if r.Err != nil {
		t.Fatalf("scrape failed: %v\n%s", r.Err, r.Dump())
	}
	pod := "pod:" + podUID + "/abababababab"
	for _, tc := range []struct {
		name, cgroup string
		want         float64
	}{
		{"stall_cgroup_dirty_bytes", pod, 943718400},
		{"stall_cgroup_writeback_bytes", pod, 104857600},
		{"stall_cgroup_dirty_threshold_bytes", pod, 370188 * 4096},
		{"stall_cgroup_dirty_background_threshold_bytes", pod, 184868 * 4096},
		{"stall_cgroup_dirty_throttle_ratio", pod, 256000.0 / 277528},
		{"stall_cgroup_dirty_bytes", "redis-server.service", 33554432},
		{"stall_cgroup_writeback_bytes", "redis-server.service", 4194304},
		{"stall_cgroup_dirty_threshold_bytes", "redis-server.service", 11798961 * 4096},
		{"stall_cgroup_dirty_throttle_ratio", "redis-server.service", 9216.0 / ((11798961 + 5892277) / 2.0)},
		// the top one (not watched): memory without io, so no limits
		{"stall_cgroup_dirty_bytes", "noio.service", 52428800},
		// other: the pause container, other.service, system.slice's own
		{"stall_cgroup_dirty_bytes", "other", 4096 + 1048576 + 8192},
		{"stall_cgroup_writeback_bytes", "other", 0},
		{"stall_cgroup_watched", pod, 1},
	} {
		if got := r.Must(t, tc.name, "cgroup", tc.cgroup); math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("%s{cgroup=%q} = %v, want %v", tc.name, tc.cgroup, got, tc.want)
		}
	}
	r.Must(t, "stall_cgroup_watched", "cgroup", "redis-server.service", "service", serviceRedis)
	for _, absent := range []struct{ name, cgroup string }{
		{"stall_cgroup_dirty_threshold_bytes", "noio.service"},
		{"stall_cgroup_dirty_bytes", "other.service"}, // beyond --cgroup-dirty.top
		{"stall_cgroup_dirty_threshold_bytes", "other"},
	} {
		if v, ok := r.Get(absent.name, "cgroup", absent.cgroup); ok {
			t.Errorf("%s{cgroup=%q} = %v, want no series", absent.name, absent.cgroup, v)
		}
	}
	if n := count(r, "stall_cgroup_dirty_bytes"); n != 4 {
		t.Errorf("%d dirty series, want 4 (2 watched, 1 top, other):\n%s", n, r.Dump())
	}
}

func count(r collectortest.Result, name string) int {
	n := 0
	for _, m := range r.Metrics {
		if m.Name == name {
			n++
		}
	}
	return n
}

// TestCgroupDirtyV1 reads a v1 memory hierarchy (the v1 fixtures): bytes
// only, no limits, whatever the sysctls.
func TestCgroupDirtyV1(t *testing.T) {
	dir := t.TempDir()
	proc, mem := filepath.Join(dir, "proc"), filepath.Join(dir, "memory")
	writeFiles(t, proc, map[string]string{
		"self/mountinfo": "30 25 0:26 / " + filepath.Join(dir, "unified") + " rw - cgroup2 cgroup2 rw\n" +
			"35 25 0:30 / " + mem + " rw,relatime - cgroup cgroup rw,memory\n",
		"vmstat":             "nr_dirty 900000\nnr_writeback 0\nnr_dirty_threshold 11997070\nnr_dirty_background_threshold 5991210\n",
		"sys/vm/dirty_ratio": "20\n", "sys/vm/dirty_background_ratio": "10\n", "sys/vm/dirty_bytes": "0\n", "sys/vm/dirty_background_bytes": "0\n",
	})
	writeFiles(t, dir, map[string]string{"unified/cgroup.controllers": "\n"}) // hybrid: cgroup2 without controllers
	writeFiles(t, mem, map[string]string{
		"memory.stat":        string(readFixture(t, "memstat/v1-6.18-root.stat")),
		"broker/memory.stat": string(readFixture(t, "memstat/v1-4.19-broker.stat")),
		"idle/memory.stat":   string(readFixture(t, "memstat/v1-3.10-nodirty.stat")),
	})
	watchedAt(proc).publish([]watchedCgroup{{service: serviceBroker, v2Path: "/", v1Mem: "/broker"}})
	r := scrape(t, newTestCgroupDirty(t, proc))
	if r.Err != nil {
		t.Fatalf("scrape failed: %v\n%s", r.Err, r.Dump())
	}
	if got := r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", "/broker"); got != 209715200 {
		t.Errorf("broker dirty %v, want total_dirty 209715200", got)
	}
	if got := r.Must(t, "stall_cgroup_writeback_bytes", "cgroup", "/broker"); got != 20971520 {
		t.Errorf("broker writeback %v, want 20971520", got)
	}
	r.Must(t, "stall_cgroup_watched", "cgroup", "/broker", "service", serviceBroker)
	// root total_dirty 107741184 less the broker's 209715200: the
	// fixtures come from two hosts, so "other" bottoms out at 0.
	if got := r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", "other"); got != 0 {
		t.Errorf("other %v, want 0", got)
	}
	for _, m := range r.Metrics {
		if strings.Contains(m.Name, "threshold") || strings.Contains(m.Name, "ratio") {
			t.Errorf("v1 exported %s%v", m.Name, m.Labels)
		}
	}
}

// TestCgroupDirtyNoHierarchy: no memory cgroup mounted is no data, not a
// failure.
func TestCgroupDirtyNoHierarchy(t *testing.T) {
	proc := writeFiles(t, t.TempDir(), map[string]string{"self/mountinfo": "25 1 0:22 / /sys rw - sysfs sysfs rw\n"})
	r := scrape(t, newTestCgroupDirty(t, proc))
	if r.Err == nil || !strings.Contains(r.Err.Error(), collector.ErrNoData.Error()) {
		t.Errorf("err %v, want no data", r.Err)
	}
}

// TestCgroupDirtyRemovedBetweenReads removes the watched and the top
// cgroups between two scrapes: they are dropped without an error.
func TestCgroupDirtyRemovedBetweenReads(t *testing.T) {
	proc, cg := cgroupHost(t)
	watchedAt(proc).publish([]watchedCgroup{{service: serviceRedis, v2Path: "/system.slice/redis-server.service"}})
	c := newTestCgroupDirty(t, proc)
	r := scrape(t, c)
	r.Must(t, "stall_cgroup_dirty_bytes", "cgroup", "redis-server.service")
	for _, d := range []string{"system.slice/redis-server.service", "system.slice/noio.service"} {
		if err := os.RemoveAll(filepath.Join(cg, d)); err != nil {
			t.Fatal(err)
		}
	}
	r = scrape(t, c)
	if r.Err != nil {
		t.Fatalf("scrape failed after removal: %v", r.Err)
	}
	for _, gone := range []string{"redis-server.service", "noio.service"} {
		if _, ok := r.Get("stall_cgroup_dirty_bytes", "cgroup", gone); ok {
			t.Errorf("%s still exported after its removal", gone)
		}
	}
	if _, ok := r.Get("stall_cgroup_watched", "cgroup", "redis-server.service"); ok {
		t.Error("the removed watched cgroup is still stall_cgroup_watched")
	}
}

// TestWalkCgroupsBound: 10,000 cgroups, a few of them dirty; the walk reads
// at most --cgroup-dirty.max-reads files and still finds the dirtiest.
func TestWalkCgroupsBound(t *testing.T) {
	root := tenThousandCgroups(t)
	var r memStatReader
	w := walkCgroups(cgroupLayout{v2: true, root: root}, 200, &r)
	if w.reads > 200 {
		t.Errorf("%d reads, want at most 200", w.reads)
	}
	if w.frontier == nil || w.frontier[0].path != "/slice-07/unit-0042.service" {
		var got []string
		for _, n := range w.frontier {
			got = append(got, n.path)
		}
		t.Errorf("frontier %v, want /slice-07/unit-0042.service first", got)
	}
	if w.dirty != 100*(1<<20)+100*4096 {
		t.Errorf("total dirty %d", w.dirty)
	}
}

// tenThousandCgroups writes 100 slices of 100 units (10,100 cgroups), one
// page dirty in each slice's unit 0 and 100 MiB in slice-07/unit-0042.
func tenThousandCgroups(t testing.TB) string {
	root := memoryTempDir(t)
	files := map[string]string{"cgroup.controllers": "memory io\n"}
	for s := 0; s < 100; s++ {
		slice := fmt.Sprintf("slice-%02d", s)
		var sd uint64 = 4096
		for u := 0; u < 100; u++ {
			var d uint64
			switch {
			case s == 7 && u == 42:
				d = 100 << 20
			case u == 0:
				d = 4096
			}
			if s == 7 && u == 42 {
				sd += d
			}
			files[fmt.Sprintf("%s/unit-%04d.service/memory.stat", slice, u)] = stat(d, 0, d, 0)
		}
		files[slice+"/memory.stat"] = stat(sd, 0, sd, 0)
	}
	return writeFiles(t, root, files)
}

// BenchmarkCgroupDirtyWalk10k is one scrape's walk of a hierarchy of
// 10,100 cgroups (in /dev/shm: the cost of the walk itself, not of the
// kernel generating memory.stat) with the default bound and without one
// (docs/benchmarks.md).
func BenchmarkCgroupDirtyWalk10k(b *testing.B) {
	root := tenThousandCgroups(b)
	for _, bound := range []int{200, 1 << 20} {
		b.Run(fmt.Sprintf("max-reads=%d", bound), func(b *testing.B) {
			benchmarkWalk(b, cgroupLayout{v2: true, root: root}, bound)
		})
	}
}

// BenchmarkCgroupDirtyWalkHost walks this machine's memory cgroups.
func BenchmarkCgroupDirtyWalkHost(b *testing.B) {
	l, err := findMemoryCgroups("/proc/self/mountinfo")
	if err != nil {
		b.Skip("no memory cgroup hierarchy: ", err)
	}
	benchmarkWalk(b, l, 200)
}

func benchmarkWalk(b *testing.B, l cgroupLayout, bound int) {
	var r memStatReader
	start := processCPU()
	reads := 0
	b.ReportAllocs()
	for b.Loop() {
		reads = walkCgroups(l, bound, &r).reads
	}
	b.ReportMetric(float64(reads), "reads/op")
	reportCPU(b, start, 15e9)
}

// sampledCgroup is what the cgroup sampler exports for cgroup label:
// the histogram's count and sum and the throttled seconds; ok is false
// when it exports nothing for it.
func sampledCgroup(t testing.TB, c *cgroupSampler, label string) (count uint64, sum, throttled float64, ok bool) {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	c.collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if len(pb.GetLabel()) != 1 || pb.GetLabel()[0].GetValue() != label {
			continue
		}
		ok = true
		if h := pb.GetHistogram(); h != nil {
			count, sum = h.GetSampleCount(), h.GetSampleSum()
		} else {
			throttled = pb.GetCounter().GetValue()
		}
	}
	return count, sum, throttled, ok
}

// TestCgroupSampler ticks the watched cgroups' sampler over the host of
// cgroupHost: the pod's ratio (0.9224, by hand above) under the
// throttle point, then with the cgroup at its memory.max (headroom 0)
// and 1,100 MiB dirty, over it: avail = filepages = 1,835,008;
// thresh = 819 · 1,835,008 / 4096 = 366,912; bg = 409 · 1,835,008 / 4096
// = 183,232; ratio (281,600 + 25,600) / 275,072 = 1.1168, one throttled
// second. A cgroup without io (noio.service) is not sampled; a removed one
// is dropped with its series.
func TestCgroupSampler(t *testing.T) {
	proc, cg := cgroupHost(t)
	watchedAt(proc).publish([]watchedCgroup{
		{service: serviceBroker, v2Path: podContainer},
		{service: serviceRedis, v2Path: "/system.slice/noio.service"},
	})
	c := newCgroupSampler(testConfig(t, "sampler", proc, "", nil), testSettings(t))
	var v VMStat
	ParseVMStat(readFile(t, filepath.Join(proc, "vmstat")), &v)
	pod := "pod:" + podUID + "/abababababab"

	c.tick(&v)
	n, sum, thr, ok := sampledCgroup(t, c, pod)
	if !ok || n != 1 || math.Abs(sum-256000.0/277528) > 1e-9 || thr != 0 {
		t.Errorf("after tick 1: count %d, sum %v, throttled %v, ok %v; want 1, %v, 0", n, sum, thr, ok, 256000.0/277528)
	}
	if _, _, _, ok := sampledCgroup(t, c, "noio.service"); ok {
		t.Error("noio.service (no io controller) is sampled")
	}

	writeFiles(t, cg, map[string]string{
		podContainer + "/memory.current": "8589934592\n",
		podContainer + "/memory.stat":    strings.Replace(string(readFixture(t, "memstat/v2-6.8-pod.stat")), "file_dirty 943718400", "file_dirty 1153433600", 1),
	})
	c.tick(&v)
	want := 256000.0/277528 + 307200.0/275072 // the two observations
	if n, sum, thr, _ = sampledCgroup(t, c, pod); n != 2 || math.Abs(sum-want) > 1e-9 || thr != 1 {
		t.Errorf("after tick 2: count %d, sum %v, throttled %v; want 2, %v, 1", n, sum, thr, want)
	}

	// The cgroup is removed; supervision's next scan no longer finds it.
	if err := os.RemoveAll(filepath.Join(cg, podContainer)); err != nil {
		t.Fatal(err)
	}
	watchedAt(proc).publish(nil)
	c.tick(&v)
	if _, _, _, ok := sampledCgroup(t, c, pod); ok {
		t.Error("the removed cgroup's series are still exported")
	}
	if len(c.entries) != 0 {
		t.Errorf("%d entries left", len(c.entries))
	}
}

// TestCgroupSamplerNoAllocation: a tick over watched cgroups whose set
// and ceilings did not change does not allocate.
func TestCgroupSamplerNoAllocation(t *testing.T) {
	proc, _ := cgroupHost(t)
	watchedAt(proc).publish([]watchedCgroup{{service: serviceBroker, v2Path: podContainer}})
	c := newCgroupSampler(testConfig(t, "sampler", proc, "", nil), testSettings(t))
	var v VMStat
	ParseVMStat(readFile(t, filepath.Join(proc, "vmstat")), &v)
	c.tick(&v)
	if a := testing.AllocsPerRun(50, func() { c.tick(&v) }); a != 0 {
		t.Errorf("a tick allocates %v times", a)
	}
}

func TestCgroupGone(t *testing.T) {
	for _, err := range []error{&os.PathError{Op: "read", Path: "memory.stat", Err: syscall.ENODEV}, &os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}} {
		if !cgroupGone(err) {
			t.Errorf("%v is not a removed cgroup", err)
		}
	}
	if cgroupGone(&os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}) {
		t.Error("EACCES is a removed cgroup")
	}
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// memoryTempDir is a temporary directory in /dev/shm when it is there: the
// 10,100 cgroup directories take half a minute to create and remove on a
// shared disk, a second in memory.
func memoryTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "stall-cgroups-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BenchmarkCgroupSamplerTick is the sampler's work per tick for two
// watched cgroups, one with a memory.max (cgroupHost, on a disk file
// system: the pread of memory.stat and memory.current, not the kernel's
// generation of them).
func BenchmarkCgroupSamplerTick(b *testing.B) {
	proc, _ := cgroupHost(b)
	watchedAt(proc).publish([]watchedCgroup{
		{service: serviceBroker, v2Path: podContainer},
		{service: serviceRedis, v2Path: "/system.slice/redis-server.service"},
	})
	c := newCgroupSampler(testConfig(b, "sampler", proc, "", nil), testSettings(b))
	var v VMStat
	ParseVMStat(readFile(b, filepath.Join(proc, "vmstat")), &v)
	c.tick(&v)
	start := processCPU()
	b.ReportAllocs()
	for b.Loop() {
		c.tick(&v)
	}
	reportCPU(b, start, 1e9)
}
