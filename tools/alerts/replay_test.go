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
}

// perSecond is one host's throttle ratio at each second from eval time 0, and its thresholds.
type perSecond struct {
	labels                string // {instance="…",job="…"}
	ratio                 []float64
	threshold, background float64 // bytes
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
	line("stall_vm_dirty_throttle_ratio", strings.Join(gauge, " "))
	line("stall_vm_dirty_threshold_bytes", fmt.Sprintf("%.0f+0x%d", p.threshold, scrapes-1))
	line("stall_vm_dirty_background_threshold_bytes", fmt.Sprintf("%.0f+0x%d", p.background, scrapes-1))
	line("stall_vm_dirty_throttle_ratio_sampled_sum", strings.Join(sum, " "))
	line("stall_vm_dirty_throttle_ratio_sampled_count", strings.Join(count, " "))
	line("stall_vm_dirty_throttled_seconds_total", strings.Join(throttled, " "))
	return b.String()
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

// courseBand expands a promtool series of throttle ratios at 15 s steps ("a+bxn" and plain
// values) into one band value a second, straight between the steps.
func courseBand(t *testing.T, h perSecond, values string) []float64 {
	t.Helper()
	var steps []float64
	for _, f := range strings.Fields(values) {
		start, rest, ok := strings.Cut(f, "x")
		if !ok {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("%q: %v", f, err)
			}
			steps = append(steps, v)
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
			steps = append(steps, a+float64(k)*d)
		}
	}
	var out []float64
	for k := 0; k+1 < len(steps); k++ {
		for s := 0; s < 15; s++ {
			out = append(out, h.band(steps[k]+(steps[k+1]-steps[k])*float64(s)/15))
		}
	}
	return append(out, h.band(steps[len(steps)-1]))
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
