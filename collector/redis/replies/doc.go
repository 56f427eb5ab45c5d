// Package replies parses the text replies of the Redis commands the redis
// collector sends — INFO (including commandstats and keyspace), CLIENT LIST,
// CONFIG GET client-output-buffer-limit and MEMORY STATS — for every server
// version from 2.4 to 8.x. Parsers never panic on malformed input: they skip
// what they cannot read and count it in a Malformed field so the caller can
// report it (stall_collector_parse_errors_total).
//
// Formats are taken from the Redis command documentation: INFO is
// "key:value" lines grouped under "# Section" headers and terminated by CRLF;
// CLIENT LIST is one line per client of space-separated "field=value" pairs,
// where the set and order of fields grew over versions.
package replies
