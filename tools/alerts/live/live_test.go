// Package live runs the page-cache alerts of alerts/pagecache.yml against this machine's kernel:
// a writer a little faster than a throttled loop device drives the host's dirty pages through
// the band towards the throttle point, and the shipped chain (the exporter, Prometheus with the
// shipped configuration and rules, Alertmanager with the shipped routing, a webhook) must page
// DirtyPagesNearThrottle before writers have been throttled for more than a few seconds, and
// WritersThrottledOnDirtyPages after it. It needs root; see rig_test.go for what it changes on
// the host and how it is undone.
package live

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

var capture = flag.String("capture", "", "write what the exporter showed each second to this file, in the format of alerts/testdata/live-approach.txt")

const (
	// maxThrottledBeforeAlert: "before writers have been throttled for more than a few seconds in
	// total" (issue 20). Seconds the sampler counted at ratio >= 1 from the start of the load to
	// the evaluation at which DirtyPagesNearThrottle fired.
	maxThrottledBeforeAlert = 5
	// loadLimit bounds the load: by the schedule, WritersThrottledOnDirtyPages pages about
	// 4m30s after it starts.
	loadLimit = 7 * time.Minute
	near      = "DirtyPagesNearThrottle"
	writers   = "WritersThrottledOnDirtyPages"
)

func TestMain(m *testing.M) {
	if os.Getenv(guardianEnv) != "" {
		os.Exit(guardian())
	}
	flag.Parse()
	os.Exit(m.Run())
}

// TestDirtyPagesApproach is issue 20's "done when": on this machine's kernel, through the shipped
// chain, the approach alert pages first; the lead times are logged (docs/alerts.md quotes them,
// "Measured on a live kernel").
func TestDirtyPagesApproach(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the live writeback test takes about 5 minutes")
	}
	collectortest.RequireDisposable(t, "lowers vm.dirty_bytes host-wide for about 5 minutes, creates a loop device "+
		"and a write throttle on it (a blkio rule, or a cgroup with io.max, for which "+cgroupEnv+"=v2 may unmount the blkio v1 hierarchy)")
	plan := requireRig(t)
	promBin := collectortest.RequireTool(t, "prometheus")
	amBin := alertmanagerBinary(t)
	// The load and two minutes for the rest (the exporter's build, the first scrapes, the
	// restore): go test's default -timeout of 10 minutes is enough.
	if dl, ok := t.Deadline(); ok && time.Until(dl) < loadLimit+2*time.Minute {
		t.Fatalf("the test needs up to %s; -timeout leaves %s", loadLimit+2*time.Minute, time.Until(dl).Round(time.Second))
	}

	began := time.Now()
	r := setUpRig(t, plan)
	c := startChain(t, promBin, amBin, runDir)
	t.Logf("rig and chain up in %s", time.Since(began).Round(time.Second))

	// What the exporter shows, every second from now on (the warm-up too: the replay built from
	// it starts with this host at rest).
	rec := recordExporter(t, c)

	// Two scrapes and the rules evaluated: the rate windows have data, the rules a verdict.
	collectortest.WaitFor(t, time.Minute, "two scrapes of the exporter and an evaluation of the rules after them", func() error {
		n, err := c.value(`count_over_time(up{job="stall"}[1m]) * (min_over_time(up{job="stall"}[1m]) == 1)`)
		if err != nil {
			return err
		}
		if n < 2 {
			return fmt.Errorf("%v successful scrapes", n)
		}
		_, err = c.value(`instance:stall_vm_dirty_writeback_band:mean1m`)
		return err
	})
	t.Logf("rules evaluated on two scrapes %s after the start", time.Since(began).Round(time.Second))
	// This host before the load: a healthy baseline.
	if pending, err := c.series(`ALERTS{alertname=~"` + near + `|` + writers + `"}[5m]`); err != nil || len(pending) > 0 {
		t.Fatalf("before the load: %v %v", pending, err)
	}

	base, err := c.sample()
	if err != nil {
		t.Fatal(err)
	}
	leave, err := r.joinWriterGroup()
	if err != nil {
		t.Fatal(err)
	}
	left := false
	leaveGroup := func() {
		if !left {
			left = true
			if err := leave(); err != nil {
				t.Errorf("writer cgroup: %v", err)
			}
		}
	}
	t.Cleanup(leaveGroup)
	sh := startShaper(r.dev)
	t0 := time.Now()
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			if err := sh.halt(); err != nil {
				t.Errorf("writer: %v", err)
			}
		}
	}
	t.Cleanup(halt)
	defer func() {
		if t.Failed() {
			logShape(t, rec.stop(), t0)
		}
	}()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		<-tick.C
		if err := rec.failed(); err != nil {
			t.Fatalf("scraping the exporter: %v", err)
		}
		if p := sh.err.Load(); p != nil {
			t.Fatalf("writer: %v", *p)
		}
		if n%15 == 0 && testing.Verbose() {
			s, _ := c.sample()
			mean, _ := c.value(`instance:stall_vm_dirty_writeback_band:mean1m`)
			t.Logf("+%s: throttle ratio %.2f, throttled %.0f s, mean band of the last minute %.2f, %d MiB written; notified: %v",
				time.Since(t0).Round(time.Second), s.ratio, s.throttled-base.throttled, mean, sh.written.Load()>>20, c.hook.names())
		}
		if n == 20 {
			// The rig works: the burst and the climb put the count in the band.
			if st, err := readDirty(); err != nil || st.band() < 0.3 {
				t.Fatalf("20 s into the load, dirty pages stand at band %.2f (%v): is the loop device throttled?", st.band(), err)
			}
		}
		_, nearSent := c.hook.first(near)
		_, writersSent := c.hook.first(writers)
		if nearSent && writersSent {
			break
		}
		if time.Since(t0) > loadLimit {
			t.Errorf("after %s of load: %s notified %v, %s notified %v", loadLimit, near, nearSent, writers, writersSent)
			break
		}
	}
	// Alertmanager mutes the approach alert once writers are throttled (deploy/prometheus/alertmanager.yml).
	collectortest.WaitFor(t, 30*time.Second, near+" suppressed by "+writers+" in Alertmanager", func() error {
		st, err := c.amState(near)
		if err == nil && st != "suppressed" {
			err = fmt.Errorf("state %q", st)
		}
		return err
	})
	halt()
	leaveGroup()
	written := sh.written.Load()
	samples := rec.stop()

	alerts, err := c.series(`ALERTS{alertname=~"` + near + `|` + writers + `"}[15m]`)
	if err != nil {
		t.Fatal(err)
	}
	since := func(ts float64) time.Duration {
		return time.Unix(0, int64(ts*1e9)).Sub(t0).Round(time.Second)
	}
	first := func(alert, state string) (time.Duration, bool) {
		for _, s := range alerts {
			if s.Metric["alertname"] == alert && s.Metric["alertstate"] == state && len(s.Samples) > 0 {
				return since(s.Samples[0][0]), true
			}
		}
		return 0, false
	}
	nearPending, _ := first(near, "pending")
	nearFired, ok1 := first(near, "firing")
	writersFired, ok2 := first(writers, "firing")
	if !ok1 || !ok2 {
		t.Fatalf("firing: %s %v, %s %v (ALERTS: %v)", near, ok1, writers, ok2, alerts)
	}
	throttledAt := func(d time.Duration) float64 {
		v := 0.0
		for _, s := range samples {
			if s.at.After(t0) && s.at.Sub(t0) <= d {
				v = s.throttled - base.throttled
			}
		}
		return v
	}
	// When the sampler's count of throttled seconds first passed n, as read every second.
	throttledPast := func(n float64) time.Duration {
		for _, s := range samples {
			if s.at.After(t0) && s.throttled-base.throttled > n {
				return s.at.Sub(t0).Round(time.Second)
			}
		}
		return -1
	}
	firstThrottled, fewThrottled := throttledPast(0), throttledPast(maxThrottledBeforeAlert)
	nearHook, _ := c.hook.first(near)
	writersHook, _ := c.hook.first(writers)

	t.Logf("load start +0s; %s pending %s, firing %s (sampler had counted %.0f throttled seconds), paged %s (%s)",
		near, nearPending, nearFired, throttledAt(nearFired), nearHook.at.Sub(t0).Round(time.Second), nearHook.receiver)
	t.Logf("first throttled second (the exporter's counter, read every second) %s; %s firing %s, paged %s (%s)",
		firstThrottled, writers, writersFired, writersHook.at.Sub(t0).Round(time.Second), writersHook.receiver)
	t.Logf("lead of %s: %s before the first throttled second, %s before the %dth, %s before %s; %.0f throttled seconds in all; %d MiB written to the loop device",
		near, firstThrottled-nearFired, fewThrottled-nearFired, maxThrottledBeforeAlert+1, writersFired-nearFired, writers, throttledAt(time.Hour), written>>20)
	logOldRule(t, c, t0)
	logShape(t, samples, t0)

	if tn := throttledAt(nearFired); tn > maxThrottledBeforeAlert {
		t.Errorf("%s fired after writers had been throttled for %.0f s (sampled), more than %d", near, tn, maxThrottledBeforeAlert)
	}
	if writersFired <= nearFired {
		t.Errorf("%s fired at %s, not after %s at %s", writers, writersFired, near, nearFired)
	}
	if nearHook.receiver != "pager" || writersHook.receiver != "pager" {
		t.Errorf("receivers: %s to %q, %s to %q; both are critical and page", near, nearHook.receiver, writers, writersHook.receiver)
	}
	if !nearHook.at.Before(writersHook.at) {
		t.Errorf("%s was paged at %s, not before %s at %s", near, nearHook.at.Sub(t0), writers, writersHook.at.Sub(t0))
	}
	if *capture != "" {
		writeCapture(t, *capture, plan, samples, t0, base.throttled)
	}
}

// logOldRule says when the rule this test replaced (one 15 s snapshot of the band above 0.5 for
// 2 minutes) would have fired on the same data: the recording rule it read is still evaluated.
func logOldRule(t *testing.T, c *chain, t0 time.Time) {
	t.Helper()
	v, err := c.series(`instance:stall_vm_dirty_writeback_band:ratio[15m]`)
	if err != nil {
		t.Logf("the old rule: %v", err)
		return
	}
	if len(v) != 1 {
		t.Logf("the old rule: %d series of instance:stall_vm_dirty_writeback_band:ratio", len(v))
		return
	}
	var run, pendings int
	for _, s := range v[0].Samples {
		if time.Unix(int64(s[0]), 0).Before(t0) {
			continue
		}
		if s[1] > 0.5 {
			if run == 0 {
				pendings++
			}
			run++
			if run == 9 { // pending at the first, firing 2 minutes (8 evaluations) later
				t.Logf("the old rule (snapshot band > 0.5 for 2m) would have fired at %s, after going pending %d times",
					time.Unix(int64(s[0]), 0).Sub(t0).Round(time.Second), pendings)
				return
			}
		} else {
			run = 0
		}
	}
	t.Logf("the old rule (snapshot band > 0.5 for 2m) would not have fired: pending %d times", pendings)
}

// logShape logs the throttle ratio the exporter showed each second, 15 to a line.
func logShape(t *testing.T, samples []exporterSample, t0 time.Time) {
	t.Helper()
	var b strings.Builder
	for i, s := range samples {
		if i%15 == 0 {
			fmt.Fprintf(&b, "\n%4.0fs", s.at.Sub(t0).Seconds())
		}
		fmt.Fprintf(&b, " %.2f", s.ratio)
	}
	t.Logf("throttle ratio each second (stall_vm_dirty_throttle_ratio; 1 = throttle point, %.2f = background threshold):%s",
		2*float64(dirtyBgBytes)/float64(dirtyBytes+dirtyBgBytes), b.String())
}

func writeCapture(t *testing.T, path string, plan throttlePlan, samples []exporterSample, t0 time.Time, base float64) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# TestDirtyPagesApproach (tools/alerts/live), %s, kernel %s: vm.dirty_bytes %d, vm.dirty_background_bytes %d, writeback %d B/s (%s)\n",
		time.Now().UTC().Format("2006-01-02"), kernelRelease(), dirtyBytes, dirtyBgBytes, writebackBps, plan)
	fmt.Fprintf(&b, "# load: tools/alerts/live/shaper_test.go, bursts around a centre line from band %g, %g a second, %g to %g either side\n",
		bandStart, bandSlope, swingMin, swingMax)
	// nr_dirty_threshold and nr_dirty_background_threshold × page size: the _bytes values, which are whole pages
	fmt.Fprintf(&b, "# thresholds: %d %d\n", dirtyBytes, dirtyBgBytes)
	b.WriteString("# seconds since the load started, stall_vm_dirty_throttle_ratio, stall_vm_dirty_throttled_seconds_total since the load started, the writer's centre line (band; - before the load)\n")
	for _, s := range samples {
		d := s.at.Sub(t0)
		centreLine := "-"
		if d >= 0 {
			centreLine = fmt.Sprintf("%.4f", centre(d))
		}
		fmt.Fprintf(&b, "%.1f %.4f %.0f %s\n", d.Seconds(), s.ratio, math.Max(0, s.throttled-base), centreLine)
	}
	writeFile(t, path, []byte(b.String()))
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// alertmanagerBinary finds the Alertmanager server: "alertmanager" upstream,
// "prometheus-alertmanager" in Debian's package.
func alertmanagerBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("alertmanager"); err == nil {
		return p
	}
	return collectortest.RequireTool(t, "prometheus-alertmanager")
}
