package host

import (
	"bytes"

	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// Zone is the headroom of one memory zone from /proc/zoneinfo, in pages.
type Zone struct {
	Node, Name     string
	Free           uint64 // "pages free" (or nr_free_pages)
	Min, Low, High uint64 // watermarks
	Managed        uint64 // pages managed by the buddy allocator
	HasFree        bool   // a free-pages line was seen
	HasManaged     bool   // a managed line was seen (2.6.37+)
	Marks          uint8  // watermark lines seen: 1 min, 2 low, 4 high

	freeFromPagesFree bool
}

// ParseZoneinfo parses /proc/zoneinfo into zones (reusing its backing
// array). Only the lines it needs are decoded: the "Node N, zone NAME"
// header, "pages free", min, low, high, managed and nr_free_pages. The
// per-CPU pageset lines ("high:  378", with a colon) are different keys and
// are skipped. A needed line whose value is not an unsigned integer, or a
// malformed header, is counted in bad and described by firstErr; the zone
// keeps the fields that did parse.
//
// The format has been stable since 2.6 (per-node stats sections appeared in
// 4.8 and are skipped); procfs' parser runs a regular expression on every
// line, which made it 40% of a host scrape, hence this one.
func ParseZoneinfo(data []byte, zones []Zone) (out []Zone, bad int, firstErr error) {
	out = zones[:0]
	var cur *Zone
	errs := badLines{file: "zoneinfo"}
	lineNo := 0
	for len(data) > 0 {
		var l []byte
		l, data = scan.Line(data)
		lineNo++
		if bytes.HasPrefix(l, []byte("Node ")) {
			node, zone, ok := parseZoneHeader(l[5:])
			if !ok {
				errs.add(lineNo, l, `want "Node N, zone NAME"`)
				cur = nil
				continue
			}
			// The zone this one overwrites in the reused array was most
			// likely the same zone: take its strings instead of allocating.
			var prev Zone
			if len(out) < cap(out) {
				prev = out[:len(out)+1][len(out)]
			}
			out = append(out, Zone{Node: reuseString(prev.Node, node), Name: reuseString(prev.Name, zone)})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		rest := l
		key := scan.Field(&rest)
		var dst *uint64
		var mark uint8
		switch string(key) {
		case "pages":
			if string(scan.Field(&rest)) != "free" {
				continue
			}
			dst = &cur.Free
		case "nr_free_pages":
			if cur.freeFromPagesFree {
				continue
			}
			dst = &cur.Free
		case "min":
			dst, mark = &cur.Min, 1
		case "low":
			dst, mark = &cur.Low, 2
		case "high":
			dst, mark = &cur.High, 4
		case "managed":
			dst = &cur.Managed
		default:
			continue
		}
		x, ok := scan.Uint(scan.Field(&rest))
		if !ok {
			errs.add(lineNo, l, "value is not an unsigned integer")
			continue
		}
		*dst = x
		cur.Marks |= mark
		switch string(key) {
		case "pages":
			cur.HasFree, cur.freeFromPagesFree = true, true
		case "nr_free_pages":
			cur.HasFree = true
		case "managed":
			cur.HasManaged = true
		}
	}
	return out, errs.n, errs.first
}

// parseZoneHeader parses "0, zone   Normal" (after "Node ").
func parseZoneHeader(b []byte) (node, zone []byte, ok bool) {
	comma := bytes.IndexByte(b, ',')
	if comma <= 0 {
		return nil, nil, false
	}
	if _, ok := scan.Uint(b[:comma]); !ok {
		return nil, nil, false
	}
	rest := b[comma+1:]
	kw := scan.Field(&rest)
	name := scan.Field(&rest)
	if string(kw) != "zone" || len(name) == 0 {
		return nil, nil, false
	}
	return b[:comma], name, true
}

func reuseString(prev string, b []byte) string {
	if prev == string(b) {
		return prev
	}
	return string(b)
}
