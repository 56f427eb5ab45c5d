// Package fleet makes capacity data for the capacity dashboard's tests and
// benchmark, as OpenMetrics text for `promtool tsdb create-blocks-from
// openmetrics` (or Prometheus text with millisecond timestamps for
// VictoriaMetrics' import). Where things are:
//
//   - fleet.go: a synthetic fleet's capacity roll-ups (the series of
//     alerts/capacity.yml, hourly, as Prometheus would have recorded them).
//     Every host is healthy with daily cycles and noise, except a few
//     planted ones, each worst in one section of the capacity dashboard;
//     the fleet benchmark (scripts/capacity-bench.sh) and TestPlantedHosts
//     read it.
//   - raw.go: the exporter's own series, laid out over days from one
//     capture of its /metrics, with planted events (TestRollupsFromRawSeries).
//   - samples.go: the writer both use.
//   - eval.go: Evaluate runs every query of the dashboard against a
//     Prometheus API; check.go: CheckPlanted checks the answers on a
//     generated fleet.
package fleet

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"
)

// Config says what to generate.
type Config struct {
	Hosts int
	Days  int
	// End is the last hour of data (truncated to the hour); the hourly
	// roll-ups are recorded Offset past each hour, as a rule group's
	// evaluations are, and the daily ones DailyLag after them.
	End    time.Time
	Offset time.Duration
	// Millis writes Prometheus text format with millisecond timestamps
	// (VictoriaMetrics' /api/v1/import/prometheus) instead of OpenMetrics.
	Millis bool
}

// DailyLag is how long after the hourly group the generator records the
// daily one. Prometheus evaluates each group at an offset of its own within
// its interval (a hash of its name and file), so the daily group never
// evaluates at the instant the hourly one records; and it must not here:
// at that instant [1d] holds 25 hourly samples under Prometheus 2, whose
// ranges include their start, and 24 under Prometheus 3. A generator that
// took 24 (as it did when it wrote both at the same instant) disagreed with
// Prometheus 2 whenever the hour 24 hours back was the day's largest —
// near the diurnal peak, so at 17:00 UTC and not at most other hours.
// Half an hour apart, [1d] holds the same 24 samples under both.
const DailyLag = 30 * time.Minute

// Last is the time of the last sample written for cfg: the daily group's
// last evaluation.
func (cfg Config) Last() time.Time { return cfg.End.Truncate(time.Hour).Add(cfg.Offset + DailyLag) }

// Planted are the hosts made worst in each section, by instance (and the
// device, Redis target or broker where a section ranks those).
type Planted struct {
	ThrottledHost  string      // throttled on 3 days
	ThrottlePeaks  []time.Time // the hour of its peak on each of those days
	ThrottleTrend  string      // throttle ratio rising towards 1 over the range
	DiskHost       string      // a device whose await p99 doubles
	DiskDevice     string
	ReclaimHost    string // allocation stalls, PSI memory full, a zone under its low watermark
	RedisHost      string // a Redis whose used memory approaches maxmemory
	RedisAddr      string
	BrokerHost     string // a broker with long CommitLog lock holds
	Broker         string
	DNSHost        string // a PTR storm from one process
	DNSComm        string
	OddSysctlHosts []string // hosts with vm.dirty_ratio unlike the fleet
}

// Plant returns the planted hosts of a fleet (at least 20 hosts, 5 days).
func Plant(cfg Config) Planted {
	end := cfg.End.Truncate(time.Hour)
	day := func(daysBefore int, hour int) time.Time {
		d := end.Add(-time.Duration(daysBefore) * 24 * time.Hour).Truncate(24 * time.Hour)
		return d.Add(time.Duration(hour)*time.Hour + cfg.Offset)
	}
	third := max(cfg.Days/3, 2) // three distinct days: two thirds and a third of the range ago, and yesterday
	return Planted{
		ThrottledHost: host(7),
		ThrottlePeaks: []time.Time{day(max(cfg.Days*2/3, third+1), 14), day(third, 11), day(1, 16)},
		ThrottleTrend: host(13),
		DiskHost:      host(17), DiskDevice: "nvme1n1",
		ReclaimHost: host(19),
		RedisHost:   host(1), RedisAddr: "redis://127.0.0.1:6379",
		BrokerHost: host(3), Broker: "broker-3",
		DNSHost: host(2), DNSComm: "java",
		OddSysctlHosts: []string{host(11), host(cfg.Hosts - 1)},
	}
}

func host(i int) string { return fmt.Sprintf("host-%04d", i) }

// role of host i: the services on it (as a relabelled role label would say).
func role(i int) string {
	switch {
	case i%50 == 3:
		return "broker"
	case i%10 == 1:
		return "redis"
	case i%10 == 2 || i%10 == 5 || i%10 == 8:
		return "consumer" // runs the dns collector
	}
	return "app"
}

// Write generates the fleet into w.
func Write(w io.Writer, cfg Config) error {
	if cfg.Hosts < 20 || cfg.Days < 5 {
		return fmt.Errorf("need at least 20 hosts and 5 days, got %d and %d", cfg.Hosts, cfg.Days)
	}
	end := cfg.End.Truncate(time.Hour)
	hours := cfg.Days * 24
	start := end.Add(-time.Duration(hours-1) * time.Hour).Add(cfg.Offset)
	p := Plant(cfg)
	g := &gen{samples: newSamples(start, time.Hour, 6), cfg: cfg, p: p, hours: hours}
	for i := range cfg.Hosts {
		g.host(i)
	}
	g.daily()
	return g.write(w, cfg.Millis)
}

type gen struct {
	samples
	cfg   Config
	p     Planted
	hours int
}

// diurnal is 1 ± a around a peak at 14:00 UTC.
func (g *gen) diurnal(k int, a float64) float64 {
	h := float64(g.at(k).Hour())
	return 1 + a*math.Sin(2*math.Pi*(h-8)/24)
}

// each fills a series hour by hour.
func (g *gen) each(f func(k int) float64) []float64 {
	v := make([]float64, g.hours)
	for k := range v {
		v[k] = f(k)
	}
	return v
}

// progress is 0 at the first hour and 1 at the last.
func (g *gen) progress(k int) float64 { return float64(k) / float64(g.hours-1) }

func (g *gen) host(i int) {
	r := rand.New(rand.NewPCG(uint64(i), 18))
	inst := host(i)
	base := fmt.Sprintf(`job="stall",instance=%q,role=%q,site=%q`, inst, role(i), []string{"a", "b"}[i%2])
	noise := func(s float64) float64 { return 1 + s*(r.Float64()-0.5) }

	// Page cache: ratio, band (default 10/20 dirty ratios: band 0 at 0.67), throttling.
	level := 0.2 + 0.4*r.Float64()
	ratio := g.each(func(k int) float64 { return level * g.diurnal(k, 0.15) * noise(0.1) })
	throttled := make([]float64, g.hours)
	throttledShare := make([]float64, g.hours)
	switch inst {
	case g.p.ThrottledHost:
		for _, peak := range g.p.ThrottlePeaks {
			k := int(peak.Sub(g.start) / time.Hour)
			for d, v := range []float64{1.05, 1.4, 1.15} { // the hour before, the peak, the hour after
				if j := k - 1 + d; j >= 0 && j < g.hours {
					ratio[j] = v
					throttled[j] = 120 + 400*(v-1)
					throttledShare[j] = 0.3 + (v - 1)
				}
			}
		}
	case g.p.ThrottleTrend:
		for k := range ratio {
			ratio[k] = (0.45 + 0.4*g.progress(k)) * g.diurnal(k, 0.05) * noise(0.04)
		}
	}
	band := make([]float64, g.hours)
	for k, v := range ratio {
		band[k] = (v - 2.0/3) / (1.0 / 3)
	}
	g.add("instance:stall_vm_dirty_throttle_ratio:max1h", base, ratio)
	g.add("instance:stall_vm_dirty_writeback_band:mean1m_max1h", base, band)
	g.add("instance:stall_vm_dirty_throttled_seconds:increase1h", base, throttled)
	g.add("instance:stall_vm_dirty_throttled_seconds:rate1m_max1h", base, throttledShare)

	// Disks: two NVMe devices, p99 a few milliseconds with a daily cycle.
	for _, dev := range []string{"nvme0n1", "nvme1n1"} {
		l := base + fmt.Sprintf(`,device=%q`, dev)
		lat := 0.001 + 0.004*r.Float64()
		spike := r.IntN(g.hours) // one slow hour a month, as backups make
		p99 := g.each(func(k int) float64 {
			v := lat * g.diurnal(k, 0.3) * noise(0.3)
			if k == spike {
				v *= 3
			}
			return v
		})
		if inst == g.p.DiskHost && dev == g.p.DiskDevice {
			p99 = g.each(func(k int) float64 { return 0.012 * (1 + g.progress(k)) * g.diurnal(k, 0.1) * noise(0.1) })
		}
		util := g.each(func(k int) float64 {
			return []float64{0.5, 0.75, 0.9, 0.99, 1}[min(4, int(3*g.diurnal(k, 0.3)*r.Float64()))]
		})
		g.add("instance_device:stall_disk_await_seconds:p99_1h", l, p99)
		g.add("instance_device:stall_disk_await_seconds:p50_1m_max1h", l, g.each(func(k int) float64 { return p99[k] * 0.5 }))
		g.add("instance_device:stall_disk_utilization_ratio:max1h", l, util)
	}

	// Memory: rare allocation stalls, little PSI, zones well above their low watermark.
	reclaim := inst == g.p.ReclaimHost
	stalls := g.each(func(k int) float64 {
		if reclaim && g.at(k).Hour()%6 == 0 {
			return 2000 + 3000*r.Float64()
		}
		if r.IntN(200) == 0 {
			return float64(r.IntN(20))
		}
		return 0
	})
	g.add("instance:stall_vm_allocation_stalls:increase1h", base, stalls)
	g.add("instance:stall_vm_allocation_stalls:rate2m_max1h", base, g.each(func(k int) float64 { return stalls[k] / 120 }))
	for _, res := range []string{"memory", "io"} {
		l := base + fmt.Sprintf(`,resource=%q,scope="full"`, res)
		share := g.each(func(k int) float64 {
			if reclaim && stalls[k] > 0 {
				return 0.03 + 0.05*r.Float64()
			}
			return 0.001 * r.Float64()
		})
		g.add("instance_resource:stall_pressure_full_stalled_seconds:rate2m_max1h", l, share)
		g.add("instance_resource:stall_pressure_full_stalled_seconds:increase1h", l, g.each(func(k int) float64 { return share[k] * 300 }))
	}
	head := 3 * (0.7 + 0.6*r.Float64()) // the Normal zone, the one with the least headroom
	g.add("instance:stall_vm_zone_free_over_low_watermark:min1h", base, g.each(func(k int) float64 {
		if reclaim && stalls[k] > 0 {
			return 0.8 + 0.1*r.Float64()
		}
		return head * noise(0.2) / g.diurnal(k, 0.2)
	}))

	// Tunables at the end of each hour: the defaults, the incident-5 fix on the odd hosts.
	dirtyRatio, dirtyBackground := 20.0, 10.0
	for _, h := range g.p.OddSysctlHosts {
		if h == inst {
			dirtyRatio, dirtyBackground = 40, 5
		}
	}
	for _, s := range []struct {
		name  string
		value float64
	}{
		{"vm.dirty_ratio", dirtyRatio}, {"vm.dirty_background_ratio", dirtyBackground}, {"vm.dirty_bytes", 0},
		{"vm.dirty_background_bytes", 0}, {"vm.dirty_expire_centisecs", 3000}, {"vm.dirty_writeback_centisecs", 500},
		{"vm.swappiness", 60}, {"vm.min_free_kbytes", 67584}, {"vm.zone_reclaim_mode", 0}, {"vm.watermark_scale_factor", 10},
	} {
		g.add("instance:stall_vm_sysctl:last1h", base+fmt.Sprintf(`,name=%q`, s.name), g.each(func(int) float64 { return s.value }))
	}

	switch role(i) {
	case "redis":
		g.redis(inst, base, r)
	case "broker":
		g.broker(i, inst, base, r)
	case "consumer":
		g.dns(inst, base, r)
	}
}

func (g *gen) redis(inst, base string, r *rand.Rand) {
	l := base + `,addr="redis://127.0.0.1:6379"`
	level := 0.3 + 0.3*r.Float64()
	used := g.each(func(k int) float64 { return level * g.diurnal(k, 0.05) * (1 + 0.02*(r.Float64()-0.5)) })
	if inst == g.p.RedisHost {
		used = g.each(func(k int) float64 { return (0.55 + 0.35*g.progress(k)) * g.diurnal(k, 0.03) })
	}
	clients := g.each(func(k int) float64 { return 0.01 + 0.02*r.Float64()*g.diurnal(k, 0.5) })
	g.add("addr:stall_redis_memory_used_over_max:max1h", l, used)
	g.add("addr:stall_redis_clients_memory_over_max:max1h", l, clients)
	g.add("addr_type:stall_redis_clients_memory_bytes:max1h", l+`,type="normal"`, g.each(func(k int) float64 { return clients[k] * (8 << 30) }))
	g.add("addr:stall_redis_client_pending_output_clients:max1h", l, g.each(func(k int) float64 { return float64(r.IntN(6)) }))
	g.add("addr:stall_redis_commands_cluster_nodes:rate5m_max1h", l, g.each(func(k int) float64 { return 0.2 + 2*r.Float64() }))
}

func (g *gen) broker(i int, inst, base string, r *rand.Rand) {
	l := base + fmt.Sprintf(`,rocketmq_cluster="DefaultCluster",broker="broker-%d",broker_id="0"`, i)
	long := inst == g.p.BrokerHost
	lock := g.each(func(k int) float64 {
		if long && g.at(k).Hour() >= 9 && g.at(k).Hour() <= 18 {
			return (0.3 + 0.6*g.progress(k)) * (0.8 + 0.4*r.Float64())
		}
		return 0.002 + 0.01*r.Float64()
	})
	g.add("broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h", l, lock)
	g.add("broker:stall_rocketmq_commitlog_lock_held_over_0_5s:increase1m_max1h", l, g.each(func(k int) float64 {
		if lock[k] > 0.5 {
			return float64(3 + r.IntN(8))
		}
		return 0
	}))
	g.add("broker:stall_rocketmq_send_queue_head_wait_seconds:max1h", l, g.each(func(k int) float64 { return min(0.4, 0.005+lock[k]/4) }))
	g.add("broker:stall_rocketmq_put_latency_seconds:p99_5m_max1h", l, g.each(func(k int) float64 { return 0.005 + lock[k] }))
}

func (g *gen) dns(inst, base string, r *rand.Rand) {
	storm := inst == g.p.DNSHost
	rate := func(k int) float64 {
		if storm && k > g.hours*2/3 {
			return 350 + 100*r.Float64()
		}
		return 0.5 + 3*r.Float64()*g.diurnal(k, 0.5)
	}
	perComm := map[string][]float64{"java": g.each(rate), "sshd": g.each(func(int) float64 { return 0.05 * r.Float64() })}
	host := g.each(func(k int) float64 { return perComm["java"][k] + perComm["sshd"][k] })
	g.add("instance:stall_dns_ptr_queries:rate1m_max1h", base, host)
	for _, comm := range []string{"java", "sshd"} {
		g.add("instance_process:stall_dns_ptr_queries:rate1m_max1h", base+fmt.Sprintf(`,comm=%q,main="",cgroup=%q`, comm, comm+".service"), perComm[comm])
	}
}

// daily adds the rolling daily peaks of the daily group, computed as its
// rules do: the largest of the last 24 hourly samples. They are recorded
// DailyLag after the hour's sample (daily families are written with it).
func (g *gen) daily() {
	for _, d := range []struct{ from, to string }{
		{"instance:stall_vm_dirty_throttle_ratio:max1h", "instance:stall_vm_dirty_throttle_ratio:max1d"},
		{"addr:stall_redis_memory_used_over_max:max1h", "addr:stall_redis_memory_used_over_max:max1d"},
		{"addr:stall_redis_clients_memory_over_max:max1h", "addr:stall_redis_clients_memory_over_max:max1d"},
		{"broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h", "broker:stall_rocketmq_commitlog_lock_held_seconds:p99_1h_max1d"},
	} {
		g.lag[d.to] = DailyLag
		for _, s := range g.fams[d.from].series {
			g.add(d.to, s.labels, g.each(func(k int) float64 {
				m := math.Inf(-1)
				for j := max(0, k-23); j <= k; j++ {
					m = max(m, s.values[j])
				}
				return m
			}))
		}
	}
}
