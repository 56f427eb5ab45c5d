package replies

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stall-exporter/stall_exporter/collector/remote"
	"github.com/stall-exporter/stall_exporter/internal/scan"
)

// Info is a parsed INFO reply (any combination of sections).
type Info struct {
	// Fields holds every "key:value" line outside commandstats and
	// keyspace, e.g. "used_memory" → "1048576".
	Fields map[string]string
	// Commands is the commandstats section: one entry per command that was
	// called since start or CONFIG RESETSTAT. Names are lower case; Redis
	// 7.0+ reports subcommands as "container|sub" (e.g. "cluster|nodes").
	Commands []CommandStat
	// Keyspace lists databases with keys ("db0:keys=…").
	Keyspace []DBStat
	// Replicas lists connected replicas from the replication section
	// ("slave0:ip=…,port=…,state=online,…", 2.8+).
	Replicas []Replica
	// Malformed counts lines that could not be read.
	Malformed int
	// Dropped counts lines beyond MaxInfoFields, MaxInfoCommands or
	// MaxInfoDatabases, which are not parsed.
	Dropped int
}

// Bounds of what one INFO reply is parsed into, far above any real server
// and far below what a hostile one could send within the reply limit: a
// 500 kB reply of "f1:1" lines would otherwise be a map of 70,000 fields
// (16 MB), and of commandstats lines 20,000 series.
const (
	MaxInfoFields    = 1000  // key:value fields; 7.x INFO everything has about 180
	MaxInfoCommands  = 1000  // commandstats lines; 7.x has about 380 commands and subcommands
	MaxInfoDatabases = 10000 // keyspace lines; one per non-empty database
)

// CommandStat is one "cmdstat_<name>:calls=…,usec=…" line.
type CommandStat struct {
	Name  string
	Calls uint64 // calls since start or CONFIG RESETSTAT
	Usec  uint64 // total CPU time spent executing it, microseconds
}

// DBStat is one keyspace line.
type DBStat struct {
	Index int
	Keys  uint64
}

// Replica is one connected replica as the master reports it.
type Replica struct {
	IP    string
	Port  int
	State string // online, wait_bgsave, send_bulk …
}

// ParseInfo parses an INFO reply. Both CRLF and LF line ends are accepted.
func ParseInfo(s string) Info {
	in := Info{Fields: make(map[string]string, 128)}
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			in.Malformed++
			continue
		}
		key, val := line[:colon], line[colon+1:]
		isCmd := strings.HasPrefix(key, "cmdstat_")
		isDB := strings.HasPrefix(key, "db") && allDigits(key[2:])
		_, known := in.Fields[key]
		switch {
		case isCmd && len(in.Commands) >= MaxInfoCommands,
			isDB && len(in.Keyspace) >= MaxInfoDatabases,
			!isCmd && !isDB && !known && len(in.Fields) >= MaxInfoFields:
			in.Dropped++
		case isCmd:
			cs, ok := parseCommandStat(key[len("cmdstat_"):], val)
			if !ok {
				in.Malformed++
				continue
			}
			in.Commands = append(in.Commands, cs)
		case isDB:
			idx, _ := strconv.Atoi(key[2:])
			keys, ok := scan.Uint(kv(val, "keys"))
			if !ok {
				in.Malformed++
				continue
			}
			in.Keyspace = append(in.Keyspace, DBStat{Index: idx, Keys: keys})
		case strings.HasPrefix(key, "slave") && allDigits(key[5:]) && strings.Contains(val, "ip="):
			port, err := strconv.Atoi(kv(val, "port"))
			ip := kv(val, "ip")
			if err != nil || ip == "" {
				in.Malformed++
				continue
			}
			in.Replicas = append(in.Replicas, Replica{IP: ip, Port: port, State: kv(val, "state")})
			in.Fields[key] = val
		default:
			in.Fields[key] = val
		}
	}
	return in
}

func parseCommandStat(name, val string) (CommandStat, bool) {
	if name == "" {
		return CommandStat{}, false
	}
	calls, ok1 := scan.Uint(kv(val, "calls"))
	usec, ok2 := scan.Uint(kv(val, "usec"))
	if !ok1 || !ok2 {
		return CommandStat{}, false
	}
	return CommandStat{Name: strings.ToLower(name), Calls: calls, Usec: usec}, true
}

// kv returns the value of key in a "k1=v1,k2=v2" list, or "".
func kv(list, key string) string {
	for item := range strings.SplitSeq(list, ",") {
		if len(item) > len(key) && item[len(key)] == '=' && item[:len(key)] == key {
			return item[len(key)+1:]
		}
	}
	return ""
}

// Number reads a numeric field, the one reader of INFO's numbers: a plain
// number, or a percentage as INFO writes its *_perc fields ("12.50%" is
// 12.5). present is false for an absent field, which is not an error
// (versions differ); err says why a present one is not a number, for the
// caller to count as bad input.
func (in Info) Number(key string) (v float64, present bool, err error) {
	s, present := in.Fields[key]
	if !present {
		return 0, false, nil
	}
	v, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, true, fmt.Errorf("INFO %s is not a number: %s", key, remote.Shown(s))
	}
	return v, true, nil
}

// Version returns redis_version ("7.2.4") as major, minor: 7, 2; 0, 0 when
// absent or unreadable.
func (in Info) Version() (major, minor int) {
	parts := strings.SplitN(in.Fields["redis_version"], ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return major, minor
}

// AtLeast reports whether version (major, minor) is ≥ (wantMajor, wantMinor).
func AtLeast(major, minor, wantMajor, wantMinor int) bool {
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}
