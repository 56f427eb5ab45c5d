# stall_exporter — the two commands a user needs are `make run` and `make test`.
GO        ?= go
BINARY    ?= stall_exporter
PKG       := github.com/stall-exporter/stall_exporter
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w \
	-X github.com/prometheus/common/version.Version=$(VERSION) \
	-X github.com/prometheus/common/version.Revision=$(REVISION) \
	-X github.com/prometheus/common/version.Branch=$(BRANCH) \
	-X github.com/prometheus/common/version.BuildUser=$(shell id -un 2>/dev/null)@$(shell hostname 2>/dev/null) \
	-X github.com/prometheus/common/version.BuildDate=$(shell date -u +%Y%m%d-%H:%M:%S)
ARGS      ?=

.PHONY: all build run test test-deps lint fuzz bench bench-capacity golden dashboards clean readme-flags rules rules-doc chart-readme

all: build

## build: static binary (CGO_ENABLED=0)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINARY) .

## run: build and serve this machine's real /proc on the default port (:29110); extra flags via ARGS="..."
run: build
	./$(BINARY) $(ARGS)

## test: install what the tests need, then run every test (unit, integration, end to end) under the race detector:
## the exporter's module and the tooling module (tools/: dashboards, rule replays, deploy files, the live
## chain) side by side
# STALL_TEST_STRICT: under make test a missing tool, root or kernel feature fails its test
# (internal/collectortest/policy.go); a plain `go test` skips it.
test: export STALL_TEST_STRICT := 1
test: test-deps lint
	@$(GO) test -race -count=1 -timeout 15m ./... & exporter=$$!; \
	(cd tools && $(GO) test -race -count=1 -timeout 15m ./...); tools=$$?; \
	wait $$exporter && exit $$tools
	$(MAKE) fuzz

## test-deps: redis-server, prometheus (promtool), alertmanager (amtool) when missing
test-deps:
	./scripts/install-test-deps.sh

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
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
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

## rules: promtool on the alert rules and their replays as committed (`cd tools && go test ./alerts/`
## adds the cross-checks: coverage, conventions, every other alert silent, the lead-time table)
rules:
	promtool check rules alerts/*.yml
	promtool test rules alerts/tests/*.yml

## rules-doc: regenerate the generated dirty-page series of alerts/tests/ (tools/alerts/replay_test.go) and
## the lead-time and baseline tables of docs/alerts.md from alerts/tests/
rules-doc:
	cd tools && $(GO) test -count=1 -run 'TestGeneratedReplays|TestAlertsDoc' ./alerts/ -update

## dashboards: regenerate the Grafana dashboards (dashboards/*.json) from their Go builders (tools/dashboards)
dashboards:
	cd tools && $(GO) generate ./dashboards

## chart-readme: regenerate the values table of deploy/helm/stall-exporter/README.md from the chart's
## values.yaml (tools/e2e/helm_test.go, which fails while the two differ)
chart-readme:
	cd tools && $(GO) test -count=1 -run 'TestHelmChartReadme' ./e2e/ -update

clean:
	rm -f $(BINARY)

## readme-flags: rewrite the flag reference between the markers in README.md from --help
# The help text goes through the environment: awk -v would turn its \\d into \d.
readme-flags: build
	@STALL_HELP="$$(./$(BINARY) --help 2>&1 | sed 's/^usage: [^ ]*/usage: stall_exporter/')" awk \
	  'BEGIN{p=1} /<!-- flags:begin -->/{print; print "```"; print ENVIRON["STALL_HELP"]; print "```"; p=0} /<!-- flags:end -->/{p=1} p' \
	  README.md > README.md.tmp && mv README.md.tmp README.md
