package remoting

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ParseKVTable decodes the body of a GET_BROKER_RUNTIME_INFO reply,
// {"table":{"key":"value",…}}. Every value the broker sends is a string;
// numbers, booleans and null are accepted too and kept as their JSON text
// (null as "null"), so one odd value never loses the table. A body that is
// not such a table is an error wrapping ErrMalformed.
func ParseKVTable(body []byte) (map[string]string, error) {
	// Fast path: the broker's own replies have only string values (a JSON
	// null would silently become "" here, so bodies with one take the slow
	// path).
	if !bytes.Contains(body, []byte("null")) {
		var plain struct {
			Table map[string]string `json:"table"`
		}
		if err := json.Unmarshal(body, &plain); err == nil && plain.Table != nil {
			return plain.Table, nil
		}
	}
	var kv struct {
		Table map[string]json.RawMessage `json:"table"`
	}
	if err := json.Unmarshal(body, &kv); err != nil {
		return nil, fmt.Errorf("%w: runtime info body: %w", ErrMalformed, err)
	}
	if kv.Table == nil {
		return nil, fmt.Errorf("%w: runtime info body: no \"table\" object", ErrMalformed)
	}
	out := make(map[string]string, len(kv.Table))
	for k, raw := range kv.Table {
		var s string
		if len(raw) > 0 && raw[0] == '"' {
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("%w: runtime info key %.64q: %w", ErrMalformed, k, err)
			}
		} else {
			s = string(raw)
		}
		out[k] = s
	}
	return out, nil
}

// DistributionLabels are the 13 bucket labels of the runtime-info value
// putMessageDistributeTime (and of store.log's [PAGECACHERT] lines), in
// order: "[<=0ms]:a [0~10ms]:b … [10s~]:m ".
var DistributionLabels = [13]string{"<=0ms", "0~10ms", "10~50ms", "50~100ms", "100~200ms", "200~500ms",
	"500ms~1s", "1~2s", "2~3s", "3~4s", "4~5s", "5~10s", "10s~"}

// ParseConfig decodes the body of a GET_BROKER_CONFIG reply: one key=value
// per line, unsorted and unescaped, split on the first '='. It returns the
// settings and the number of non-empty lines that had no '='.
func ParseConfig(body []byte) (map[string]string, int) {
	out := map[string]string{}
	bad := 0
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			bad++
			continue
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, bad
}

// BrokerAddr is one broker instance from a name server's cluster info.
type BrokerAddr struct {
	Cluster string
	Name    string // brokerName, shared by a master and its slaves
	ID      int64  // brokerId: 0 is the master, > 0 a slave
	Addr    string // host:port of the remoting listener
}

// ParseClusterInfo decodes the body of a GET_BROKER_CLUSTER_INFO reply and
// returns every broker of every cluster, masters and slaves, sorted by
// cluster, name and id. fastjson writes the brokerAddrs map (a Java
// Map<Long,String>) with unquoted integer keys, {0:"10.0.0.1:10911"}; those
// are quoted before decoding. A body that cannot be read is an error
// wrapping ErrMalformed.
func ParseClusterInfo(body []byte) ([]BrokerAddr, error) {
	var ci struct {
		BrokerAddrTable map[string]struct {
			Cluster     string            `json:"cluster"`
			BrokerName  string            `json:"brokerName"`
			BrokerAddrs map[string]string `json:"brokerAddrs"`
		} `json:"brokerAddrTable"`
		ClusterAddrTable map[string][]string `json:"clusterAddrTable"`
	}
	if err := json.Unmarshal(QuoteBareKeys(body), &ci); err != nil {
		return nil, fmt.Errorf("%w: cluster info body: %w", ErrMalformed, err)
	}
	clusterOf := map[string]string{}
	for cluster, names := range ci.ClusterAddrTable {
		for _, n := range names {
			clusterOf[n] = cluster
		}
	}
	var out []BrokerAddr
	for key, bd := range ci.BrokerAddrTable {
		name := bd.BrokerName
		if name == "" {
			name = key
		}
		cluster := bd.Cluster
		if cluster == "" {
			cluster = clusterOf[name]
		}
		for idText, addr := range bd.BrokerAddrs {
			id, err := strconv.ParseInt(strings.TrimSpace(idText), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: cluster info: broker %.64q: id %.32q is not an integer", ErrMalformed, name, idText)
			}
			out = append(out, BrokerAddr{Cluster: cluster, Name: name, ID: id, Addr: addr})
		}
	}
	slices.SortFunc(out, func(a, b BrokerAddr) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// QuoteBareKeys rewrites object keys that are bare integers ({0:"a",-1:"b"})
// as JSON strings ({"0":"a","-1":"b"}), leaving string contents and every
// other token untouched. Input that is not JSON stays not JSON.
func QuoteBareKeys(in []byte) []byte {
	if !bytes.ContainsAny(in, "0123456789") {
		return in
	}
	out := make([]byte, 0, len(in)+16)
	inString, escaped := false, false
	for i := 0; i < len(in); i++ {
		c := in[i]
		out = append(out, c)
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', ',':
			j := i + 1
			for j < len(in) && isSpace(in[j]) {
				j++
			}
			k := j
			if k < len(in) && in[k] == '-' {
				k++
			}
			d := k
			for k < len(in) && in[k] >= '0' && in[k] <= '9' {
				k++
			}
			if k == d {
				continue
			}
			e := k
			for e < len(in) && isSpace(in[e]) {
				e++
			}
			if e < len(in) && in[e] == ':' {
				out = append(out, in[i+1:j]...)
				out = append(out, '"')
				out = append(out, in[j:k]...)
				out = append(out, '"')
				i = k - 1
			}
		}
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
