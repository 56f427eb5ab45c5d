#!/usr/bin/env bash
# Runs the tests whose data is laid out in time (tools/dashboards/fleet: TestPlantedHosts,
# TestRollupsFromRawSeries) with the end of their data moved, through STALL_TEST_END, to every
# hour of a day and across a month's and a year's end, under a local time zone 12:45 hours off
# UTC (no test may read it); prints one line per end and fails if any run failed. Their fixed end
# is what make test uses; this shows that it could be any other.
#
#   scripts/any-hour.sh                       # 24 hours of 2026-03-10 + 6 ends around month and year ends
#   ENDS="2026-12-31T23:41:00Z" scripts/any-hour.sh
#
# Needs promtool, prometheus and redis-server (scripts/install-test-deps.sh); about 25 s per end.
set -euo pipefail
cd "$(dirname "$0")/../tools"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/fleet.test" ./dashboards/fleet

if [ -z "${ENDS:-}" ]; then
	ENDS=$(for h in $(seq -w 0 23); do echo "2026-03-10T$h:00:00Z"; done)
	ENDS="$ENDS 2026-03-31T23:00:00Z 2026-04-01T00:00:00Z 2026-04-01T01:00:00Z"
	ENDS="$ENDS 2026-12-31T22:00:00Z 2026-12-31T23:41:00Z 2027-01-01T00:00:00Z"
fi
failed=0
cd dashboards/fleet
for end in $ENDS; do
	t0=$(date +%s)
	if TZ=Pacific/Chatham STALL_TEST_END=$end STALL_TEST_STRICT=1 "$tmp/fleet.test" -test.count=1 \
		-test.run '^(TestPlantedHosts|TestRollupsFromRawSeries)$' > "$tmp/out" 2>&1; then
		echo "$end ok $(( $(date +%s) - t0 ))s"
	else
		failed=1
		echo "$end FAIL $(( $(date +%s) - t0 ))s"
		grep -E '^\s+\S+_test\.go:[0-9]+: ' "$tmp/out" | head -5
	fi
done
exit $failed
