# hookstamp — make help lists the targets.
GO        ?= go
PKGS      ?= ./...
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(HOME)/go/bin/staticcheck)
FUZZTIME  ?= 20s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)

.PHONY: help run build test test-short test-chart lint fmt vet staticcheck fuzz bench bench-quick bench-go chaos soak docker clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## run the gateway on its embedded default (SQLite + memory screen) with a demo upstream on :9000
	$(GO) run ./cmd/gateway serve -config config.yaml -demo-upstream 127.0.0.1:9000

build: ## build bin/gateway
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/gateway ./cmd/gateway

test: ## vet, staticcheck, gofmt, then every test with the race detector (needs PostgreSQL, Redis and MariaDB on 127.0.0.1)
	@scripts/check-deps.sh
	$(GO) vet $(PKGS)
	@$(MAKE) --no-print-directory staticcheck
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting (make fmt)"; exit 1)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	@$(MAKE) --no-print-directory test-chart

# deploy/helm is a Go module of its own, so that Helm and the Kubernetes
# modules stay out of the gateway's go.mod (docs/decisions.md, Deployment).
test-chart: ## the Helm chart's tests: vet, staticcheck, render with Helm's library, lint (deploy/helm)
	@test -x "$(STATICCHECK)" || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	cd deploy/helm && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) test -race -count=1 -timeout 20m ./...

test-short: ## the tests without -race, for a quick loop
	$(GO) test -count=1 $(PKGS)

lint: vet staticcheck ## go vet + staticcheck

vet:
	$(GO) vet $(PKGS)

staticcheck:
	@test -x "$(STATICCHECK)" || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) $(PKGS)

fmt: ## gofmt the tree
	gofmt -w .

fuzz: ## run every fuzz target for FUZZTIME each; new failing inputs land in testdata/fuzz
	@scripts/fuzz.sh $(FUZZTIME)

docker: ## build the container image
	docker build --build-arg VERSION=$(VERSION) -t hookstamp:$(VERSION) .

clean:
	rm -rf bin data/*.db data/*.db-* data/*.db.migrate.lock data/*.db.serve.lock

# Chaos and soak (internal/chaos, cmd/chaos): three real gateway processes,
# a Redis and a PostgreSQL database of their own behind fault-injecting
# proxies, simulated providers, an audit of exactly-once. SEED=n replays a run.
CHAOS_DURATION ?= 2m
DURATION       ?= 30m
SEED           ?=

# Built, not run with go run, which turns every failing exit into 1: cmd/chaos
# exits 1 on a violation and 2 when the harness itself could not run.
chaos: ## 2-minute chaos run from SEED (printed); exits 1 on any exactly-once violation, 2 if the harness could not run (needs PostgreSQL, redis-server)
	$(GO) build -o bin/chaos ./cmd/chaos
	bin/chaos -duration $(CHAOS_DURATION) $(if $(SEED),-seed $(SEED))

soak: ## steady mixed load for DURATION (30m) with sparse faults; RSS and goroutines of each gateway must stay flat
	$(GO) build -o bin/chaos ./cmd/chaos
	bin/chaos -soak -duration $(DURATION) $(if $(SEED),-seed $(SEED))

# Load benchmark (bench/, docs/performance.md): a bare Fiber proxy hop, the
# raw rates of PostgreSQL and Redis, and hookstamp in each configuration,
# on loopback, interleaved in one run. Prints the table and the ratios and
# writes bench/results/latest.json and latest.svg. It uses the machine's
# PostgreSQL and Redis (schemas and keys of its own, removed after); the
# numbers mean something only on a quiet machine: BENCH_FLAGS="-wait-load
# 1.5" waits for one.
BENCH_FLAGS ?=

bench: ## load benchmark, full (~30 min: 5M-row ledger, sweeper, 10-minute memory run)
	$(GO) build -o bin/loadbench ./bench/cmd/loadbench
	bin/loadbench $(BENCH_FLAGS)

bench-quick: ## load benchmark, short windows and a 200k-row ledger (about 4 min)
	$(GO) build -o bin/loadbench ./bench/cmd/loadbench
	bin/loadbench -quick $(BENCH_FLAGS)

bench-go: ## Go micro-benchmarks of the hot paths (key extraction, fingerprint, replay, claim, commit, job insert)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/extract/ ./internal/ingress/ ./internal/idempotency/... ./internal/queue/
