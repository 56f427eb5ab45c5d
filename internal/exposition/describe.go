package exposition

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// describe returns the family name and HELP of a client_golang descriptor.
// client_golang keeps them private and prints them only in Desc.String, as
// `Desc{fqName: "…", help: "…", constLabels: …}` with both quoted by %q
// (internal/exposition tests check this against every descriptor the
// exporter uses). The result is cached per descriptor: descriptors live as
// long as their collector, so the cache holds a few dozen entries; it stops
// growing at maxDescCache, for collectors that make a descriptor per scrape.
func describe(d *prometheus.Desc) (name, help string, err error) {
	descMu.RLock()
	info, ok := descCache[d]
	descMu.RUnlock()
	if !ok {
		info = parseDesc(d)
		descMu.Lock()
		if len(descCache) < maxDescCache {
			descCache[d] = info
		}
		descMu.Unlock()
	}
	return info.name, info.help, info.err
}

const maxDescCache = 4096

type descInfo struct {
	name, help string
	err        error
}

var (
	descMu    sync.RWMutex
	descCache = map[*prometheus.Desc]descInfo{}
)

func parseDesc(d *prometheus.Desc) descInfo {
	s := d.String()
	if err := d.Err(); err != nil {
		return descInfo{err: fmt.Errorf("invalid descriptor %s: %w", s, err)}
	}
	bad := descInfo{err: fmt.Errorf("cannot read the name and HELP of descriptor %s", s)}
	rest, ok := strings.CutPrefix(s, "Desc{fqName: ")
	if !ok {
		return bad
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return bad
	}
	name, _ := strconv.Unquote(q)
	if rest, ok = strings.CutPrefix(rest[len(q):], ", help: "); !ok {
		return bad
	}
	if q, err = strconv.QuotedPrefix(rest); err != nil {
		return bad
	}
	help, _ := strconv.Unquote(q)
	return descInfo{name: name, help: help}
}
