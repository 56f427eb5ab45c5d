package host

import (
	"regexp"
	"slices"
	"strconv"
	"sync"
)

// netDeviceSettings are the --egress.* device flags: include (which, when
// set, makes exclude not apply), exclude, and the most interfaces
// exported.
type netDeviceSettings struct {
	include, exclude *regexp.Regexp // anchored; nil when the flag is empty
	max              int
}

var netFilters sync.Map // netDeviceSettings' key → *netDeviceFilter

// netDeviceFilterFor returns the one filter of these settings, shared by
// the egress collector and the sampler, so both export the same
// interfaces.
func netDeviceFilterFor(s netDeviceSettings) *netDeviceFilter {
	k := strconv.Itoa(s.max)
	if s.include != nil {
		k += "\x00i" + s.include.String()
	}
	if s.exclude != nil {
		k += "\x00e" + s.exclude.String()
	}
	f, _ := netFilters.LoadOrStore(k, &netDeviceFilter{netDeviceSettings: s})
	return f.(*netDeviceFilter)
}

// netDeviceFilter decides which network interfaces are exported: by name
// (--egress.device-include or -exclude, loopback excluded by default),
// then at most --egress.max-devices of them, those with the lowest
// interface index: the NICs the host booted with come before the veths of
// its containers. Name decisions are cached, so a known name costs no
// allocation. Safe for concurrent use.
type netDeviceFilter struct {
	netDeviceSettings

	mu    sync.Mutex
	cache map[string]bool // name → excluded
}

// excluded reports whether the name filter leaves the interface out.
func (f *netDeviceFilter) excluded(name string) bool {
	f.mu.Lock()
	v, ok := f.cache[name]
	f.mu.Unlock()
	if ok {
		return v
	}
	if f.include != nil {
		v = !f.include.MatchString(name)
	} else {
		v = f.exclude != nil && f.exclude.MatchString(name)
	}
	f.mu.Lock()
	if f.cache == nil || len(f.cache) >= 4096 { // interface churn (containers) must not grow memory forever
		f.cache = map[string]bool{}
	}
	f.cache[name] = v
	f.mu.Unlock()
	return v
}

// choose marks the links to export and returns how many passed the name
// filter but were left out by the bound.
func (f *netDeviceFilter) choose(links []egressLink) (left int) {
	n := 0
	for i := range links {
		links[i].exported = !f.excluded(links[i].name)
		if links[i].exported {
			n++
		}
	}
	if n <= f.max {
		return 0
	}
	// The kernel dumps in index order since 6.6 (an xarray), in hash
	// order before: find the max-th lowest index among the exported.
	idx := make([]int32, 0, n)
	for _, l := range links {
		if l.exported {
			idx = append(idx, l.index)
		}
	}
	slices.Sort(idx)
	limit := idx[f.max-1]
	for i := range links {
		if links[i].exported && links[i].index > limit {
			links[i].exported = false
		}
	}
	return n - f.max
}
