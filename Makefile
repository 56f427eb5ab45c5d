# stall_exporter — the two commands a user needs are `make run` and `make test`.
GO        ?= go
BINARY    ?= stall_exporter
PKG       := github.com/stall-exporter/stall_exporter
# The version is the VERSION file's (no tags needed: a clone may have none); the commit and branch
# tell builds between releases apart. The build date is the commit's time, not the clock's, and
# nothing names the machine or the user: two builds of one commit are byte-identical.
VERSION   ?= $(shell cat VERSION)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS   := -s -w -buildid= \
	-X github.com/prometheus/common/version.Version=$(VERSION) \
	-X github.com/prometheus/common/version.Revision=$(REVISION) \
	-X github.com/prometheus/common/version.Branch=$(BRANCH) \
	-X github.com/prometheus/common/version.BuildDate=$(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y%m%d-%H:%M:%S)
ARGS      ?=

.PHONY: all build release run test test-short test-deps promtool3 lint fuzz bench bench-capacity golden dashboards prometheusrules chart-readme clean readme-flags rules rules-doc

all: build

## build: static binary (CGO_ENABLED=0)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(BINARY) .

## release: the release of VERSION in $(DIST): archives for linux/amd64 and linux/arm64, .deb and .rpm
## (nfpm, run with `go run`), the multi-arch image as an OCI archive (buildah), the Helm chart
## (tools/chartpackage, helm's packager, run with `go run`), sha256sums.txt;
## reproducible (scripts/release.sh; docs/install.md says how to use them)
DIST ?= dist
NFPM ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0
release:
	GO='$(GO)' LDFLAGS='$(LDFLAGS)' VERSION='$(VERSION)' REVISION='$(REVISION)' \
	  SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' DIST='$(DIST)' NFPM='$(NFPM)' ./scripts/release.sh

## run: build and serve this machine's real /proc on the default port (:29110); extra flags via ARGS="..."
run: build
	./$(BINARY) $(ARGS)

## test: install what the tests need, then run every test (unit, integration, end to end) under the race detector:
## the exporter's module and the tooling module (tools/: dashboards, rule replays, deploy files, the live
## chain) side by side, then the fuzz step; ends with what was skipped, not run or failed, and
## `N passed, N failed, N skipped` (scripts/run-tests.sh)
# STALL_TEST_STRICT: under make test a missing tool, root or kernel feature fails its test
# (internal/collectortest/policy.go); a plain `go test` skips it.
# No $(MAKE) in the recipe: make -n runs the lines that name it, and this one runs every test.
test: export STALL_TEST_STRICT := 1
test: test-deps promtool3 lint
	@FUZZ=1 GO='$(GO)' ./scripts/run-tests.sh -race -count=1 -timeout 15m

## test-short: the quick loop: the unit tests and fuzz seed corpora of both modules under `go test -short`;
## no root, no apt-get, no linter, no real service: every test that needs a tool, root or changes to the
## host is left out and listed as skipped. Under a minute on 2 cores once the Go caches are warm.
test-short:
	@GO='$(GO)' ./scripts/run-tests.sh -short

## test-deps: the Debian packages the tests need, when missing (README lists them); starts and stops no service
test-deps:
	./scripts/install-test-deps.sh

## promtool3: a Prometheus 3 promtool, so the rule replays run under both semantics (Debian's promtool is
## 2.42; Prometheus 3.0 made range selectors left-open). No release download: `go install` of the
## version tools/go.mod requires, from the Go module proxy, into a per-user cache shared by every
## clone; afterwards make finds the file (0.1 s). Built with Prometheus' remove_all_sd tag: rule
## checks and replays need no service discovery, and without the cloud SDKs the first build
## downloads and compiles a fraction of the modules. The tests find it through STALL_PROMTOOL3, which
## this Makefile exports (a value from the environment wins).
PROMTOOL3_MODULE  ?= v0.316.0
PROMTOOL3_VERSION ?= 3.16.0
PROMTOOL3_DIR     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/stall_exporter/promtool-$(PROMTOOL3_VERSION)
export STALL_PROMTOOL3 ?= $(PROMTOOL3_DIR)/promtool
promtool3: $(STALL_PROMTOOL3)
$(STALL_PROMTOOL3):
	GOBIN=$(PROMTOOL3_DIR) $(GO) install -trimpath -tags remove_all_sd \
	  -ldflags '-s -w -X github.com/prometheus/common/version.Version=$(PROMTOOL3_VERSION)' \
	  github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL3_MODULE)

## lint: golangci-lint (.golangci.yml: gofmt, goimports, go vet, staticcheck and the checks of the
## Prometheus server's configuration that fit here) over both modules; installs the pinned version
## with `go install` when it is missing (about 1.5 minutes of compiling on 2 cores)
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT         := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)/golangci-lint
lint:
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q ' $(GOLANGCI_LINT_VERSION:v%=%) ' || { \
	  echo "installing golangci-lint $(GOLANGCI_LINT_VERSION)"; \
	  $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); }
	$(GOLANGCI_LINT) run ./...
	cd tools && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

## fuzz: run every fuzz target briefly (seed corpora under testdata/fuzz are always run by `go test`).
## The default budget is a count, not a duration: Go 1.26's fuzz coordinator can report a spurious
## "context deadline exceeded" when a duration ends while a starved worker is mid-run (golang/go#75804,
## fixed in Go 1.27); a count has no deadline. `make fuzz FUZZTIME=1m` for a longer exploration.
FUZZTIME ?= 50000x
# FUZZFLAGS: more go test flags; make test adds -json for its summary
FUZZFLAGS ?=
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test $(FUZZFLAGS) -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## bench: benchmarks (results are recorded by hand in docs/benchmarks.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## bench-capacity: the capacity dashboard at fleet scale: 1,000 generated hosts x 30 days in a real
## Prometheus, every panel query timed (HOSTS=, DAYS=, RUNS=; VM=1 also against VictoriaMetrics);
## figures in docs/benchmarks.md
bench-capacity: test-deps
	./scripts/capacity-bench.sh

## golden: regenerate the checked-in end-to-end fixture output
golden:
	$(GO) test -count=1 -run TestGolden . -update

## rules: promtool check rules and test rules on alerts/ under Prometheus 2 (promtool on PATH) and 3
## (make promtool3), each replay with the assertions of its version and every other alert asserted
## silent (`cd tools && go test ./alerts/` adds the cross-checks: coverage, conventions, the
## lead-time table). A replay marks what holds for one version only ('# Prometheus N only: why'), so
## a bare `promtool test rules` runs the assertions of both and fails on one of them.
rules: export STALL_TEST_STRICT := 1
rules: promtool3
	cd tools && $(GO) test -count=1 -run '^TestPromtool' ./alerts/

## rules-doc: regenerate the generated dirty-page series of alerts/tests/ (tools/alerts/replay_test.go) and
## the lead-time and baseline tables of docs/alerts.md from alerts/tests/
rules-doc:
	cd tools && $(GO) test -count=1 -run 'TestGeneratedReplays|TestAlertsDoc' ./alerts/ -update

## dashboards: regenerate the Grafana dashboards (dashboards/*.json) from their Go builders (tools/dashboards)
dashboards:
	cd tools && $(GO) generate ./dashboards

## prometheusrules: regenerate the PrometheusRules of deploy/kubernetes/prometheus-operator from alerts/*.yml
## (tools/prometheusrules; a test fails when they are out of step)
prometheusrules:
	cd tools && $(GO) generate ./prometheusrules

## chart-readme: regenerate the values table of deploy/helm/stall-exporter/README.md from the chart's
## values.yaml (tools/e2e/helm_test.go, which fails while the two differ)
chart-readme:
	cd tools && $(GO) test -count=1 -run 'TestHelmChartReadme' ./e2e/ -update

clean:
	rm -rf $(BINARY) .build dist

## readme-flags: rewrite the flag reference between the markers in README.md from --help
# The help text goes through the environment: awk -v would turn its \\d into \d.
readme-flags: build
	@STALL_HELP="$$(./$(BINARY) --help 2>&1 | sed 's/^usage: [^ ]*/usage: stall_exporter/')" awk \
	  'BEGIN{p=1} /<!-- flags:begin -->/{print; print "```"; print ENVIRON["STALL_HELP"]; print "```"; p=0} /<!-- flags:end -->/{p=1} p' \
	  README.md > README.md.tmp && mv README.md.tmp README.md
