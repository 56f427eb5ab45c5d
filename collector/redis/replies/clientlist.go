package replies

import (
	"bytes"
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/stall-exporter/stall_exporter/collector"
	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// GroupBy selects the client attribute CLIENT LIST aggregates are grouped by.
type GroupBy int

// Grouping attributes (--redis.client-group-by).
const (
	GroupByHost    GroupBy = iota // peer IP address without port (the socket path for Unix sockets)
	GroupByName                   // CLIENT SETNAME name (2.6.9+)
	GroupByLibName                // CLIENT SETINFO lib-name (7.2+)
	GroupByUser                   // ACL user (6.0+)
	// GroupByPool is PoolOf(name) — the name without its instance part —,
	// else lib-name, else host: the client pool (a Deployment, a
	// StatefulSet, a worker fleet) rather than each of its members.
	GroupByPool
)

// GroupByNames lists the accepted values of ParseGroupBy, in GroupBy order.
var GroupByNames = []string{"host", "name", "lib-name", "user", "pool"}

// ParseGroupBy maps "host", "name", "lib-name", "user" or "pool" to a
// GroupBy.
func ParseGroupBy(s string) (GroupBy, error) {
	if i := slices.Index(GroupByNames, s); i >= 0 {
		return GroupBy(i), nil
	}
	return 0, fmt.Errorf("unknown client grouping %q (want one of %s)", s, strings.Join(GroupByNames, ", "))
}

// OtherGroup is the label value of the remainder after the top K groups.
const OtherGroup = "other"

// NoneGroup is the label value of clients whose grouping attribute is empty
// (no name set, no lib-name, an address the server did not report).
const NoneGroup = "none"

// LiteralSuffix marks a group or command whose name really is OtherGroup or
// NoneGroup ("other (literal)"): it is not the remainder. Redis refuses
// spaces in client, library and ACL user names and has none in command
// names, so no real name ends in it.
const LiteralSuffix = " (literal)"

// label is the exported form of a group or command name, and its key:
// collector.LabelValue (names equal up to the cut are one group), never a
// reserved value.
func label(s string) string {
	switch s {
	case "":
		return NoneGroup
	case OtherGroup, NoneGroup:
		return s + LiteralSuffix
	}
	return collector.Label(s)
}

// Group is one aggregate of clients: a client group or a last command.
type Group struct {
	Name              string // label value; OtherGroup for the remainder
	Clients           int    // clients in the group
	OutputBufferBytes uint64 // sum of omem, bytes
}

// ClientListStats is the aggregate of one CLIENT LIST reply. Byte values
// come from the omem (output buffer, list part; 2.6+), tot-mem (all memory
// the client uses, 6.0.9+) and oll (reply list length, blocks) fields.
type ClientListStats struct {
	Bytes                int64  // size of the reply
	Clients              int    // client lines aggregated (replicas excluded)
	Replicas             int    // replica connections (flags contain S), not aggregated
	OutputBufferBytes    uint64 // sum of omem; meaningful only if HasOutputBuffer
	HasOutputBuffer      bool   // the server reports omem (2.6+; Redis 2.4 does not)
	TotalMemoryBytes     uint64 // sum of tot-mem; meaningful only if HasTotalMemory
	HasTotalMemory       bool   // the server reports tot-mem (6.0.9+)
	MaxOutputBufferBytes uint64 // the largest single omem; meaningful only if HasOutputBuffer
	PendingClients       int    // clients with oll > 0 or omem > 0
	OutputListBlocks     uint64 // sum of oll
	// Groups holds the top K groups with non-zero omem, largest first,
	// followed by an OtherGroup entry for every remaining client (always
	// present, possibly zero). Nil without omem: groups are ranked by it.
	Groups []Group
	// Commands holds omem by the client's last command (the cmd field), the
	// top K commands with non-zero omem followed by OtherGroup; nil without
	// omem.
	Commands []Group
	// Untracked counts clients summed in OtherGroup without their group or
	// command being ranked (see MaxGroups).
	Untracked int
	// Malformed counts lines without addr or longer than MaxLineBytes, and
	// non-numeric omem, oll or tot-mem; unused fields are not checked.
	Malformed int
}

// MaxGroups bounds the distinct group names, and separately the command
// names, of one reply, so that 100,000 clients with distinct names cost a
// few MB. Past MaxGroups a new name is tracked only with omem > 0 (else it
// is summed in OtherGroup and Untracked); past 2 × MaxGroups a new name
// with more omem than the smallest tracked group takes its place, and that
// group moves to OtherGroup. The top K are so exact unless a group's
// clients are scattered among more than 2 × MaxGroups others with pending
// output (each eviction costs it at most 1/(2 × MaxGroups) of the omem);
// an exported group's client count can be low when its idle members come
// after the first MaxGroups names.
const MaxGroups = 2000

// MaxLineBytes bounds one CLIENT LIST line (a line is about 300 bytes; a
// client name has no length limit in Redis). A longer line is skipped and
// counted as malformed.
const MaxLineBytes = 64 << 10

// retainGroups is how many group names an Aggregator keeps between
// replies, so that a steady state allocates nothing; past it, its maps
// are released after each reply.
const retainGroups = 32

// Aggregator folds CLIENT LIST replies into ClientListStats as they
// arrive (Begin, Write: a resplimit.Sink; then Finish), in memory bounded
// by MaxGroups, not by the reply. It is not safe for concurrent use.
type Aggregator struct {
	GroupBy GroupBy
	TopK    int

	groups  accs
	cmds    accs
	sorted  []Group
	st      ClientListStats // the reply being aggregated
	partial []byte          // the start of a line cut by the end of a Write
	skip    bool            // inside a line longer than MaxLineBytes
}

// accs accumulates per-key sums with one map lookup per client: the map
// holds an index into a slice. Keys are copies, never the reply's bytes.
type accs struct {
	index    map[string]int
	vals     []Group
	overflow Group // clients of names beyond MaxGroups, and of evicted groups
	// heap orders the indexes of vals by omem, smallest first, once
	// 2 × MaxGroups names are tracked (nil before); at[i] is the position
	// of vals[i] in it. A group's omem only grows, so it only moves down.
	heap, at []int32
}

// begin zeroes the sums and keeps the names.
func (a *accs) begin() {
	if a.index == nil || len(a.vals) > retainGroups { // none yet, or an unfinished reply's
		a.index, a.vals, a.heap, a.at = make(map[string]int), nil, nil, nil
	}
	for i := range a.vals {
		a.vals[i].Clients, a.vals[i].OutputBufferBytes = 0, 0
	}
	a.overflow = Group{}
}

// add counts one client of key; key may point into a buffer that is
// reused, so a new key is copied.
func (a *accs) add(key string, omem uint64) {
	i, ok := a.index[key]
	if !ok {
		n := len(a.vals)
		switch {
		case n >= MaxGroups && omem == 0,
			n >= 2*MaxGroups && omem <= a.vals[a.heap[0]].OutputBufferBytes:
			a.overflow.Clients++
			a.overflow.OutputBufferBytes += omem
			return
		case n >= 2*MaxGroups:
			i = a.evict()
		default:
			i = n
			a.vals = append(a.vals, Group{})
		}
		key = strings.Clone(key)
		a.index[key] = i
		a.vals[i] = Group{Name: key}
	}
	a.vals[i].Clients++
	a.vals[i].OutputBufferBytes += omem
	switch {
	case a.heap != nil && omem > 0:
		heap.Fix(a, int(a.at[i]))
	case a.heap == nil && len(a.vals) == 2*MaxGroups:
		a.buildHeap()
	}
}

// evict moves the tracked group with the smallest omem to the overflow and
// returns its index, now free; the heap keeps it at the root, with the
// newcomer's omem still to be added (and sifted down).
func (a *accs) evict() int {
	i := int(a.heap[0])
	v := a.vals[i]
	a.overflow.Clients += v.Clients
	a.overflow.OutputBufferBytes += v.OutputBufferBytes
	delete(a.index, v.Name)
	return i
}

// buildHeap orders every tracked index by omem.
func (a *accs) buildHeap() {
	n := len(a.vals)
	a.heap, a.at = make([]int32, n), make([]int32, n)
	for i := range n {
		a.heap[i], a.at[i] = int32(i), int32(i)
	}
	heap.Init(a)
}

// accs is a container/heap over heap, smallest omem first, that never
// grows or shrinks (Init and Fix only).
func (a *accs) Len() int { return len(a.heap) }
func (a *accs) Less(p, q int) bool {
	return a.vals[a.heap[p]].OutputBufferBytes < a.vals[a.heap[q]].OutputBufferBytes
}
func (a *accs) Swap(p, q int) {
	h := a.heap
	h[p], h[q] = h[q], h[p]
	a.at[h[p]], a.at[h[q]] = int32(p), int32(q)
}
func (a *accs) Push(any) { panic("replies: the group heap has a fixed size") }
func (a *accs) Pop() any { panic("replies: the group heap has a fixed size") }

// compact drops the names the last reply did not have, or every name when
// more than retainGroups remain.
func (a *accs) compact() {
	if len(a.vals) > retainGroups {
		a.index, a.vals, a.heap, a.at = nil, nil, nil, nil
		return
	}
	j := 0
	for _, v := range a.vals {
		if v.Clients == 0 {
			delete(a.index, v.Name)
			continue
		}
		a.vals[j] = v
		a.index[v.Name] = j
		j++
	}
	clear(a.vals[j:])
	a.vals = a.vals[:j]
}

// Begin starts a reply of size bytes, dropping any unfinished one.
func (a *Aggregator) Begin(size int64) {
	a.groups.begin()
	a.cmds.begin()
	a.st = ClientListStats{Bytes: size}
	a.partial, a.skip = a.partial[:0], false
}

// Write aggregates the next bytes of the reply; lines may be cut anywhere.
// It does not keep p and never fails.
func (a *Aggregator) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			a.carry(p)
			break
		}
		line := p[:i]
		p = p[i+1:]
		if a.skip {
			a.skip = false
			continue
		}
		if len(a.partial)+len(line) > MaxLineBytes {
			a.partial = a.partial[:0]
			a.st.Malformed++
			continue
		}
		if len(a.partial) > 0 {
			a.partial = append(a.partial, line...)
			line = a.partial
		}
		a.line(line)
		a.partial = a.partial[:0]
	}
	return n, nil
}

// carry keeps the start of a line cut by the end of a Write.
func (a *Aggregator) carry(p []byte) {
	switch {
	case a.skip:
	case len(a.partial)+len(p) > MaxLineBytes:
		a.partial, a.skip = a.partial[:0], true
		a.st.Malformed++
	default:
		a.partial = append(a.partial, p...)
	}
}

// Finish ends the reply and returns its aggregates.
func (a *Aggregator) Finish() ClientListStats {
	if len(a.partial) > 0 { // a last line without its newline
		a.line(a.partial)
	}
	st := a.st
	if st.HasOutputBuffer {
		st.Groups = a.top(a.groups)
		st.Commands = a.top(a.cmds)
	}
	st.Untracked = max(a.groups.overflow.Clients, a.cmds.overflow.Clients)
	a.groups.compact()
	a.cmds.compact()
	if cap(a.sorted) > retainGroups {
		a.sorted = nil
	}
	a.partial, a.skip, a.st = nil, false, ClientListStats{}
	return st
}

// line aggregates one line of the reply.
func (a *Aggregator) line(b []byte) {
	// b is unchanged while the fields are read; add copies the names it keeps.
	line := strings.TrimSuffix(unsafe.String(unsafe.SliceData(b), len(b)), "\r")
	if line == "" {
		return
	}
	st := &a.st
	c, bad := parseClientLine(line)
	st.Malformed += bad
	if !c.ok {
		st.Malformed++
		return
	}
	if c.replica {
		// A replica's output buffer is the replication stream, limited
		// by the replica class; it is reported by INFO/MEMORY STATS
		// (clients.slaves), and INFO connected_clients excludes it too.
		st.Replicas++
		return
	}
	st.Clients++
	st.HasOutputBuffer = st.HasOutputBuffer || c.hasOmem
	st.OutputBufferBytes += c.omem
	st.OutputListBlocks += c.oll
	if c.hasTotMem {
		st.HasTotalMemory = true
		st.TotalMemoryBytes += c.totMem
	}
	if c.omem > st.MaxOutputBufferBytes {
		st.MaxOutputBufferBytes = c.omem
	}
	if c.omem > 0 || c.oll > 0 {
		st.PendingClients++
	}
	a.groups.add(label(c.group(a.GroupBy)), c.omem)
	cmd := c.cmd
	if cmd == "NULL" { // no command yet
		cmd = ""
	}
	a.cmds.add(label(cmd), c.omem)
}

// top returns the K entries of acc with the largest non-zero omem and the
// OtherGroup remainder.
func (a *Aggregator) top(acc accs) []Group {
	k := a.TopK
	if k < 0 {
		k = 0
	}
	a.sorted = a.sorted[:0]
	other := acc.overflow
	other.Name = OtherGroup
	for _, v := range acc.vals {
		if v.OutputBufferBytes == 0 {
			other.Clients += v.Clients
			continue
		}
		a.sorted = append(a.sorted, v)
	}
	slices.SortFunc(a.sorted, func(x, y Group) int {
		switch {
		case x.OutputBufferBytes > y.OutputBufferBytes:
			return -1
		case x.OutputBufferBytes < y.OutputBufferBytes:
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	n := min(k, len(a.sorted))
	out := make([]Group, 0, n+1)
	out = append(out, a.sorted[:n]...) // names are the accumulators' own copies
	for _, g := range a.sorted[n:] {
		other.Clients += g.Clients
		other.OutputBufferBytes += g.OutputBufferBytes
	}
	return append(out, other)
}

// client is one parsed CLIENT LIST line; strings point into the reply.
type client struct {
	ok        bool // the line had the fields every version prints (addr)
	replica   bool // flags contain S: a replica fed by this server
	omem      uint64
	hasOmem   bool // 2.4 has no omem field
	oll       uint64
	totMem    uint64
	hasTotMem bool
	cmd       string
	addr      string
	name      string
	libName   string
	user      string
}

// group is the client's grouping attribute; "" when it is empty.
func (c *client) group(by GroupBy) string {
	switch by {
	case GroupByName:
		return c.name
	case GroupByLibName:
		return c.libName
	case GroupByUser:
		return c.user
	case GroupByPool:
		if p := PoolOf(c.name); p != "" {
			return p
		}
		if c.libName != "" {
			return c.libName
		}
	}
	return hostOf(c.addr)
}

// parseClientLine reads one "k=v k=v ..." line. Values never contain spaces
// (Redis refuses client names with spaces) but may contain '=': a token's
// key ends at its first '='. Unknown fields are ignored. It returns the
// number of unreadable numbers.
func parseClientLine(line string) (c client, bad int) {
	for tok := range strings.SplitSeq(line, " ") {
		key, val, found := strings.Cut(tok, "=")
		if !found {
			continue
		}
		ok := true
		switch key {
		case "addr":
			c.ok, c.addr = true, val
		case "name":
			c.name = val
		case "lib-name":
			c.libName = val
		case "user":
			c.user = val
		case "cmd":
			c.cmd = val
		case "flags":
			c.replica = strings.IndexByte(val, 'S') >= 0
		case "omem":
			c.omem, ok = scan.Uint(val)
			c.hasOmem = true
		case "oll":
			c.oll, ok = scan.Uint(val)
		case "tot-mem":
			var n uint64
			if n, ok = scan.Uint(val); ok {
				c.totMem, c.hasTotMem = n, true
			}
		}
		if !ok {
			bad++
		}
	}
	return c, bad
}

// hostOf strips the port from a CLIENT LIST addr: "10.0.0.1:4242" →
// "10.0.0.1", "[2001:db8::1]:4242" → "2001:db8::1" (2.8+ brackets),
// "2001:db8::1:4242" → "2001:db8::1" (no brackets), "/run/redis.sock:0" →
// "/run/redis.sock".
func hostOf(addr string) string {
	if addr == "" {
		return ""
	}
	if addr[0] == '[' {
		if i := strings.IndexByte(addr, ']'); i > 0 {
			return addr[1:i]
		}
		return addr
	}
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return addr[:i]
	}
	return addr
}
