package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
	"github.com/stall-exporter/stall_exporter/internal/e2etest"
)

// amAlert is an alert as Alertmanager's API v2 takes and returns it.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	StartsAt    time.Time         `json:"startsAt,omitzero"`
	EndsAt      time.Time         `json:"endsAt,omitzero"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	Status      *struct {
		State       string   `json:"state"`
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status,omitempty"`
}

// TestAlertmanagerInhibitions runs the shipped
// deploy/prometheus/alertmanager.yml in a real Alertmanager, sends it alerts
// with the labels the rules of alerts/*.yml give them, and checks through
// the API that every inhibition mutes the alert it is for, on the same host
// or broker only: the same alert about another host, another broker or
// another Redis stays active, and so does a critical alert of a host whose
// exporter is down.
func TestAlertmanagerInhibitions(t *testing.T) {
	bin := alertmanagerBinary(t)
	_, rules := alertRules(t)
	severity := map[string]string{}
	for _, r := range rules {
		if r.Alert != "" {
			severity[r.Alert] = r.Labels["severity"]
		}
	}
	// alert builds an alert of alerts/*.yml with its severity and the given labels.
	alert := func(name string, labels ...string) map[string]string {
		sev, ok := severity[name]
		if !ok {
			t.Fatalf("no alert %s in alerts/*.yml", name)
		}
		l := map[string]string{"alertname": name, "severity": sev}
		for i := 0; i+1 < len(labels); i += 2 {
			l[labels[i]] = labels[i+1]
		}
		return l
	}
	host := func(instance string) []string { return []string{"job", "stall", "instance", instance} }
	// The broker alerts aggregate over the exporters that read the broker: no job, no instance.
	broker := func(name string) []string {
		return []string{"cluster", "DefaultCluster", "broker", name, "broker_id", "0"}
	}
	redis := func(instance, addr string) []string { return append(host(instance), "addr", addr) }
	k8s := []string{"job", "stall-kubernetes", "instance", "node-17", "node", "node-17", "pod", "stall-exporter-x7k2p"}

	type muted struct {
		target map[string]string
		source map[string]string // nil: must stay active
	}
	var cases []muted
	add := func(source map[string]string, targets ...map[string]string) {
		for _, tg := range targets {
			cases = append(cases, muted{target: tg, source: source})
		}
	}
	active := func(targets ...map[string]string) { add(nil, targets...) }

	// Incident 5 on broker-1: throttled writers mute "near the throttle point" there, not on broker-2.
	writers := alert("WritersThrottledOnDirtyPages", host("broker-1:29110")...)
	add(writers, alert("DirtyPagesNearThrottle", host("broker-1:29110")...))
	active(alert("DirtyPagesNearThrottle", host("broker-2:29110")...))
	// Issue 27: the host near or past its throttle point mutes a watched cgroup's page there, not on
	// another node.
	pod := func(instance string) []string {
		return append(host(instance), "cgroup", "pod:5f0c2a8e-3b1d-4e6f-9a7c-2d8b4e1f6a30/4e9a1c7b2d3f", "service", "rocketmq_broker")
	}
	near := alert("DirtyPagesNearThrottle", host("node-7:29110")...)
	add(near, alert("CgroupDirtyPagesNearThrottle", pod("node-7:29110")...))
	// Throttled writers mute it too; on a host of their own, since broker-1's DirtyPagesNearThrottle,
	// though muted itself, also matches and Alertmanager names only one inhibitor.
	writersPod := alert("WritersThrottledOnDirtyPages", host("node-9:29110")...)
	add(writersPod, alert("CgroupDirtyPagesNearThrottle", pod("node-9:29110")...))
	active(alert("CgroupDirtyPagesNearThrottle", pod("node-8:29110")...))
	// Incidents 2 and 6: direct reclaim mutes memory pressure on the same host.
	reclaim := alert("DirectReclaimStalls", host("broker-3:29110")...)
	add(reclaim, alert("MemoryPressureFull", host("broker-3:29110")...))
	active(alert("MemoryPressureFull", host("broker-4:29110")...))
	// The lock held on broker-a mutes its send-queue and latency alerts, but not broker-b's, and not
	// through the store.log form without broker labels.
	lock := alert("RocketMQCommitLogLockHeldLong", broker("broker-a")...)
	add(lock,
		alert("RocketMQSendQueueWaitHigh", broker("broker-a")...),
		alert("RocketMQPutLatencyHigh", broker("broker-a")...))
	active(alert("RocketMQSendQueueWaitHigh", broker("broker-b")...))
	storeLogLock := alert("RocketMQCommitLogLockHeldLong", append(host("broker-6:29110"), "event", "lock_slow")...)
	active(storeLogLock, alert("RocketMQSendQueueWaitHigh", broker("broker-c")...))
	// A broker down mutes what its old series still say.
	down := alert("RocketMQBrokerDown", broker("broker-d")...)
	add(down, alert("RocketMQRiskyConfig", append(broker("broker-d"), "warm_maped_file_enable", "true", "transfer_msg_by_heap", "true")...))
	active(alert("RocketMQRiskyConfig", append(broker("broker-e"), "warm_maped_file_enable", "true", "transfer_msg_by_heap", "true")...))
	// A Redis down mutes its own alerts; the same address seen from another host is another Redis.
	redisDown := alert("RedisDown", redis("cache-1:29110", "redis://localhost:6379")...)
	add(redisDown, alert("RedisClusterNodesStorm", redis("cache-1:29110", "redis://localhost:6379")...))
	active(alert("RedisClusterNodesStorm", redis("cache-2:29110", "redis://localhost:6379")...))
	// An exporter in a crash loop mutes its host's warnings, never a page.
	exporterDown := alert("StallExporterDown", k8s...)
	add(exporterDown,
		alert("StallCollectorFailing", append(append([]string{}, k8s...), "collector", "vmstat")...),
		alert("DiskAwaitHigh", append(append([]string{}, k8s...), "device", "nvme0n1")...))
	active(alert("KernelOOMKill", k8s...),
		alert("StallCollectorFailing", "job", "stall", "instance", "broker-1:29110", "collector", "vmstat"),
		// A broker's warning is not the down exporter's: the others still read the broker.
		alert("RocketMQPutLatencyHigh", broker("broker-f")...))

	sources := []map[string]string{writers, near, writersPod, reclaim, lock, down, redisDown, exporterDown}
	am := startAlertmanager(t, bin)
	now := time.Now()
	var post []amAlert
	for _, l := range sources {
		post = append(post, amAlert{Labels: l, StartsAt: now, EndsAt: now.Add(time.Hour)})
	}
	for _, c := range cases {
		post = append(post, amAlert{Labels: c.target, StartsAt: now, EndsAt: now.Add(time.Hour)})
	}
	body, err := json.Marshal(post)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(am+"/api/v2/alerts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /api/v2/alerts: %s", resp.Status)
	}

	key := func(l map[string]string) string {
		var parts []string
		for k, v := range l {
			parts = append(parts, k+"="+v)
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	}
	// The inhibitor learns of source alerts asynchronously: wait until every expected
	// inhibition holds, then check every alert once.
	var got map[string]amAlert
	collectortest.WaitFor(t, 15*time.Second, "the inhibitions", func() error {
		var list []amAlert
		if err := getJSON(am+"/api/v2/alerts", &list); err != nil {
			return err
		}
		got = map[string]amAlert{}
		for _, a := range list {
			got[key(a.Labels)] = a
		}
		if len(got) != len(post) {
			return fmt.Errorf("Alertmanager has %d alerts, %d were sent", len(got), len(post))
		}
		for _, c := range cases {
			if a := got[key(c.target)]; c.source != nil && (a.Status == nil || a.Status.State != "suppressed") {
				return fmt.Errorf("%s not suppressed yet", key(c.target))
			}
		}
		return nil
	})
	for _, c := range cases {
		a := got[key(c.target)]
		switch {
		case a.Status == nil:
			t.Errorf("%s: no status", key(c.target))
		case c.source == nil && a.Status.State != "active":
			t.Errorf("%s is %s (inhibited by %v), want active", key(c.target), a.Status.State, a.Status.InhibitedBy)
		case c.source != nil:
			src := got[key(c.source)]
			if len(a.Status.InhibitedBy) != 1 || a.Status.InhibitedBy[0] != src.Fingerprint {
				t.Errorf("%s is inhibited by %v, want by %s (%s)", key(c.target), a.Status.InhibitedBy, src.Fingerprint, key(c.source))
			}
		}
	}
	for _, s := range sources {
		if a := got[key(s)]; a.Status == nil || a.Status.State != "active" {
			t.Errorf("source %s is not active: %+v", key(s), a.Status)
		}
	}

	// Grouping: a page or a chat message is about one host or one broker. The broker alerts have
	// no instance, so grouping by alertname, job and instance alone would put broker-a's and
	// broker-b's send-queue pages in one group (the second held for group_interval).
	var groups []struct {
		Labels   map[string]string `json:"labels"`
		Receiver struct {
			Name string `json:"name"`
		} `json:"receiver"`
		Alerts []amAlert `json:"alerts"`
	}
	if err := getJSON(am+"/api/v2/alerts/groups", &groups); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.Receiver.Name == "tickets" {
			continue // info: one ticket per alert name
		}
		about := map[string]bool{}
		for _, a := range g.Alerts {
			about[a.Labels["job"]+"/"+a.Labels["instance"]+"/"+a.Labels["cluster"]+"/"+a.Labels["broker"]] = true
		}
		if len(about) > 1 {
			t.Errorf("group %v (%s) holds alerts about %d hosts or brokers: %v", g.Labels, g.Receiver.Name, len(about), about)
		}
	}
}

// alertmanagerBinary finds the Alertmanager server: "alertmanager" upstream,
// "prometheus-alertmanager" in Debian's package (which also has amtool).
func alertmanagerBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("alertmanager"); err == nil {
		return p
	}
	return collectortest.RequireTool(t, "prometheus-alertmanager")
}

// startAlertmanager runs Alertmanager with the shipped configuration, alone
// (no cluster), and returns its base URL once it is ready. Notifications fail
// harmlessly: the receivers' secret files do not exist here.
func startAlertmanager(t *testing.T, bin string) string {
	t.Helper()
	cfg, err := filepath.Abs("deploy/prometheus/alertmanager.yml")
	if err != nil {
		t.Fatal(err)
	}
	addr := e2etest.FreeAddr(t)
	e2etest.Run(t, "alertmanager", exec.Command(bin,
		"--config.file="+cfg,
		"--storage.path="+t.TempDir(),
		"--web.listen-address="+addr,
		"--cluster.listen-address=",
		"--log.level=warn"))
	url := "http://" + addr
	collectortest.WaitFor(t, 20*time.Second, "Alertmanager ready", func() error {
		resp, err := http.Get(url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	return url
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
