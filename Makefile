# flashgate — `make help` lists the targets.
GO      ?= go
BIN     := bin/flashgate
PKGS    := ./...
# VERSION is what `flashgate version` and flashgate_build_info report;
# without git (or tags) it falls back to the module's build information.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/flashgate/flashgate/internal/buildinfo
# FUZZTIME is how long make test and make fuzz run each fuzz target.
FUZZTIME ?= 10s
# SEED and COUNT are make explore's first seed and number of schedules.
SEED  ?= 1
COUNT ?= 5000

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/flashgate, stamped with git describe's version when there is one.
	$(GO) build -ldflags "-X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)" -o $(BIN) ./cmd/flashgate

.PHONY: demo
demo: build ## Run the zero set-up demo: embedded store, 100 units, 100,000 buyers.
	./$(BIN) demo

.PHONY: demo-fair
demo-fair: build ## Run a fair drop on the embedded store: 3,000 people and 20 scalpers (15 accounts each) through a 5 s pre-queue for 100 units; units by group, the seed check, the invariants.
	./$(BIN) demo --fair

.PHONY: demo-draw
demo-draw: build ## Run a draw on the embedded store and the stand-in provider: 20,000 entries over three sizes for 300 units; winners per size, the seed check, the invariants.
	./$(BIN) demo --draw

.PHONY: test
test: ## go vet, then go test -race over everything against throwaway Redis and PostgreSQL, then every fuzz target for FUZZTIME (make fuzz).
	$(GO) vet $(PKGS)
	scripts/with-testenv.sh $(GO) test -race -count=1 -timeout 20m $(PKGS)
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME)

.PHONY: test-edge
test-edge: ## The edge under load: cluster.sh with nginx, a Sentinel failover mid-crowd, 20,000 buyers from one address, --sale-rate over 2 gateways (about two minutes; needs nginx).
	FLASHGATE_EDGE_TEST=1 $(GO) test -count=1 -timeout 5m -run '^TestEdge$$' -v ./systemtest

.PHONY: test-short
test-short: ## Fast tests only (no race detector, no real servers required).
	$(GO) test -short $(PKGS)

.PHONY: lint
lint: ## gofmt check, go vet, go mod tidy -diff (go.mod and go.sum tidy), and the import graph's rules (scripts/importgraph.sh).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	scripts/importgraph.sh

.PHONY: bench
bench: ## Every benchmark in one run (Go, wrk vs bare, flash crowd vs row lock, RSS, expiry storm, drop, draw close) into docs/BENCHMARKS.md.
	scripts/with-testenv.sh $(GO) run ./cmd/flashgate-bench

.PHONY: bench-http
bench-http: ## Only bench's wrk part (sold out, not started, item page, purchase, fair-queue poll and not admitted vs a bare server), printed, no files written.
	PHASES=http BENCH_OUT=/dev/stdout BENCH_README= scripts/with-testenv.sh $(GO) run ./cmd/flashgate-bench

.PHONY: fuzz
fuzz: ## Every fuzz target (router, token verifier against golang-jwt, bearer shape, JSON escaper) for FUZZTIME each (10s; make fuzz FUZZTIME=10m for longer); failing inputs land in testdata/fuzz/.
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME)

.PHONY: faults
faults: ## Fault suite: the split deployment as real processes under faults, into docs/RELIABILITY.md (FAULTS=name runs one scenario, into bin/; FAULTS_RUNS=N runs each chosen scenario N times); drawings of rejected histories go to bin/faults.
	@mkdir -p bin/faults
	FAULTS_REPORT=$(or $(FAULTS_REPORT),$(if $(FAULTS),$(CURDIR)/bin/RELIABILITY.md,$(CURDIR)/docs/RELIABILITY.md)) \
		$(GO) test -tags faults -count=1 -timeout 20m -v -artifacts -outputdir $(CURDIR)/bin/faults -run 'TestFaults/$(if $(FAULTS),^$(FAULTS)$$,)' ./systemtest/faults

.PHONY: explore
explore: ## The interleaving explorer's long run: COUNT schedules (5000) from seed SEED (1) on SQLite and PostgreSQL (make explore SEED=7 COUNT=10000); each broken invariant is printed with its seed and schedule.
	scripts/with-testenv.sh $(GO) test -count=1 -timeout 120m -v -run '^TestExplore$$' ./systemtest/explore -from=$(SEED) -schedules=$(COUNT) -corpus=false

.PHONY: deploy-check
deploy-check: ## Validate deploy/ without a cluster: NetworkPolicy flows (cyclonus), strict Kubernetes 1.32 schemas, nginx (tokens, Debian's stock layout), Redis and Sentinel configs, Prometheus rules and scrape job, scripts.
	deploy/check.sh

.PHONY: clean
clean: ## Remove build output.
	rm -rf bin
