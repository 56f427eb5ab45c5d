package alerts

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The dirty-page series of some replays are generated from one throttle ratio per second (what
// the exporter's 1 s sampler sees), so the scraped gauge, the sampled histogram's _sum and
// _count and the throttled-seconds counter of a replay agree with each other as they do on a
// host. Their seconds come from the live kernel: testdata/live-approach.txt is what the exporter
// showed every second in a run of alerts/live (TestDirtyPagesApproach -capture): the host at
// rest, then a writer a little faster than a throttled device, in bursts. Replays of other
// hosts take its saw (each second's distance from the writer's centre line, in band units) and
// lay it over their own course. The blocks between "# generated: NAME" and "# end generated: NAME"
// in alerts/tests/ are checked against this code; `make rules-doc` rewrites them.

// generatedBlocks are the generated series blocks: the file, the block's name, its hosts.
var generatedBlocks = []struct {
	file, name string
	hosts      func(t *testing.T) []perSecond
}{
	{"tests/pagecache.yml", "live-approach", liveApproach},
	{"tests/pagecache.yml", "burst-50s", func(t *testing.T) []perSecond { return []perSecond{absorbedBurst(t, 50)} }},
	{"tests/pagecache.yml", "burst-100s", func(t *testing.T) []perSecond { return []perSecond{absorbedBurst(t, 100)} }},
	{"tests/pagecache.yml", "fast-disk", fastDiskSwings},
	{"tests/incident-5-dirty-pages-commitlog-lock.yml", "incident-5", incident5Dirty},
	{"tests/baseline-daily-peak.yml", "daily-peak", dailyPeakDirty},
	{"tests/incident-5-pod-own-throttle-point.yml", "container", containerIncident},
	{"tests/pagecache.yml", "pod-burst-50s", func(t *testing.T) []perSecond { return podBurst(t, 50) }},
	{"tests/pagecache.yml", "pod-burst-100s", func(t *testing.T) []perSecond { return podBurst(t, 100) }},
	{"tests/baseline-pods-writeback-keeps-up.yml", "busy-pods", busyPods},
	{"tests/pagecache.yml", "pod-swings", podSwings},
	{"tests/pagecache.yml", "node-and-pod", nodeAndPod},
}

// perSecond is one host's (or one memory cgroup's) throttle ratio at each second from eval time
// 0, and its thresholds.
type perSecond struct {
	labels                string // {instance="…",job="…"}, and cgroup="…" for a cgroup
	ratio                 []float64
	threshold, background float64 // bytes
	// cgroup: the series are a memory cgroup's (stall_cgroup_*, as the sampler keeps them for a
	// watched cgroup), with its dirty and writeback bytes; else the host's (stall_vm_*).
	cgroup bool
}

// fromBand turns a course in band units (0 the background threshold, 1 the throttle point) into
// throttle ratios for the host's thresholds; no ratio is below 0 (no dirty pages).
func (p perSecond) fromBand(band []float64) perSecond {
	p.ratio = make([]float64, len(band))
	for i, b := range band {
		p.ratio[i] = math.Max(0, (2*p.background+b*(p.threshold-p.background))/(p.threshold+p.background))
	}
	return p
}

// band is the inverse of fromBand for one ratio.
func (p perSecond) band(ratio float64) float64 {
	return (ratio*(p.threshold+p.background) - 2*p.background) / (p.threshold - p.background)
}

// yaml renders what a 15 s scrape of the exporter shows: at scrape k (second 15k) the gauge
// reads that second, and the sampler has counted the seconds 0 to 15k.
func (p perSecond) yaml() string {
	scrapes := (len(p.ratio)-1)/15 + 1
	var gauge, sum, count, throttled []string
	var s, n, th float64
	for i, r := range p.ratio[:15*(scrapes-1)+1] {
		s += r
		n++
		if r >= 1 {
			th++
		}
		if i%15 == 0 {
			gauge = append(gauge, fmtValue(r))
			sum = append(sum, fmtValue(s))
			count = append(count, fmtValue(n))
			throttled = append(throttled, fmtValue(th))
		}
	}
	var b strings.Builder
	line := func(name, values string) {
		fmt.Fprintf(&b, "      - series: '%s%s'\n        values: '%s'\n", name, p.labels, values)
	}
	prefix := "stall_vm"
	if p.cgroup {
		prefix = "stall_cgroup"
	}
	line(prefix+"_dirty_throttle_ratio", strings.Join(gauge, " "))
	line(prefix+"_dirty_threshold_bytes", fmt.Sprintf("%.0f+0x%d", p.threshold, scrapes-1))
	line(prefix+"_dirty_background_threshold_bytes", fmt.Sprintf("%.0f+0x%d", p.background, scrapes-1))
	line(prefix+"_dirty_throttle_ratio_sampled_sum", strings.Join(sum, " "))
	line(prefix+"_dirty_throttle_ratio_sampled_count", strings.Join(count, " "))
	line(prefix+"_dirty_throttled_seconds_total", strings.Join(throttled, " "))
	if p.cgroup {
		// memory.stat's file_dirty and file_writeback at the scrape: the ratio times the throttle
		// point, in whole pages, a quarter of them under writeback (the share is the replay's
		// choice; the rules read only their sum).
		var dirty, writeback []string
		for k := range gauge {
			pages := math.Round(p.ratio[15*k] * (p.threshold + p.background) / 2 / pageSize)
			wb := math.Round(pages / 4)
			dirty = append(dirty, fmtValue((pages-wb)*pageSize))
			writeback = append(writeback, fmtValue(wb*pageSize))
		}
		line("stall_cgroup_dirty_bytes", strings.Join(dirty, " "))
		line("stall_cgroup_writeback_bytes", strings.Join(writeback, " "))
	}
	return b.String()
}

// pageSize is the page size of the replayed hosts (x86-64).
const pageSize = 4096

// memcgLimits returns a memory cgroup's dirty threshold and background threshold in bytes as
// balance_dirty_pages() computes them for its memcg domain (mm/page-writeback.c, v4.2+): the
// memory it may dirty is its file pages plus its headroom (memory.max or memory.high, the lower,
// less its usage), the headroom capped by the clean page cache outside it (mdtc_calc_avail();
// on the 256 GiB nodes replayed here that cap is far above the headroom); then
// domain_dirty_limits() applies vm.dirty_ratio and vm.dirty_background_ratio in the kernel's
// per-PAGE_SIZE units, rounded down twice: ratio = 20 * 4096 / 100 = 819 (not 819.2), thresh =
// ratio * avail / 4096 pages; a background threshold at or above the threshold is halved.
// Whole pages in, bytes out.
func memcgLimits(filePages, headroomPages, dirtyRatio, backgroundRatio uint64) (threshold, background float64) {
	avail := filePages + headroomPages
	thresh := dirtyRatio * pageSize / 100 * avail / pageSize
	bg := backgroundRatio * pageSize / 100 * avail / pageSize
	if bg >= thresh {
		bg = thresh / 2
	}
	return float64(thresh * pageSize), float64(bg * pageSize)
}

func fmtValue(v float64) string { return strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64) }

// liveCapture is testdata/live-approach.txt.
type liveCapture struct {
	host   perSecond // the live host, as recorded
	centre []float64 // the writer's centre line (band) at each second; NaN before the load
}

func readLiveCapture(t *testing.T) liveCapture {
	t.Helper()
	f, err := os.Open("testdata/live-approach.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := liveCapture{host: perSecond{labels: `{instance="live:29110",job="stall"}`}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# thresholds: "); ok {
			if _, err := fmt.Sscanf(rest, "%g %g", &c.host.threshold, &c.host.background); err != nil {
				t.Fatalf("testdata/live-approach.txt: %q: %v", line, err)
			}
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("testdata/live-approach.txt: %q: want 4 fields", line)
		}
		r, err1 := strconv.ParseFloat(f[1], 64)
		cl, err2 := strconv.ParseFloat(f[3], 64)
		if f[3] == "-" {
			cl, err2 = math.NaN(), nil
		}
		if err1 != nil || err2 != nil {
			t.Fatalf("testdata/live-approach.txt: %q", line)
		}
		c.host.ratio = append(c.host.ratio, r)
		c.centre = append(c.centre, cl)
	}
	if c.host.threshold == 0 || len(c.host.ratio) < 200 {
		t.Fatal("testdata/live-approach.txt: no thresholds line or fewer than 200 seconds")
	}
	return c
}

// saw is the live kernel's second-to-second course around the writer's centre line, in band
// units: the seconds of the load from the 6th (after the burst that starts it) to the centre
// line's band 0.8, where the kernel's throttling starts to flatten the tops.
func (c liveCapture) saw() []float64 {
	var out []float64
	load := 0
	for i, cl := range c.centre {
		if math.IsNaN(cl) {
			continue
		}
		if load++; load > 5 && cl < 0.8 {
			out = append(out, c.host.band(c.host.ratio[i])-cl)
		}
	}
	return out
}

// withSaw adds the live saw to a course in band units, repeating it as often as needed.
func withSaw(course, saw []float64) []float64 {
	out := make([]float64, len(course))
	for i, b := range course {
		out[i] = b + saw[i%len(saw)]
	}
	return out
}

// liveApproach is the live run as recorded, and the same course through the band on a host with
// vm.dirty_background_ratio 5 and vm.dirty_ratio 40 (60 GiB dirtyable: 3 and 24 GiB).
func liveApproach(t *testing.T) []perSecond {
	c := readLiveCapture(t)
	other := perSecond{labels: `{instance="host-5-40:29110",job="stall"}`, threshold: 24 << 30, background: 3 << 30}
	band := make([]float64, len(c.host.ratio))
	for i, r := range c.host.ratio {
		band[i] = c.host.band(r)
	}
	return []perSecond{c.host, other.fromBand(band)}
}

// absorbedBurst is a host at the background threshold, with the live saw, and one burst of
// writes at 5m that puts the band at 0.75 for length seconds; the flusher then writes it back in
// 20 s.
func absorbedBurst(t *testing.T, length int) perSecond {
	course := make([]float64, 10*60+1)
	for i := range course {
		switch d := i - 300; {
		case d >= 0 && d < length:
			course[i] = 0.75
		case d >= length && d < length+20:
			course[i] = 0.75 * float64(length+20-d) / 20
		}
	}
	h := perSecond{labels: fmt.Sprintf(`{instance="burst-%ds:29110",job="stall"}`, length), threshold: 4 << 30, background: 2 << 30}
	return h.fromBand(withSaw(course, readLiveCapture(t).saw()))
}

// fastDiskSwings is the host of issue 20's report: vm.dirty_bytes 64 MiB and
// vm.dirty_background_bytes 32 MiB, a dd loop against a disk that writes back at 1.3-2.1 GB/s, so
// the count swings from the background threshold to the hard limit (band 2) from one second to
// the next; the report gives its figures, not its seconds: throttled in 86 of 204 s, the scraped
// ratio at most 1.34 (band 2.02). A minute at rest (band -1), then four minutes of seconds drawn
// evenly from band -0.3 to 2.02 (43 % of them at 1 or more), the same in every run.
func fastDiskSwings(*testing.T) []perSecond {
	rng := rand.New(rand.NewPCG(20, 0))
	course := make([]float64, 5*60+1)
	for i := range course {
		course[i] = -1
		if i > 60 {
			course[i] = -0.3 + 2.32*rng.Float64()
		}
	}
	h := perSecond{labels: `{instance="fast-disk:29110",job="stall"}`, threshold: 64 << 20, background: 32 << 20}
	return []perSecond{h.fromBand(course)}
}

// incident5Dirty is incident 5's course (the replay's header), per second, with the live saw.
func incident5Dirty(t *testing.T) []perSecond {
	h := perSecond{labels: `{instance="broker-1:29110",job="stall"}`, threshold: 51539607552, background: 25769803776}
	return []perSecond{h.fromBand(withSaw(courseBand(t, h, "0.6+0.004x16 0.67+0.01x31 1+0.005x4 1.02+0x2"), readLiveCapture(t).saw()))}
}

// dailyPeakDirty is the daily-peak baseline's course, per second, with the live saw.
func dailyPeakDirty(t *testing.T) []perSecond {
	h := perSecond{labels: `{instance="broker-1:29110",job="stall"}`, threshold: 51539607552, background: 25769803776}
	cycle := "0.55+0.011x9 0.638-0.011x9 "
	course := "0.3+0.00375x80 " + strings.Repeat(cycle, 10) + "0.6-0.00375x79"
	return []perSecond{h.fromBand(withSaw(courseBand(t, h, course), readLiveCapture(t).saw()))}
}

// The container replays' node: 256 GiB, vm.dirty_background_ratio 10 and vm.dirty_ratio 20 of
// 240 GiB dirtyable, as incident 5's host (thresholds 24 and 48 GiB, throttle point 36 GiB), with
// 0.5 GiB of other pods' dirty and writeback pages on top of the watched cgroups'.
const (
	nodeThreshold  = 48 << 30
	nodeBackground = 24 << 30
	nodeOthers     = 1 << 29
)

// brokerPod is the broker's container on that node: memory.max 8 GiB, 4.25 GiB of it anonymous
// (a 4 GiB heap, metaspace, thread stacks, direct buffers), 3.5 GiB of file pages (the CommitLog's
// mapped files), so 0.25 GiB of headroom: 3.75 GiB it may dirty, whose thresholds are 196,560
// pages (767.8 MiB) and 98,160 (383.4 MiB), throttle point 147,360 pages (575.6 MiB, 1/64 of the
// node's 36 GiB), a band of 49,200 pages (192.2 MiB) above the background threshold.
func brokerPod() perSecond {
	h := perSecond{cgroup: true,
		labels: `{instance="node-7:29110",job="stall-kubernetes",cgroup="pod:5f0c2a8e-3b1d-4e6f-9a7c-2d8b4e1f6a30/4e9a1c7b2d3f"}`}
	h.threshold, h.background = memcgLimits(3584<<8, 256<<8, 20, 10) // MiB << 8 = pages
	return h
}

// redisPod is a Redis container on the same node: memory.max 16 GiB, an 11 GiB dataset, 4.5 GiB of
// file pages (the AOF and its rewrites), 0.5 GiB of headroom: 5 GiB it may dirty, thresholds
// 262,080 pages (1,023.75 MiB) and 130,880 (511.25 MiB).
func redisPod() perSecond {
	h := perSecond{cgroup: true,
		labels: `{instance="node-7:29110",job="stall-kubernetes",cgroup="pod:0a9e3c51-77d2-4b8e-b1f4-6c2d9e8a0f15/b7e2d4a19c06"}`}
	h.threshold, h.background = memcgLimits(4608<<8, 512<<8, 20, 10)
	return h
}

// nodeOf is the node's own series: the other pods' dirty pages and the given cgroups' together,
// against the node's thresholds, each second.
func nodeOf(pods ...perSecond) perSecond {
	n := perSecond{labels: `{instance="node-7:29110",job="stall-kubernetes"}`, threshold: nodeThreshold, background: nodeBackground}
	n.ratio = make([]float64, len(pods[0].ratio))
	for i := range n.ratio {
		bytes := float64(nodeOthers)
		for _, p := range pods {
			bytes += p.ratio[i] * (p.threshold + p.background) / 2
		}
		n.ratio[i] = bytes / ((n.threshold + n.background) / 2)
	}
	return n
}

// containerIncident is incident 5 in the broker's pod (the replay's header): the cgroup's
// flusher holds it at its background threshold until 10:02, then the broker's writes outrun its
// writeback by 0.4 MiB/s and dirty + writeback pages climb the cgroup's band to its throttle point
// at 10:10 (192 MiB in 8 minutes), where the kernel holds them (1 to 1.02), with the live saw.
func containerIncident(t *testing.T) []perSecond {
	pod := brokerPod()
	pod = pod.fromBand(withSaw(steps(t, "0+0x8 0.03125+0.03125x31 1.00125+0.00125x15"), readLiveCapture(t).saw()))
	return []perSecond{pod, nodeOf(pod)}
}

// podBurst is the broker's pod at its background threshold, with the live saw, and one burst of
// writes at 5m that puts its band at 0.75 for length seconds; its flusher then writes it back in
// 20 s (absorbedBurst, in the cgroup).
func podBurst(t *testing.T, length int) []perSecond {
	course := make([]float64, 10*60+1)
	for i := range course {
		switch d := i - 300; {
		case d >= 0 && d < length:
			course[i] = 0.75
		case d >= length && d < length+20:
			course[i] = 0.75 * float64(length+20-d) / 20
		}
	}
	pod := brokerPod()
	pod.labels = strings.Replace(pod.labels, "node-7", fmt.Sprintf("pod-burst-%ds", length), 1)
	pod = pod.fromBand(withSaw(course, readLiveCapture(t).saw()))
	node := nodeOf(pod)
	node.labels = strings.Replace(node.labels, "node-7", fmt.Sprintf("pod-burst-%ds", length), 1)
	return []perSecond{pod, node}
}

// podSwings is the broker's pod on a fast disk, under a batch producer that sends 250 MiB every
// 20 s from 2m: each batch puts the cgroup's dirty pages past its throttle point within a second
// (band 1.3: 633 MiB of its 575.6 MiB throttle point) for 4 s, the disk writes it back in the next
// 2 s, and the cgroup rests at band -0.6 (the flusher ahead) until the next one. Throttled 4 s of
// every 20 s, with a mean band of -0.17: DirtyPagesNearThrottle's condition alone would never hold.
func podSwings(*testing.T) []perSecond {
	course := make([]float64, 8*60+1)
	for i := range course {
		switch d := (i - 120) % 20; {
		case i < 120 || d >= 6:
			course[i] = -0.6
		case d < 4:
			course[i] = 1.3
		default:
			course[i] = 1.3 - 0.95*float64(d-3)
		}
	}
	pod := brokerPod()
	pod.labels = strings.Replace(pod.labels, "node-7", "pod-swings", 1)
	pod = pod.fromBand(course)
	node := nodeOf(pod)
	node.labels = strings.Replace(node.labels, "node-7", "pod-swings", 1)
	return []perSecond{pod, node}
}

// nodeAndPod is the broker's pod near its own throttle point (band 0.9, with the live saw) on a node
// whose other pods fill its page cache too: the node's dirty + writeback pages climb from its
// background threshold at 1m to band 0.9 at 7m (25 GiB to 35 GiB of its 36 GiB throttle point,
// 28 MB/s more than its disks write back), with the live saw, and stay there.
func nodeAndPod(t *testing.T) []perSecond {
	saw := readLiveCapture(t).saw()
	pod := brokerPod()
	pod.labels = strings.Replace(pod.labels, "node-7", "node-and-pod", 1)
	pod = pod.fromBand(withSaw(steps(t, "0.9+0x40"), saw))
	node := perSecond{labels: `{instance="node-and-pod:29110",job="stall-kubernetes"}`, threshold: nodeThreshold, background: nodeBackground}
	node = node.fromBand(withSaw(steps(t, "0+0x4 0.0375+0.0375x23 0.9+0x12"), saw[len(saw)/2:]))
	return []perSecond{pod, node}
}

// busyPods is the baseline's node for 30 minutes: the broker's pod writing all the time, its
// flusher holding it around the background threshold (a slow cycle of 4 minutes from band -0.3 to
// 0.1 and back, with the live saw), and the Redis pod rewriting its AOF every 10 minutes (from
// band -1, its page cache clean, to 0.3 in 90 s, written back in the next 90 s).
func busyPods(t *testing.T) []perSecond {
	saw := readLiveCapture(t).saw()
	const n = 30*60 + 1
	broker, redis := make([]float64, n), make([]float64, n)
	for i := range broker {
		phase := float64(i%240) / 120 // 0..2
		broker[i] = -0.3 + 0.4*math.Min(phase, 2-phase)
		switch d := i % 600; {
		case d >= 300 && d < 390:
			redis[i] = -1 + 1.3*float64(d-300)/90
		case d >= 390 && d < 480:
			redis[i] = 0.3 - 1.3*float64(d-390)/90
		default:
			redis[i] = -1
		}
	}
	b := brokerPod().fromBand(withSaw(broker, saw))
	r := redisPod().fromBand(withSaw(redis, saw[len(saw)/2:]))
	return []perSecond{b, r, nodeOf(b, r)}
}

// courseBand expands a promtool series of throttle ratios at 15 s steps ("a+bxn" and plain
// values) into one band value a second, straight between the steps.
func courseBand(t *testing.T, h perSecond, values string) []float64 {
	t.Helper()
	out := steps(t, values)
	for i, r := range out {
		out[i] = h.band(r)
	}
	return out
}

// steps expands a promtool series at 15 s steps ("a+bxn" and plain values) into one value a
// second, straight between the steps.
func steps(t *testing.T, values string) []float64 {
	t.Helper()
	var at []float64
	for _, f := range strings.Fields(values) {
		start, rest, ok := strings.Cut(f, "x")
		if !ok {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("%q: %v", f, err)
			}
			at = append(at, v)
			continue
		}
		n, err := strconv.Atoi(rest)
		i := strings.LastIndexAny(start, "+-")
		if err != nil || i <= 0 {
			t.Fatalf("%q: want a+bxn", f)
		}
		a, err1 := strconv.ParseFloat(start[:i], 64)
		d, err2 := strconv.ParseFloat(start[i:], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%q: want a+bxn", f)
		}
		for k := 0; k <= n; k++ {
			at = append(at, a+float64(k)*d)
		}
	}
	var out []float64
	for k := 0; k+1 < len(at); k++ {
		for s := 0; s < 15; s++ {
			out = append(out, at[k]+(at[k+1]-at[k])*float64(s)/15)
		}
	}
	return append(out, at[len(at)-1])
}

// TestGeneratedReplays checks the generated blocks of alerts/tests/ against generatedBlocks;
// -update rewrites them.
func TestGeneratedReplays(t *testing.T) {
	files := map[string]string{}
	for _, g := range generatedBlocks {
		doc, ok := files[g.file]
		if !ok {
			b, err := os.ReadFile(g.file)
			if err != nil {
				t.Fatal(err)
			}
			doc = string(b)
		}
		begin, end := "      # generated: "+g.name+"\n", "      # end generated: "+g.name+"\n"
		before, rest, ok1 := strings.Cut(doc, begin)
		old, after, ok2 := strings.Cut(rest, end)
		if !ok1 || !ok2 {
			t.Fatalf("%s: no lines %q and %q", g.file, strings.TrimSpace(begin), strings.TrimSpace(end))
		}
		var want strings.Builder
		for _, h := range g.hosts(t) {
			want.WriteString(h.yaml())
		}
		if old != want.String() {
			if !*update {
				t.Errorf("%s: block %s differs from what tools/alerts/replay_test.go generates; run `make rules-doc`", g.file, g.name)
			}
			files[g.file] = before + begin + want.String() + end + after
		} else {
			files[g.file] = doc
		}
	}
	if *update {
		for f, doc := range files {
			if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMemcgLimits checks memcgLimits against the figures the pod replays' headers work out by
// hand, and the kernel's halving of a background threshold that is not below the threshold.
func TestMemcgLimits(t *testing.T) {
	for _, c := range []struct {
		file, headroom, ratio, bgRatio uint64
		thresh, bg                     float64 // pages
	}{
		// The broker's pod: 3.5 GiB of file pages, 0.25 GiB of headroom; 819 and 409 per-page units.
		{3584 << 8, 256 << 8, 20, 10, 196560, 98160},
		// The Redis pod: 4.5 GiB and 0.5 GiB.
		{4608 << 8, 512 << 8, 20, 10, 262080, 130880},
		// vm.dirty_background_ratio 30 over vm.dirty_ratio 20: half the threshold.
		{3584 << 8, 256 << 8, 20, 30, 196560, 98280},
	} {
		thresh, bg := memcgLimits(c.file, c.headroom, c.ratio, c.bgRatio)
		if thresh != c.thresh*pageSize || bg != c.bg*pageSize {
			t.Errorf("memcgLimits(%d, %d, %d, %d) = %.0f, %.0f pages, want %.0f, %.0f",
				c.file, c.headroom, c.ratio, c.bgRatio, thresh/pageSize, bg/pageSize, c.thresh, c.bg)
		}
	}
}
