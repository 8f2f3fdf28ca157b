# flashgate — `make help` lists the targets.
GO      ?= go
BIN     := bin/flashgate
PKGS    := ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/flashgate.
	$(GO) build -o $(BIN) ./cmd/flashgate

.PHONY: demo
demo: build ## Run the zero set-up demo: embedded store, 100 units, 100,000 buyers.
	./$(BIN) demo

.PHONY: test
test: ## go vet, then go test -race over everything against throwaway Redis and PostgreSQL.
	$(GO) vet $(PKGS)
	scripts/with-testenv.sh $(GO) test -race -count=1 -timeout 20m $(PKGS)

.PHONY: test-short
test-short: ## Fast tests only (no race detector, no real servers required).
	$(GO) test -short $(PKGS)

.PHONY: lint
lint: ## go vet and a gofmt check.
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: bench
bench: ## Go benchmarks (real Redis), then wrk on loopback: serve vs a bare fasthttp server.
	scripts/with-testenv.sh $(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	scripts/bench-http.sh

.PHONY: bench-http
bench-http: ## Only the wrk part of bench: (a) sold out, (b) item page, (c) purchase, as ratios to bare fasthttp.
	scripts/bench-http.sh

.PHONY: fuzz
fuzz: ## Fuzz the gateway router for 30s.
	$(GO) test -run '^$$' -fuzz FuzzRouter -fuzztime 30s ./gateway

.PHONY: faults
faults: ## Fault suite: the split deployment as real processes under faults (FAULTS=name runs one scenario).
	@mkdir -p bin
	FAULTS_REPORT=$(or $(FAULTS_REPORT),$(CURDIR)/bin/RELIABILITY.md) \
		$(GO) test -tags faults -count=1 -timeout 20m -v -run 'TestFaults/$(if $(FAULTS),^$(FAULTS)$$,)' ./faults

.PHONY: deploy-check
deploy-check: ## Validate deploy/ (nginx -t, Redis configs, manifests, scripts) without a cluster.
	deploy/check.sh

.PHONY: clean
clean: ## Remove build output.
	rm -rf bin
