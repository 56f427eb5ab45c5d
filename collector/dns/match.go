package dns

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// pendingKey identifies one outstanding query: the client and server
// addresses and ports, the transport and the DNS ID. A response matches the
// query whose client is its destination and whose server is its source.
type pendingKey struct {
	Client, Server addr
	CPort, SPort   uint16
	ID             uint16
	Proto          uint8
}

// pendingEntrySize is what one table slot costs: the entry in the pool plus
// two index slots (the index has twice as many slots as the pool).
const pendingEntrySize = int(unsafe.Sizeof(pendingEntry{})) + 2*4

type entryState uint8

const (
	stateFree entryState = iota
	stateLive
	stateExpired // timed out; kept for one more timeout to recognise a late response
)

type pendingEntry struct {
	key        pendingKey
	ts         int64 // when the query was first seen, Unix ns
	qtype      uint8
	state      entryState
	prev, next int32 // neighbours in the live or expired list, or the free list (next)
}

// entryList is an intrusive doubly linked list of pool indexes in the order
// entries entered it, oldest first; -1 is the end.
type entryList struct{ head, tail int32 }

// Outcomes of pendingTable.query and response.
type matchResult uint8

const (
	resNew        matchResult = iota // a query now pending
	resRetransmit                    // a query already pending (or just timed out) with the same key
	resOverflow                      // a query not tracked: the table is full of live queries
	resMatched                       // a response to a pending query
	resLate                          // a response to a query that had already timed out
	resUnmatched                     // a response to no known query
)

// pendingTable holds the queries waiting for a response, at most max of
// them (live or recently expired): a pool of entries with stable indexes,
// allocated at creation and touched only as the table fills; an
// open-addressing index (linear probing, backward-shift deletion, slot
// value = pool index + 1, 0 = empty) hashed with a per-process random seed
// so crafted packets cannot aim at one probe chain; and two time-ordered
// lists — live queries and expired ones — so expiry is O(expired), never a
// scan. The index starts at minIndexSlots and doubles while more than half
// full, up to twice max: a busy resolver keeps few queries pending, and an
// index sized for max cost a cache miss a packet (the largest share of the
// capture's CPU in scripts/bench-dns.sh). Not safe for concurrent use: the
// capture goroutine owns it.
type pendingTable struct {
	pool     []pendingEntry
	used     int32 // pool entries ever handed out (the high-water mark)
	freeHead int32
	index    []uint32
	mask     uint64
	inIndex  int // entries in the index, live and expired
	maxSlots int
	seed     uint64
	live     entryList
	expired  entryList
	nLive    int
	timeout  int64 // ns
}

func newPendingTable(size int, timeoutNS int64) *pendingTable {
	size = min(size, 1<<30)
	maxSlots := 2
	for maxSlots < 2*size {
		maxSlots <<= 1
	}
	slots := min(minIndexSlots, maxSlots)
	return &pendingTable{
		pool:     make([]pendingEntry, size),
		freeHead: -1,
		index:    make([]uint32, slots),
		mask:     uint64(slots - 1),
		maxSlots: maxSlots,
		seed:     rand.Uint64() | 1,
		live:     entryList{-1, -1},
		expired:  entryList{-1, -1},
		timeout:  timeoutNS,
	}
}

// minIndexSlots is the index's starting size: 1 KiB.
const minIndexSlots = 256

// grow doubles the index and places every entry again.
func (t *pendingTable) grow() {
	old := t.index
	t.index = make([]uint32, 2*len(old))
	t.mask = uint64(len(t.index) - 1)
	for _, v := range old {
		if v != 0 {
			slot, _ := t.find(&t.pool[v-1].key)
			t.index[slot] = v
		}
	}
}

// Len is the number of live (not yet timed out) queries.
func (t *pendingTable) Len() int { return t.nLive }

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a^0x9e3779b97f4a7c15, b^0xbf58476d1ce4e5b9)
	return hi ^ lo
}

func (t *pendingTable) hash(k *pendingKey) uint64 {
	h := mix(binary.LittleEndian.Uint64(k.Client[0:8])^t.seed, binary.LittleEndian.Uint64(k.Client[8:16]))
	h = mix(h^binary.LittleEndian.Uint64(k.Server[0:8]), binary.LittleEndian.Uint64(k.Server[8:16]))
	return mix(h, uint64(k.CPort)|uint64(k.SPort)<<16|uint64(k.ID)<<32|uint64(k.Proto)<<48)
}

// find returns the index slot holding k, or the empty slot where it would go.
func (t *pendingTable) find(k *pendingKey) (slot uint64, idx int32) {
	slot = t.hash(k) & t.mask
	for {
		v := t.index[slot]
		if v == 0 {
			return slot, -1
		}
		if t.pool[v-1].key == *k {
			return slot, int32(v - 1)
		}
		slot = (slot + 1) & t.mask
	}
}

// deleteSlot empties an index slot and shifts later members of its probe
// chain back, so lookups never need tombstones.
func (t *pendingTable) deleteSlot(slot uint64) {
	for {
		t.index[slot] = 0
		next := slot
		for {
			next = (next + 1) & t.mask
			v := t.index[next]
			if v == 0 {
				return
			}
			home := t.hash(&t.pool[v-1].key) & t.mask
			// Move v into the hole when its home is not in (slot, next].
			if (next-home)&t.mask >= (next-slot)&t.mask {
				t.index[slot] = v
				slot = next
				break
			}
		}
	}
}

func (t *pendingTable) pushBack(l *entryList, i int32) {
	e := &t.pool[i]
	e.prev, e.next = l.tail, -1
	if l.tail >= 0 {
		t.pool[l.tail].next = i
	} else {
		l.head = i
	}
	l.tail = i
}

func (t *pendingTable) unlink(l *entryList, i int32) {
	e := &t.pool[i]
	if e.prev >= 0 {
		t.pool[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		t.pool[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
}

// remove takes entry i (found at index slot) out of the table.
func (t *pendingTable) remove(slot uint64, i int32) {
	e := &t.pool[i]
	l := &t.expired
	if e.state == stateLive {
		t.nLive--
		l = &t.live
	}
	t.unlink(l, i)
	t.deleteSlot(slot)
	t.inIndex--
	e.state = stateFree
	e.next = t.freeHead
	t.freeHead = i
}

// alloc returns a free pool entry, reusing the oldest expired one when the
// pool is exhausted, or -1 when every entry holds a live query.
func (t *pendingTable) alloc() int32 {
	if t.freeHead >= 0 {
		i := t.freeHead
		t.freeHead = t.pool[i].next
		return i
	}
	if int(t.used) < len(t.pool) {
		t.used++
		return t.used - 1
	}
	if i := t.expired.head; i >= 0 {
		slot, _ := t.find(&t.pool[i].key)
		t.remove(slot, i)
		return t.alloc()
	}
	return -1
}

// query records a query seen at ts (Unix ns) with label index qtype.
func (t *pendingTable) query(k *pendingKey, ts int64, qtype uint8) matchResult {
	_, i := t.find(k)
	if i >= 0 {
		e := &t.pool[i]
		if e.state == stateExpired {
			// Resent after our timeout (resolvers retry after their own,
			// similar timeout): track it afresh; its timeout was counted.
			t.unlink(&t.expired, i)
			e.state, e.ts = stateLive, ts
			t.pushBack(&t.live, i)
			t.nLive++
		}
		return resRetransmit
	}
	i = t.alloc()
	if i < 0 {
		return resOverflow
	}
	if 2*(t.inIndex+1) > len(t.index) && len(t.index) < t.maxSlots {
		t.grow()
	}
	slot, _ := t.find(k) // alloc or grow may have moved the slot
	t.pool[i] = pendingEntry{key: *k, ts: ts, qtype: qtype, state: stateLive}
	t.index[slot] = uint32(i) + 1
	t.inIndex++
	t.pushBack(&t.live, i)
	t.nLive++
	return resNew
}

// response matches a response against the table; for resMatched and resLate
// it returns the query's timestamp and qtype and forgets the query.
func (t *pendingTable) response(k *pendingKey) (matchResult, int64, uint8) {
	slot, i := t.find(k)
	if i < 0 {
		return resUnmatched, 0, 0
	}
	e := t.pool[i]
	t.remove(slot, i)
	if e.state == stateExpired {
		return resLate, e.ts, e.qtype
	}
	return resMatched, e.ts, e.qtype
}

// expire moves queries older than the timeout to the expired list, adding
// one to timeouts[qtype] for each, and forgets expired queries older than
// two timeouts (a response later than that counts as unmatched).
func (t *pendingTable) expire(now int64, timeouts *[numQTypes]uint64) {
	for i := t.live.head; i >= 0; i = t.live.head {
		e := &t.pool[i]
		if now-e.ts < t.timeout {
			break
		}
		t.unlink(&t.live, i)
		t.nLive--
		e.state = stateExpired
		t.pushBack(&t.expired, i)
		timeouts[e.qtype]++
	}
	for i := t.expired.head; i >= 0; i = t.expired.head {
		if now-t.pool[i].ts < 2*t.timeout {
			break
		}
		slot, _ := t.find(&t.pool[i].key)
		t.remove(slot, i)
	}
}
