package replies

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// OutputBufferLimit is one class of the client-output-buffer-limit setting.
// Zero bytes means "no limit" for that threshold (Redis' own convention).
type OutputBufferLimit struct {
	Class       string // normal, replica, pubsub ("slave" is reported as replica)
	HardBytes   uint64 // the client is closed as soon as its output buffer reaches this
	SoftBytes   uint64 // … or stays above this for SoftSeconds
	SoftSeconds uint64
}

// Unlimited reports whether neither threshold limits the class.
func (l OutputBufferLimit) Unlimited() bool { return l.HardBytes == 0 && l.SoftBytes == 0 }

// ParseOutputBufferLimits parses the value of CONFIG GET
// client-output-buffer-limit: "normal 0 0 0 slave 268435456 67108864 60
// pubsub 33554432 8388608 60" (groups of class, hard, soft, soft seconds).
// Byte values may carry the config-file units (k, kb, m, mb, g, gb).
func ParseOutputBufferLimits(v string) ([]OutputBufferLimit, error) {
	f := strings.Fields(v)
	if len(f) == 0 || len(f)%4 != 0 {
		return nil, fmt.Errorf("client-output-buffer-limit %q: want groups of 4 fields", v)
	}
	var out []OutputBufferLimit
	for i := 0; i < len(f); i += 4 {
		class := strings.ToLower(f[i])
		switch class {
		case "slave":
			class = "replica"
		case "normal", "replica", "pubsub":
		default:
			return nil, fmt.Errorf("client-output-buffer-limit: unknown class %q", f[i])
		}
		hard, err1 := ParseMemory(f[i+1])
		soft, err2 := ParseMemory(f[i+2])
		secs, err3 := strconv.ParseUint(f[i+3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("client-output-buffer-limit: bad numbers in class %s: %q %q %q", class, f[i+1], f[i+2], f[i+3])
		}
		l := OutputBufferLimit{Class: class, HardBytes: hard, SoftBytes: soft, SoftSeconds: secs}
		// A class given twice: the last one wins, as in redis.conf.
		if i := slices.IndexFunc(out, func(o OutputBufferLimit) bool { return o.Class == class }); i >= 0 {
			out[i] = l
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// ParseMemory reads a Redis memory value: bytes, or a number with a unit
// k (1000), kb (1024), m, mb, g, gb, case-insensitive.
func ParseMemory(s string) (uint64, error) {
	t := strings.ToLower(s)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1000}, {"m", 1000 * 1000}, {"g", 1000 * 1000 * 1000}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, ok := scan.Uint(t)
	if !ok {
		return 0, fmt.Errorf("memory value %q is not a number of bytes", s)
	}
	if mult > 1 && n > ^uint64(0)/mult {
		return 0, fmt.Errorf("memory value %q overflows", s)
	}
	return n * mult, nil
}
