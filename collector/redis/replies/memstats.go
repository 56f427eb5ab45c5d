package replies

import (
	"fmt"
	"strconv"
)

// MemoryStats holds the MEMORY STATS (4.0+) values the collector exports.
type MemoryStats struct {
	ClientsNormal     float64 // clients.normal: memory of normal clients (buffers, query buffers, struct), bytes
	ClientsReplicas   float64 // clients.slaves: same for replica connections, bytes
	DatasetPercentage float64 // dataset.percentage: dataset share of net memory usage, 0–100
	HasClients        bool
	HasDataset        bool
	Malformed         int
}

// ParseMemoryStats reads the reply of MEMORY STATS as a RESP2 client
// returns it: a flat array of alternating names and values, where values
// are integers, bulk strings holding decimals ("dataset.percentage") or
// nested arrays ("db.0"), and a RESP3 map decoded as map[any]any. Unknown
// names are ignored.
func ParseMemoryStats(reply any) (MemoryStats, error) {
	var ms MemoryStats
	set := func(k string, v any) {
		var dst *float64
		var has *bool
		switch k {
		case "clients.normal":
			dst, has = &ms.ClientsNormal, &ms.HasClients
		case "clients.slaves":
			dst = &ms.ClientsReplicas
		case "dataset.percentage":
			dst, has = &ms.DatasetPercentage, &ms.HasDataset
		default:
			return
		}
		f, ok := number(v)
		if has != nil {
			*has = ok
		}
		if !ok {
			ms.Malformed++
			return
		}
		*dst = f
	}
	switch r := reply.(type) {
	case []any:
		if len(r)%2 != 0 {
			return ms, fmt.Errorf("MEMORY STATS: odd number of elements (%d)", len(r))
		}
		for i := 0; i < len(r); i += 2 {
			k, ok := r[i].(string)
			if !ok {
				ms.Malformed++
				continue
			}
			set(k, r[i+1])
		}
	case map[any]any:
		for k, v := range r {
			ks, ok := k.(string)
			if !ok {
				ms.Malformed++
				continue
			}
			set(ks, v)
		}
	default:
		return ms, fmt.Errorf("MEMORY STATS: unexpected reply type %T", reply)
	}
	return ms, nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}
