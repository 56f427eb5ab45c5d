package replies

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/collector"
)

const fixtures = "../testdata"

// aggregate folds a whole CLIENT LIST reply, as one piece.
func aggregate(a *Aggregator, reply string) ClientListStats { return aggregateBytes(a, []byte(reply)) }

func aggregateBytes(a *Aggregator, reply []byte) ClientListStats {
	a.Begin(int64(len(reply)))
	_, _ = a.Write(reply)
	return a.Finish()
}

func readFixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every CLIENT LIST fixture (2.4 … 8.0) holds two pending clients of the
// "reader" kind with 5 MiB and 10 MiB of omem after a GET (2.4 prints no
// omem: only their oll), plus clients with nothing pending. A fixture's
// name is the first version that prints its layout.
func TestClientListFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "clientlist-*.txt"))
	if err != nil || len(files) < 8 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			reply := readFixture(t, name)
			lines := strings.Count(reply, "\n") - strings.Count(reply, " flags=S ")
			agg := Aggregator{GroupBy: GroupByHost, TopK: 1}
			st := aggregate(&agg, reply)
			if st.Malformed != 0 {
				t.Errorf("malformed %d", st.Malformed)
			}
			if st.Clients != lines {
				t.Errorf("clients %d, want %d", st.Clients, lines)
			}
			if st.PendingClients != 2 || st.OutputListBlocks != 3 {
				t.Errorf("pending %d oll %d", st.PendingClients, st.OutputListBlocks)
			}
			v := fixtureVersion(name)
			// omem came with client-output-buffer-limit in 2.6; tot-mem
			// (and argv-mem) in 6.0.9 (release notes: "Memory reporting
			// of clients argv (#7874)"), not 6.2.
			if wantOmem := v >= 2_06_00; st.HasOutputBuffer != wantOmem {
				t.Fatalf("HasOutputBuffer %v", st.HasOutputBuffer)
			}
			if wantTot := v >= 6_00_09; st.HasTotalMemory != wantTot {
				t.Errorf("HasTotalMemory %v", st.HasTotalMemory)
			}
			if !st.HasOutputBuffer {
				if st.OutputBufferBytes != 0 || st.MaxOutputBufferBytes != 0 || st.Groups != nil || st.Commands != nil {
					t.Errorf("omem aggregates without omem: %+v", st)
				}
				return
			}
			if st.OutputBufferBytes != 15<<20 || st.MaxOutputBufferBytes != 10<<20 {
				t.Errorf("omem %d max %d", st.OutputBufferBytes, st.MaxOutputBufferBytes)
			}
			if len(st.Groups) != 2 || st.Groups[0].OutputBufferBytes != 15<<20 || st.Groups[0].Clients != 2 ||
				st.Groups[1].Name != OtherGroup || st.Groups[1].Clients != lines-2 || st.Groups[1].OutputBufferBytes != 0 {
				t.Errorf("groups %+v", st.Groups)
			}
			if len(st.Commands) != 2 || st.Commands[0] != (Group{Name: "get", Clients: 2, OutputBufferBytes: 15 << 20}) {
				t.Errorf("commands %+v", st.Commands)
			}
		})
	}
}

// fixtureVersion reads "clientlist-6.0.9.txt" as 6_00_09, "…-7.2.txt" as
// 7_02_00.
func fixtureVersion(name string) int {
	v := strings.TrimSuffix(strings.TrimPrefix(name, "clientlist-"), ".txt")
	n := 0
	for i, p := range append(strings.Split(v, "."), "0", "0")[:3] {
		d, _ := strconv.Atoi(p)
		n += d * []int{10000, 100, 1}[i]
	}
	return n
}

func TestClientListGroupings(t *testing.T) {
	cases := []struct {
		file string
		by   GroupBy
		want string
	}{
		{"clientlist-2.8.txt", GroupByHost, "10.1.0.6"},
		{"clientlist-5.0.txt", GroupByHost, "2001:db8::6"},
		{"clientlist-2.6.txt", GroupByName, "reader"},
		{"clientlist-6.0.0.txt", GroupByUser, "app"},
		{"clientlist-7.2.txt", GroupByLibName, "redis-py"},
		{"clientlist-2.6.txt", GroupByPool, "reader"},
		{"clientlist-7.2.txt", GroupByPool, "reader"},
	}
	for _, c := range cases {
		agg := Aggregator{GroupBy: c.by, TopK: 3}
		st := aggregate(&agg, readFixture(t, c.file))
		if st.Groups[0].Name != c.want || st.Groups[0].OutputBufferBytes != 15<<20 {
			t.Errorf("%s by %s: top group %+v, want %s", c.file, GroupByNames[c.by], st.Groups[0], c.want)
		}
	}
}

func TestClientListEdgeCases(t *testing.T) {
	reply := "id=1 addr=/tmp/redis.sock:0 laddr=/tmp/redis.sock:0 fd=8 name=a=b=c omem=100 oll=1 cmd=NULL\r\n" +
		"id=2 addr=[::1]:5000 name=x omem=200 oll=1 cmd=get\n" +
		"id=3 addr=::1:5001 name= omem=300 oll=1 cmd=get\n" +
		"garbage-without-equals addr=1.2.3.4:5 omem=bad oll=0\n" +
		"id=4 fd=3 omem=5\n" + // no addr: not a client line
		"\n" +
		"id=6 addr=10.0.0.2:6380 flags=S omem=99999 oll=3 cmd=replconf\n" + // a replica: not aggregated
		"id=5 addr=10.0.0.1:1 name=q omem=0 oll=0 cmd=ping xyz=1 =novalue"
	agg := Aggregator{GroupBy: GroupByHost, TopK: 10}
	st := aggregate(&agg, reply)
	if st.Clients != 5 || st.Replicas != 1 || st.MaxOutputBufferBytes != 300 {
		t.Errorf("clients %d replicas %d max %d", st.Clients, st.Replicas, st.MaxOutputBufferBytes)
	}
	// omem=bad and the line without addr; tokens the aggregate does not
	// use (garbage, "=novalue", unknown fields) are skipped unchecked.
	if st.Malformed != 2 {
		t.Errorf("malformed %d, want 2", st.Malformed)
	}
	want := map[string]uint64{"/tmp/redis.sock": 100, "::1": 500, OtherGroup: 0}
	for _, g := range st.Groups {
		if want[g.Name] != g.OutputBufferBytes {
			t.Errorf("group %q omem %d, want %d", g.Name, g.OutputBufferBytes, want[g.Name])
		}
		delete(want, g.Name)
	}
	if len(want) != 0 {
		t.Errorf("missing groups %v in %+v", want, st.Groups)
	}
	agg.GroupBy = GroupByName
	st = aggregate(&agg, reply)
	names := map[string]uint64{}
	for _, g := range st.Groups {
		names[g.Name] = g.OutputBufferBytes
	}
	if names["a=b=c"] != 100 || names[NoneGroup] != 300 || names["x"] != 200 {
		t.Errorf("by name: %v", names)
	}
	cmds := map[string]uint64{}
	for _, g := range st.Commands {
		cmds[g.Name] = g.OutputBufferBytes
	}
	if cmds[NoneGroup] != 100 || cmds["get"] != 500 {
		t.Errorf("by cmd: %v", cmds)
	}
}

// TestClientListReservedAndLongNames: a client group or command that is
// really called "other" or "none" is not merged with the remainder or
// the empty attribute, and names are bounded and valid label values: a
// 5,000-character name is cut to collector.MaxLabelBytes, names that agree up to the
// cut are one group, and invalid UTF-8 is repaired the same way
// collector.LabelValue repairs it, so two exported groups never have the
// same label (before, a client named "other" holding 47 MB was
// counted in the remainder, and a long name became a label as long).
func TestClientListReservedAndLongNames(t *testing.T) {
	long := strings.Repeat("é", 2500) // 5,000 bytes
	reply := "id=1 addr=10.0.0.1:1 name=other omem=47000000 oll=1 cmd=other\n" +
		"id=2 addr=10.0.0.2:1 name=none omem=3000 oll=1 cmd=none\n" +
		"id=3 addr=10.0.0.3:1 name= omem=2000 oll=1 cmd=NULL\n" +
		"id=4 addr=10.0.0.4:1 name=small omem=1 oll=1 cmd=get\n" +
		"id=5 addr=10.0.0.5:1 name=" + long + "a omem=500 oll=1 cmd=" + long + "\n" +
		"id=6 addr=10.0.0.6:1 name=" + long + "b omem=600 oll=1 cmd=get\n" +
		"id=7 addr=10.0.0.7:1 name=bad\xffname omem=70 oll=1 cmd=get\n" +
		"id=8 addr=10.0.0.8:1 name=bad\xfename omem=80 oll=1 cmd=get\n"
	agg := Aggregator{GroupBy: GroupByName, TopK: 5}
	st := aggregate(&agg, reply)
	groups := map[string]Group{}
	for _, g := range st.Groups {
		if _, dup := groups[g.Name]; dup {
			t.Errorf("group %q twice", g.Name)
		}
		groups[g.Name] = g
		if len(g.Name) > collector.MaxLabelBytes+len("…") || !utf8.ValidString(g.Name) {
			t.Errorf("group name of %d bytes (valid UTF-8: %v)", len(g.Name), utf8.ValidString(g.Name))
		}
	}
	cut := collector.Label(long)
	for name, want := range map[string]Group{
		"other" + LiteralSuffix: {Clients: 1, OutputBufferBytes: 47000000},
		"none" + LiteralSuffix:  {Clients: 1, OutputBufferBytes: 3000},
		NoneGroup:               {Clients: 1, OutputBufferBytes: 2000},
		cut:                     {Clients: 2, OutputBufferBytes: 1100},
		"bad\uFFFDname":         {Clients: 2, OutputBufferBytes: 150},
		OtherGroup:              {Clients: 1, OutputBufferBytes: 1},
	} {
		if g := groups[name]; g.Clients != want.Clients || g.OutputBufferBytes != want.OutputBufferBytes {
			t.Errorf("group %.20q: %d clients, %d bytes; want %d, %d", name, g.Clients, g.OutputBufferBytes, want.Clients, want.OutputBufferBytes)
		}
	}
	cmds := map[string]uint64{}
	for _, g := range st.Commands {
		cmds[g.Name] = g.OutputBufferBytes
	}
	if cmds["other"+LiteralSuffix] != 47000000 || cmds["none"+LiteralSuffix] != 3000 || cmds[NoneGroup] != 2000 || cmds[cut] != 500 {
		t.Errorf("commands %v", cmds)
	}
}

func TestClientListTopK(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, "id=%d addr=10.0.0.%d:1 omem=%d oll=1 cmd=get\n", i, i, i*1000)
	}
	b.WriteString("id=99 addr=10.0.0.99:1 omem=0 oll=0 cmd=ping\n")
	agg := Aggregator{GroupBy: GroupByHost, TopK: 3}
	st := aggregate(&agg, b.String())
	if len(st.Groups) != 4 {
		t.Fatalf("groups %+v", st.Groups)
	}
	for i, want := range []string{"10.0.0.20", "10.0.0.19", "10.0.0.18"} {
		if st.Groups[i].Name != want {
			t.Errorf("group %d = %s, want %s", i, st.Groups[i].Name, want)
		}
	}
	// other: clients 1..17 plus the idle one.
	if o := st.Groups[3]; o.Clients != 18 || o.OutputBufferBytes != 17*18/2*1000 {
		t.Errorf("other %+v", o)
	}
	agg.TopK = 0
	if st := aggregate(&agg, b.String()); len(st.Groups) != 1 || st.Groups[0].Clients != 21 {
		t.Errorf("top 0: %+v", st.Groups)
	}
}

func TestInfoFixtures(t *testing.T) {
	in := ParseInfo(readFixture(t, "info-7.0.txt"))
	if in.Malformed != 0 {
		t.Errorf("7.0 malformed %d", in.Malformed)
	}
	if ma, mi := in.Version(); ma != 7 || mi != 0 {
		t.Errorf("version %d.%d", ma, mi)
	}
	for _, k := range []string{"connected_clients", "client_recent_max_output_buffer", "mem_clients_normal", "total_net_output_bytes", "maxmemory", "evicted_clients"} {
		if _, ok, err := in.Number(k); !ok || err != nil {
			t.Errorf("7.0: %s missing", k)
		}
	}
	if len(in.Commands) == 0 {
		t.Error("7.0: no commandstats")
	}

	// 2.4: no section headers, no commandstats.
	in = ParseInfo(readFixture(t, "info-2.4.txt"))
	if ma, mi := in.Version(); ma != 2 || mi != 4 || in.Malformed != 0 || len(in.Commands) != 0 {
		t.Errorf("2.4: version %d.%d malformed %d commands %d", ma, mi, in.Malformed, len(in.Commands))
	}
	if v, _, _ := in.Number("connected_clients"); v != 3 || len(in.Keyspace) != 1 || in.Keyspace[0].Keys != 2 {
		t.Errorf("2.4: clients %v keyspace %+v", v, in.Keyspace)
	}

	in = ParseInfo(readFixture(t, "info-2.8.txt"))
	if ma, mi := in.Version(); ma != 2 || mi != 8 {
		t.Errorf("2.8 version %d.%d", ma, mi)
	}
	if v, _, _ := in.Number("client_longest_output_list"); v != 320 {
		t.Errorf("2.8 client_longest_output_list %v", v)
	}
	if len(in.Keyspace) != 2 || in.Keyspace[1] != (DBStat{Index: 3, Keys: 5}) {
		t.Errorf("2.8 keyspace %+v", in.Keyspace)
	}
	if len(in.Replicas) != 1 || in.Replicas[0] != (Replica{IP: "10.1.0.20", Port: 6380, State: "online"}) {
		t.Errorf("2.8 replicas %+v", in.Replicas)
	}
	if !hasCommand(in, "cluster", 12000, 9000000) {
		t.Errorf("2.8 cluster commandstat: %+v", in.Commands)
	}

	in = ParseInfo(readFixture(t, "info-4.0.txt"))
	if v, _, _ := in.Number("total_net_output_bytes"); v != 9e10 {
		t.Errorf("4.0 output bytes %v", v)
	}

	in = ParseInfo(readFixture(t, "info-7.4.txt"))
	if !hasCommand(in, "cluster|nodes", 250000, 187500000) || !hasCommand(in, "client|list", 10, 9000) {
		t.Errorf("7.4 commandstats %+v", in.Commands)
	}
	if v, _, _ := in.Number("client_output_buffer_limit_disconnections"); v != 7 {
		t.Errorf("7.4 disconnections %v", v)
	}
	if len(in.Replicas) != 1 || in.Replicas[0].IP != "2001:db8::20" {
		t.Errorf("7.4 replicas %+v", in.Replicas)
	}
	if in.Fields["role"] != "master" || in.Malformed != 0 {
		t.Errorf("7.4 role %q malformed %d", in.Fields["role"], in.Malformed)
	}
}

func hasCommand(in Info, name string, calls, usec uint64) bool {
	for _, c := range in.Commands {
		if c.Name == name {
			return c.Calls == calls && c.Usec == usec
		}
	}
	return false
}

// TestInfoBounds: a reply with more fields, commands or databases than
// any server has is parsed up to MaxInfo*; the rest is counted as dropped
// (before the bound, a 30 MB INFO of key:value lines took 428 MB).
func TestInfoBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("redis_version:7.0.15\r\n")
	for i := range 3 * MaxInfoDatabases {
		fmt.Fprintf(&b, "f%d:1\r\ncmdstat_c%d:calls=1,usec=1,usec_per_call=1.00\r\ndb%d:keys=1,expires=0\r\n", i, i, i)
	}
	b.WriteString("redis_version:7.0.16\r\n") // a field already known is still read
	in := ParseInfo(b.String())
	if len(in.Fields) != MaxInfoFields || len(in.Commands) != MaxInfoCommands || len(in.Keyspace) != MaxInfoDatabases {
		t.Errorf("%d fields, %d commands, %d databases", len(in.Fields), len(in.Commands), len(in.Keyspace))
	}
	if want := 3*3*MaxInfoDatabases + 1 - MaxInfoFields - MaxInfoCommands - MaxInfoDatabases; in.Dropped != want {
		t.Errorf("dropped %d, want %d", in.Dropped, want)
	}
	if in.Fields["redis_version"] != "7.0.16" {
		t.Errorf("redis_version %q", in.Fields["redis_version"])
	}
}

// TestClientListStreamedCuts: a reply written in pieces cut anywhere
// (inside a line, between CR and LF, a line longer than MaxLineBytes)
// aggregates as the whole reply does.
func TestClientListStreamedCuts(t *testing.T) {
	long := "id=9 addr=10.0.0.9:1 name=" + strings.Repeat("n", MaxLineBytes) + " omem=7 cmd=get\n"
	reply := clientListReply(300, true) + long + strings.ReplaceAll(clientListReply(50, false), "\n", "\r\n")
	whole := aggregate(&Aggregator{GroupBy: GroupByPool, TopK: 3}, reply)
	if whole.Clients != 350 || whole.Malformed != 1 {
		t.Fatalf("whole: %d clients, %d malformed; want 350 and the long line", whole.Clients, whole.Malformed)
	}
	for _, step := range []int{1, 2, 7, 300, 4096, MaxLineBytes + 1} {
		agg := Aggregator{GroupBy: GroupByPool, TopK: 3}
		agg.Begin(int64(len(reply)))
		for i := 0; i < len(reply); i += step {
			_, _ = agg.Write([]byte(reply[i:min(i+step, len(reply))]))
		}
		if got := agg.Finish(); !reflect.DeepEqual(got, whole) {
			t.Errorf("in %d-byte pieces: %+v\nwhole: %+v", step, got, whole)
		}
	}
}

// TestClientListGroupBound: with more distinct names than MaxGroups, the
// clients of later names without output buffers go to other, while every
// name with omem is still ranked — so the top group is found wherever it
// is in the reply — and memory stays bounded by 2 × MaxGroups names.
func TestClientListGroupBound(t *testing.T) {
	var b strings.Builder
	for i := range 3 * MaxGroups {
		fmt.Fprintf(&b, "addr=10.0.0.1:%d name=c%d omem=0 cmd=c%d\n", i, i, i)
	}
	b.WriteString("addr=10.0.0.2:1 name=late omem=5000000 cmd=get\n")
	agg := Aggregator{GroupBy: GroupByName, TopK: 1}
	st := aggregate(&agg, b.String())
	if len(st.Groups) != 2 || st.Groups[0].Name != "late" || st.Groups[0].OutputBufferBytes != 5000000 {
		t.Fatalf("groups %+v", st.Groups)
	}
	if other := st.Groups[1]; other.Clients != 3*MaxGroups || st.Untracked != 2*MaxGroups {
		t.Errorf("other %+v, untracked %d", other, st.Untracked)
	}
	if n := len(agg.groups.vals) + len(agg.cmds.vals); n != 0 {
		t.Errorf("%d names kept after the reply", n)
	}
}

// TestClientListTopKPastBound: with more than 2 × MaxGroups groups with
// pending output, the table keeps the largest: clients are listed in
// connection order, so the newest — here the largest buffers (distinct names,
// omem growing with the position) — come
// last, and must still be the exported top K. Sums stay exact.
func TestClientListTopKPastBound(t *testing.T) {
	const n = 3*MaxGroups + 17
	var b strings.Builder
	var total uint64
	for i := range n {
		omem := uint64(1000 + i)
		total += omem
		// A scattered group of idle clients, and a small group listed in
		// two places that is evicted in between: their clients stay counted.
		fmt.Fprintf(&b, "addr=10.0.%d.%d:1 name=n%07d oll=1 omem=%d cmd=get%d\n", i/256%256, i%256, i, omem, i)
		if i%500 == 0 {
			fmt.Fprintf(&b, "addr=10.1.0.1:1 name=idle oll=0 omem=0 cmd=ping\n")
		}
	}
	reply := b.String()
	agg := Aggregator{GroupBy: GroupByName, TopK: 10}
	st := aggregate(&agg, reply)
	if len(st.Groups) != 11 {
		t.Fatalf("%d groups, want 10 + other", len(st.Groups))
	}
	var sum uint64
	clients := 0
	for k, g := range st.Groups {
		sum += g.OutputBufferBytes
		clients += g.Clients
		if k == 10 {
			break
		}
		want := fmt.Sprintf("n%07d", n-1-k)
		if g.Name != want || g.OutputBufferBytes != uint64(1000+n-1-k) || g.Clients != 1 {
			t.Errorf("group %d: %+v, want %s with omem %d", k, g, want, 1000+n-1-k)
		}
		if c := st.Commands[k]; c.Name != fmt.Sprintf("get%d", n-1-k) || c.OutputBufferBytes != g.OutputBufferBytes {
			t.Errorf("command %d: %+v", k, c)
		}
	}
	if sum != total || clients != st.Clients || st.OutputBufferBytes != total {
		t.Errorf("groups add up to %d bytes, %d clients; reply has %d bytes, %d clients", sum, clients, st.OutputBufferBytes, st.Clients)
	}
	if st.Untracked == 0 {
		t.Error("no client counted as untracked past the bound")
	}
	// Streamed in pieces, the same result; and memory stays bounded.
	agg.Begin(int64(len(reply)))
	for i := 0; i < len(reply); i += 4093 {
		_, _ = agg.Write([]byte(reply[i:min(i+4093, len(reply))]))
	}
	if got := agg.Finish(); !reflect.DeepEqual(got, st) {
		t.Errorf("streamed: %+v\nwhole: %+v", got.Groups, st.Groups)
	}
	agg.Begin(int64(len(reply)))
	_, _ = agg.Write([]byte(reply))
	if n := len(agg.groups.vals); n != 2*MaxGroups {
		t.Errorf("%d group names tracked, want the bound %d", n, 2*MaxGroups)
	}
}

// TestClientListHeapOrder: whatever the order the omem come in, the
// tracked table past the bound is a valid min-heap whose indexes agree
// with their positions, and the kept groups are the largest.
func TestClientListHeapOrder(t *testing.T) {
	var a accs
	a.begin()
	r := uint64(12345)
	seen := map[string]uint64{}
	for i := range 5 * MaxGroups {
		r = r*6364136223846793005 + 1442695040888963407
		key := fmt.Sprintf("g%d", r>>52) // 4,096 keys, revisited in random order
		omem := r >> 40 % 1000
		if i%7 == 0 {
			key = fmt.Sprintf("u%d", i) // and a stream of new ones
		}
		seen[key] += omem
		a.add(key, omem)
	}
	if a.heap == nil {
		t.Fatal("table never filled")
	}
	for p := range a.heap {
		if int(a.at[a.heap[p]]) != p {
			t.Fatalf("at[%d] = %d, want %d", a.heap[p], a.at[a.heap[p]], p)
		}
		for _, c := range []int{2*p + 1, 2*p + 2} {
			if c < len(a.heap) && a.vals[a.heap[c]].OutputBufferBytes < a.vals[a.heap[p]].OutputBufferBytes {
				t.Fatalf("heap order broken at %d", p)
			}
		}
	}
	for k, i := range a.index {
		if a.vals[i].Name != k || a.vals[i].OutputBufferBytes > seen[k] {
			t.Fatalf("index %q → %+v (true sum %d)", k, a.vals[i], seen[k])
		}
	}
}

func TestInfoMalformed(t *testing.T) {
	in := ParseInfo("# Server\r\nredis_version:7.2.0\r\nnot a field\r\ncmdstat_get:calls=x,usec=1\r\ndb0:keys=abc\r\n:empty\r\nok:1")
	if in.Malformed != 4 {
		t.Errorf("malformed %d, want 4", in.Malformed)
	}
	if in.Fields["ok"] != "1" || in.Fields["redis_version"] != "7.2.0" {
		t.Errorf("fields %v", in.Fields)
	}
}

func TestOutputBufferLimits(t *testing.T) {
	l, err := ParseOutputBufferLimits("normal 0 0 0 slave 268435456 67108864 60 pubsub 32mb 8mb 60")
	if err != nil {
		t.Fatal(err)
	}
	want := []OutputBufferLimit{
		{Class: "normal"},
		{Class: "replica", HardBytes: 256 << 20, SoftBytes: 64 << 20, SoftSeconds: 60},
		{Class: "pubsub", HardBytes: 32 << 20, SoftBytes: 8 << 20, SoftSeconds: 60},
	}
	if fmt.Sprint(l) != fmt.Sprint(want) {
		t.Errorf("got %+v", l)
	}
	if !l[0].Unlimited() || l[1].Unlimited() {
		t.Error("Unlimited")
	}
	for _, bad := range []string{"", "normal 0 0", "normal -1 0 0", "weird 0 0 0", "normal 1x 0 0", "normal 99999999999999999999gb 0 0"} {
		if _, err := ParseOutputBufferLimits(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestMemoryStatsFixtures(t *testing.T) {
	cases := []struct {
		file            string
		normal, replica float64
		dataset         float64
	}{
		{"memorystats-4.0.resp", 1073741824, 16922, 13.920000076293945},
		{"memorystats-7.0.resp", 0, 0, 99.893096923828125},
		{"memorystats-8.0.resp", 45000, 0, 95.5},
	}
	for _, c := range cases {
		v, rest, err := decodeRESP([]byte(readFixture(t, c.file)))
		if err != nil || len(rest) != 0 {
			t.Fatalf("%s: %v (%d bytes left)", c.file, err, len(rest))
		}
		ms, err := ParseMemoryStats(v)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if !ms.HasClients || !ms.HasDataset || ms.ClientsNormal != c.normal || ms.ClientsReplicas != c.replica || ms.DatasetPercentage != c.dataset || ms.Malformed != 0 {
			t.Errorf("%s: %+v", c.file, ms)
		}
	}
	if _, err := ParseMemoryStats("OK"); err == nil {
		t.Error("string reply accepted")
	}
	if _, err := ParseMemoryStats([]any{"a"}); err == nil {
		t.Error("odd array accepted")
	}
	ms, _ := ParseMemoryStats(map[any]any{"clients.normal": int64(5), "dataset.percentage": 1.5, int64(3): "x"})
	if ms.ClientsNormal != 5 || ms.DatasetPercentage != 1.5 || ms.Malformed != 1 {
		t.Errorf("RESP3 map: %+v", ms)
	}
}

// decodeRESP decodes one RESP2 value as go-redis returns it: int64, string,
// nil, []any; error replies become errors.
func decodeRESP(b []byte) (any, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return nil, b, errors.New("no CRLF")
	}
	head, rest := string(b[1:i]), b[i+2:]
	switch b[0] {
	case '+':
		return head, rest, nil
	case '-':
		return nil, rest, errors.New(head)
	case ':':
		n, err := strconv.ParseInt(head, 10, 64)
		return n, rest, err
	case '$':
		n, err := strconv.Atoi(head)
		if err != nil || n < -1 {
			return nil, rest, fmt.Errorf("bad bulk length %q", head)
		}
		if n == -1 {
			return nil, rest, nil
		}
		if len(rest) < n+2 {
			return nil, rest, errors.New("short bulk")
		}
		return string(rest[:n]), rest[n+2:], nil
	case '*':
		n, err := strconv.Atoi(head)
		if err != nil || n < -1 || n > len(rest) {
			return nil, rest, fmt.Errorf("bad array length %q", head)
		}
		out := make([]any, 0, max(n, 0))
		for range n {
			var v any
			v, rest, err = decodeRESP(rest)
			if err != nil {
				return nil, rest, err
			}
			out = append(out, v)
		}
		return out, rest, nil
	}
	return nil, rest, fmt.Errorf("unknown RESP type %q", b[0])
}

func FuzzClientList(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "clientlist-*.txt"))
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(string(b))
	}
	f.Add("addr= name== omem=18446744073709551615 oll=18446744073709551616\n")
	f.Add("addr=[ addr=[::1 addr=/ addr=unix:")
	f.Fuzz(func(t *testing.T, s string) {
		for by := range GroupByNames {
			agg := Aggregator{GroupBy: GroupBy(by), TopK: 2}
			st := aggregate(&agg, s)
			// The same reply streamed in pieces (as resplimit hands it
			// over) aggregates the same, whatever the cut.
			step := len(s)%13 + 1
			agg.Begin(int64(len(s)))
			for i := 0; i < len(s); i += step {
				_, _ = agg.Write([]byte(s[i:min(i+step, len(s))]))
			}
			if streamed := agg.Finish(); !reflect.DeepEqual(streamed, st) {
				t.Fatalf("in %d-byte pieces: %+v\nwhole: %+v", step, streamed, st)
			}
			// Names are label values: valid, bounded, one series each.
			for _, list := range [][]Group{st.Groups, st.Commands} {
				seen := map[string]bool{}
				for _, g := range list {
					if seen[g.Name] || !utf8.ValidString(g.Name) || len(g.Name) > collector.MaxLabelBytes+len("…") || g.Name == "" {
						t.Fatalf("name %q: repeated, invalid, empty or too long in %+v", g.Name, list)
					}
					seen[g.Name] = true
				}
			}
			if !st.HasOutputBuffer {
				if st.Groups != nil || st.Commands != nil || st.OutputBufferBytes != 0 {
					t.Fatalf("omem aggregates without omem: %+v", st)
				}
				continue
			}
			var sum uint64
			clients := 0
			for _, g := range st.Groups {
				sum += g.OutputBufferBytes
				clients += g.Clients
			}
			if sum != st.OutputBufferBytes || clients != st.Clients {
				t.Fatalf("groups do not add up: %+v vs %+v", st.Groups, st)
			}
			if st.MaxOutputBufferBytes > st.OutputBufferBytes || st.PendingClients > st.Clients {
				t.Fatalf("inconsistent %+v", st)
			}
		}
	})
}

func FuzzInfo(f *testing.F) {
	for _, n := range []string{"info-2.4.txt", "info-2.8.txt", "info-4.0.txt", "info-7.0.txt", "info-7.4.txt"} {
		b, _ := os.ReadFile(filepath.Join(fixtures, n))
		f.Add(string(b))
	}
	f.Add("cmdstat_:calls=1,usec=1\ndb:keys=1\nslave0:ip=,port=x\n")
	f.Fuzz(func(t *testing.T, s string) {
		in := ParseInfo(s)
		in.Version()
		if len(in.Fields) > MaxInfoFields || len(in.Commands) > MaxInfoCommands || len(in.Keyspace) > MaxInfoDatabases {
			t.Fatalf("%d fields, %d commands, %d databases", len(in.Fields), len(in.Commands), len(in.Keyspace))
		}
		for _, c := range in.Commands {
			if c.Name == "" {
				t.Fatal("empty command name")
			}
		}
		sc := bufio.NewScanner(strings.NewReader(s))
		sc.Buffer(nil, len(s)+1)
		for sc.Scan() {
		}
	})
}

func FuzzOutputBufferLimits(f *testing.F) {
	f.Add("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
	f.Add("normal 1gb 512mb 10 replica 1k 1K 0 pubsub 0 0 0")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseOutputBufferLimits(s)
		if err == nil && len(l) == 0 {
			t.Fatal("no error and no limits")
		}
	})
}

func FuzzMemoryStats(f *testing.F) {
	for _, n := range []string{"memorystats-4.0.resp", "memorystats-7.0.resp", "memorystats-8.0.resp"} {
		b, _ := os.ReadFile(filepath.Join(fixtures, n))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _, err := decodeRESP(b)
		if err != nil {
			return
		}
		_, _ = ParseMemoryStats(v)
	})
}

// clientListReply builds a CLIENT LIST reply of n clients in the 7.2
// layout, spread over 200 hosts, 5 names and 4 commands; every 10th client
// has a pending 5 MiB reply. With pods, the names are those of the pods of
// 5 Deployments ("svc-3-7d9f8b6c5d-x2x9z"), each pod its own.
func clientListReply(n int, pods bool) string {
	var b strings.Builder
	cmds := []string{"get", "set", "hgetall", "cluster|nodes"}
	for i := 0; i < n; i++ {
		omem, oll := 0, 0
		if i%10 == 0 {
			omem, oll = 5<<20, 1
		}
		pod := ""
		if pods {
			pod = "-7d9f8b6c5d-" + string([]byte{podAlphabet[i%27], podAlphabet[i/27%27], 'x', '2', podAlphabet[i/729%27]})
		}
		fmt.Fprintf(&b, "id=%d addr=10.%d.%d.%d:%d laddr=10.0.0.1:6379 fd=%d name=svc-%d%s age=100 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "+
			"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=%d omem=%d tot-mem=%d events=r cmd=%s user=default redir=-1 resp=2 lib-name=redis-py lib-ver=5.0.1\n",
			i+1, (i%200)/100, i%200, i%7, 30000+i%30000, i+8, i%5, pod, oll, omem, omem+22000, cmds[i%4])
	}
	return b.String()
}

func TestClientListAllocations(t *testing.T) {
	// 1,400 and 14,000 clients: the same 1,400 hosts and 5 pools.
	small, large := []byte(clientListReply(1400, true)), []byte(clientListReply(14000, true))
	for _, by := range []GroupBy{GroupByHost, GroupByPool} {
		agg := Aggregator{GroupBy: by, TopK: 10}
		aggregateBytes(&agg, large) // warm the maps
		a1 := testing.AllocsPerRun(5, func() { aggregateBytes(&agg, small) })
		a2 := testing.AllocsPerRun(5, func() { aggregateBytes(&agg, large) })
		// Same number of groups: the allocation count must not grow with
		// the number of clients.
		if a2 > a1+2 {
			t.Errorf("by %s: allocations grow with clients: %v for 1.4k, %v for 14k", GroupByNames[by], a1, a2)
		}
	}
}

func BenchmarkAggregateClientList10k(b *testing.B) {
	for _, by := range []GroupBy{GroupByHost, GroupByName, GroupByPool} {
		b.Run(GroupByNames[by], func(b *testing.B) {
			reply := []byte(clientListReply(10000, by == GroupByPool))
			agg := Aggregator{GroupBy: by, TopK: 10}
			b.SetBytes(int64(len(reply)))
			b.ReportAllocs()
			for b.Loop() {
				aggregateBytes(&agg, reply)
			}
		})
	}
}

func BenchmarkParseInfo(b *testing.B) {
	s := readFixture(b, "info-7.0.txt")
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		ParseInfo(s)
	}
}

// Number is the one reader of INFO's numbers: a percentage with its sign,
// an absent field (not an error), and a value that is not a number (an
// error naming the field).
func TestInfoNumber(t *testing.T) {
	in := ParseInfo("used_memory_dataset_perc:12.50%\r\nused_memory:1048576\r\nconnected_clients:lots\r\n")
	if v, ok, err := in.Number("used_memory_dataset_perc"); v != 12.5 || !ok || err != nil {
		t.Errorf("12.50%% read as %v, %v, %v", v, ok, err)
	}
	if v, ok, err := in.Number("used_memory"); v != 1048576 || !ok || err != nil {
		t.Errorf("used_memory read as %v, %v, %v", v, ok, err)
	}
	if _, ok, err := in.Number("evicted_clients"); ok || err != nil {
		t.Errorf("an absent field read as present %v, %v", ok, err)
	}
	if _, ok, err := in.Number("connected_clients"); !ok || err == nil || !strings.Contains(err.Error(), `connected_clients is not a number: "lots"`) {
		t.Errorf("connected_clients:lots read as %v, %v", ok, err)
	}
}
