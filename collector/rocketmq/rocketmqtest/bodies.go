package rocketmqtest

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"

	"github.com/stall-exporter/stall_exporter/collector/rocketmq/remoting"
)

// KVTableBody encodes a runtime-info table as the broker does:
// {"table":{"key":"value",…}} with every value a string.
func KVTableBody(kv map[string]string) []byte {
	b, _ := json.Marshal(struct {
		Table map[string]string `json:"table"`
	}{kv})
	return b
}

// ClusterInfoBody encodes a topology as fastjson does: brokerAddrs keys are
// bare integers ({0:"10.0.0.1:10911"}), which encoding/json cannot read.
func ClusterInfoBody(brokers []remoting.BrokerAddr) []byte {
	type group struct {
		BrokerAddrs        map[string]string `json:"brokerAddrs"`
		BrokerName         string            `json:"brokerName"`
		Cluster            string            `json:"cluster"`
		EnableActingMaster bool              `json:"enableActingMaster"`
	}
	groups := map[string]*group{}
	clusters := map[string][]string{}
	for _, b := range brokers {
		g := groups[b.Name]
		if g == nil {
			g = &group{BrokerAddrs: map[string]string{}, BrokerName: b.Name, Cluster: b.Cluster}
			groups[b.Name] = g
			clusters[b.Cluster] = append(clusters[b.Cluster], b.Name)
		}
		g.BrokerAddrs[strconv.FormatInt(b.ID, 10)] = b.Addr
	}
	body, _ := json.Marshal(map[string]any{"brokerAddrTable": groups, "clusterAddrTable": clusters})
	return idKey.ReplaceAll(body, []byte(`$1$2:"`))
}

// idKey is a quoted integer key whose value is a string: only the broker
// ids of brokerAddrs (broker and cluster names map to an object and an
// array).
var idKey = regexp.MustCompile(`([{,])"(-?[0-9]+)":"`)

// Distribution formats 13 putMessageDistributeTime counts the way the
// broker does: "[<=0ms]:a [0~10ms]:b … [10s~]:m " with a trailing space.
func Distribution(counts [13]uint64) string {
	var sb strings.Builder
	for i, l := range remoting.DistributionLabels {
		sb.WriteString("[" + l + "]:" + strconv.FormatUint(counts[i], 10) + " ")
	}
	return sb.String()
}

// The reference data (testdata/README.md says what each file holds).
var (
	//go:embed testdata/runtime-info-4.9.7.json
	runtime49Body []byte
	//go:embed testdata/runtime-info-5.3.3.json
	runtime5Body []byte
	// Config49 is a GET_BROKER_CONFIG text of a 4.9 broker with the risky
	// settings of incident 3 (warmMapedFileEnable=true,
	// transferMsgByHeap=false), unsorted.
	//go:embed testdata/broker-config-4.9.properties
	Config49 string

	runtime49 = mustKVTable(runtime49Body)
	runtime5  = mustKVTable(runtime5Body)
)

func mustKVTable(body []byte) map[string]string {
	kv, err := remoting.ParseKVTable(body)
	if err != nil {
		panic(fmt.Sprintf("rocketmqtest reference data: %v", err))
	}
	return kv
}

// Runtime49 is a GET_BROKER_RUNTIME_INFO table of a 4.9.7 broker under light
// load, with the 4.x spelling getTransferedTps, brokerVersion present, the
// transient store pool disabled (2147483647) and a flush backlog of
// "12.3 MiB". Each call returns a new copy.
func Runtime49() map[string]string { return maps.Clone(runtime49) }

// Runtime5 is a table of a 5.3.3+ broker: getTransferredTps, no
// brokerVersion, brokerActive, litePull and ack pools, timer keys, the
// transient store pool enabled with 3 free buffers and a commit backlog, and
// a flush backlog written with a comma decimal point ("1,5 GiB"). Each call
// returns a new copy.
func Runtime5() map[string]string { return maps.Clone(runtime5) }
