# Developer commands. `make help` lists them.
GO ?= go
FUZZTIME ?= 30s
SIM_COMMANDS ?= 10000000
BENCHTIME ?= 1s
COUNT ?= 1
SOAK_TARGETS ?= 1000000

.PHONY: help test test/race bench bench-node bench-memory fuzz fuzz-short mutants sim soak lint verify tidy proto

help: ## list targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-12s %s\n", $$1, $$2}'

test: ## run the README's test command
	$(GO) test ./...

test/race: ## run all tests with the race detector (what CI runs)
	$(GO) test -race ./...

bench: ## run the benchmarks (BENCHTIME, COUNT) with allocation figures
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(COUNT) ./...

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

sim: ## run a long deterministic simulation (SIM_COMMANDS commands)
	$(GO) test ./distributedtest/sim -run TestSimLong -sim.commands $(SIM_COMMANDS) -timeout 0 -v

BENCH_NODE_FLAGS ?=
bench-node: ## every bench mode (single calls, fixed rate, 1024 workers, 64 KiB results, resident records, idle long-polls) in one sitting, with ratios to the batched default (minutes; BENCH_NODE_FLAGS e.g. --embedded=false --server URL --key K --node-metrics URL/metrics: the node's own CPU per task too)
	$(GO) build -o bin/termivar-coord-bench ./cmd/termivar-coord
	./bin/termivar-coord-bench bench --suite $(BENCH_NODE_FLAGS)

bench-memory: ## measure RSS per task record and per result byte with the real binary (minutes)
	TERMIVAR_MEMORY_BENCH=1 $(GO) test -run '^$$' -bench BenchmarkServe_Memory -benchtime 1x -timeout 30m ./cmd/termivar-coord

soak: ## run the soak test at SOAK_TARGETS targets (default 1 000 000; CI runs 20 000 in go test)
	TERMIVAR_SOAK_TARGETS=$(SOAK_TARGETS) $(GO) test ./cmd/termivar-coord -run '^TestSoak$$' -count 1 -timeout 0 -v

lint: ## go vet, gofmt and staticcheck
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

verify: ## formatting, go.mod tidiness and generated code are up to date (regenerates gen/)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) mod tidy -diff
	sh scripts/check-gen.sh

mutants: ## mutation test: every mutant in scripts/mutants.txt must fail the tests
	$(GO) run ./scripts/mutants

fuzz-short: ## run every fuzz target for a few seconds (what CI runs)
	sh scripts/fuzz-short.sh

tidy: ## go mod tidy
	$(GO) mod tidy

proto: ## regenerate gen/ from proto/ (needs protoc, protoc-gen-go, protoc-gen-connect-go; see docs/node.md)
	$(GO) generate ./proto
