package writeback

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// eventFormat is a trace event's format file (tracefs
// events/<group>/<event>/format): its id, which perf_event_open(2) takes as
// the config of a PERF_TYPE_TRACEPOINT event, and the fields of its record
// by name. A tracepoint eBPF program receives that record, common fields
// first, and reads a field at its offset.
type eventFormat struct {
	name   string
	id     uint64
	fields map[string]eventField
}

// eventField is one "field:" line: the C declaration's type and where the
// field lies in the record, in bytes.
type eventField struct {
	typ          string
	offset, size int
	signed       bool
}

// parseFormat parses a format file:
//
//	name: balance_dirty_pages
//	ID: 985
//	format:
//		field:unsigned short common_type;	offset:0;	size:2;	signed:0;
//		...
//		field:char bdi[32];	offset:8;	size:32;	signed:0;
//		field:long pause;	offset:112;	size:8;	signed:1;
//
//	print fmt: "..."
//
// A field's name is the last word of its declaration, without an array's
// bounds. Lines other than name, ID and field lines are skipped; a field
// line without a declaration, offset and size is an error, as is a file
// without an ID.
func parseFormat(data string) (eventFormat, error) {
	f := eventFormat{fields: map[string]eventField{}}
	haveID := false
	for n, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "name:"):
			f.name = strings.TrimSpace(strings.TrimPrefix(line, "name:"))
		case strings.HasPrefix(line, "ID:"):
			id, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "ID:")), 10, 64)
			if err != nil {
				return f, fmt.Errorf("line %d: ID: %w", n+1, err)
			}
			f.id, haveID = id, true
		case strings.HasPrefix(line, "field:"):
			name, fld, err := parseField(line)
			if err != nil {
				return f, fmt.Errorf("line %d: %w", n+1, err)
			}
			f.fields[name] = fld
		}
	}
	if !haveID {
		return f, errors.New("no ID line")
	}
	return f, nil
}

// parseField parses "field:long pause;	offset:112;	size:8;	signed:1;".
func parseField(line string) (string, eventField, error) {
	var fld eventField
	decl, haveOffset, haveSize := "", false, false
	for part := range strings.SplitSeq(line, ";") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			continue
		}
		var err error
		switch key {
		case "field":
			decl = strings.TrimSpace(val)
		case "offset":
			fld.offset, err = strconv.Atoi(val)
			haveOffset = err == nil
		case "size":
			fld.size, err = strconv.Atoi(val)
			haveSize = err == nil
		case "signed":
			fld.signed = val == "1"
		}
		if err != nil {
			return "", fld, fmt.Errorf("%s: %w", key, err)
		}
	}
	sp := strings.LastIndexAny(decl, " \t*")
	if sp <= 0 || !haveOffset || !haveSize || fld.offset < 0 || fld.size <= 0 {
		return "", fld, fmt.Errorf("%q: want field:<type> <name>; offset:<n>; size:<n>;", line)
	}
	name, _, _ := strings.Cut(decl[sp+1:], "[")
	fld.typ = strings.TrimSpace(decl[:sp+1])
	return name, fld, nil
}

// pauseLayout is where the program finds what it counts in a
// balance_dirty_pages record, and which generation of the event's field
// names the kernel has.
type pauseLayout struct {
	id         uint64
	pauseOff   int16
	pauseSize  int // 8 (long on 64-bit kernels) or 4 (32-bit)
	generation string
}

// The event's field names by kernel (include/trace/events/writeback.h):
// from the 3.x kernels that gave it this shape to 6.14 it has bdi_setpoint
// and bdi_dirty (5.10 and 6.1 with cgroup_ino last, added with cgroup
// writeback); 6.15 renamed them wb_setpoint and wb_dirty, with the same
// types in the same places.
// pause, the planned sleep in ms (pause * 1000 / HZ in TP_fast_assign),
// has its name and type in every generation; it is the only field the
// program reads, so a generation not listed here (a later rename of the
// other fields) is logged but still counted.
var generations = []struct {
	name   string
	fields []string
}{
	{"6.15+ (wb_setpoint, wb_dirty)", []string{"wb_setpoint", "wb_dirty"}},
	{"before 6.15 (bdi_setpoint, bdi_dirty)", []string{"bdi_setpoint", "bdi_dirty"}},
}

// unknownGeneration names a layout with pause but neither set of names.
const unknownGeneration = "unknown (neither wb_dirty nor bdi_dirty)"

// layoutOf checks a balance_dirty_pages format: pause must be a signed
// long (4 or 8 bytes) past the common fields, which the program may not
// read. Its error says what the kernel has instead.
func layoutOf(f eventFormat) (pauseLayout, error) {
	l := pauseLayout{id: f.id, generation: unknownGeneration}
	p, ok := f.fields["pause"]
	if !ok {
		names := make([]string, 0, len(f.fields))
		for n := range f.fields {
			names = append(names, n)
		}
		return l, fmt.Errorf("the event %q has no field named pause (fields: %s)", f.name, strings.Join(names, ", "))
	}
	// A tracepoint program may not read the first 8 bytes (the common
	// fields) and must read a field at an offset aligned to its size.
	if !p.signed || p.size != 8 && p.size != 4 || p.offset < 8 || p.offset%p.size != 0 || p.offset > 4096 {
		return l, fmt.Errorf("the event's pause field is %q at offset %d, size %d, signed %v: want a signed long", p.typ, p.offset, p.size, p.signed)
	}
	l.pauseOff, l.pauseSize = int16(p.offset), p.size
	for _, g := range generations {
		all := true
		for _, n := range g.fields {
			if _, ok := f.fields[n]; !ok {
				all = false
			}
		}
		if all {
			l.generation = g.name
			break
		}
	}
	return l, nil
}
