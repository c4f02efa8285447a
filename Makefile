# nodeup: one static binary. `make demo` runs the main job, `make test` every test.
SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/nodeup/nodeup/cli.Version=$(VERSION)
PKGS    := ./...
# Debian's interpreter: python3-msgpack, python3-cloudpickle (the Python SDK)
# and python3-distributed (make compare) install into it.
PYTHON  ?= /usr/bin/python3

.PHONY: all build test vet fmt-check unit race e2e python-test fuzz demo bench bench-python compare clean check-long chaos

all: build

# The NVML GPU helper (gpu/nvmlhelper) needs cgo; it is built first and
# embedded into the static bin/nodeup with -tags gpuhelper (docs/gpus.md).
GPU_HELPER := gpu/embedded/gpu-helper
# urfave_cli_no_docs leaves out urfave/cli's man-page and Markdown writers,
# which nodeup never calls, and with them md2man and blackfriday (about
# 0.5 MiB of an idle node's resident memory).
BUILD_TAGS := urfave_cli_no_docs

## build: statically linked bin/nodeup (CGO_ENABLED=0) with the NVML GPU helper (cgo, libc only) embedded; without gcc, without the helper
build:
	@set -e; tags=$(BUILD_TAGS); cc=$$($(GO) env CC); \
	if command -v "$${cc%% *}" >/dev/null 2>&1; then \
		mkdir -p $(dir $(GPU_HELPER)); \
		echo "CGO_ENABLED=1 $(GO) build -trimpath -ldflags '-s -w' -o $(GPU_HELPER) ./gpu/nvmlhelper"; \
		CGO_ENABLED=1 $(GO) build -trimpath -ldflags '-s -w' -o $(GPU_HELPER) ./gpu/nvmlhelper; \
		tags=$$tags,gpuhelper; \
	else \
		echo "note: no C compiler ($$cc) found: bin/nodeup is built without the NVML GPU helper (GPUs come from nvidia-smi or --num-gpus)"; \
	fi; \
	echo "CGO_ENABLED=0 $(GO) build -tags '$$tags' -trimpath -ldflags '$(LDFLAGS)' -o bin/nodeup ."; \
	CGO_ENABLED=0 $(GO) build -tags "$$tags" -trimpath -ldflags '$(LDFLAGS)' -o bin/nodeup .
	@$(GO) run ./internal/elfstatic bin/nodeup

## test: vet, format check, unit and in-process cluster tests under the race detector, process-level tests, the Python SDK's tests
test: vet fmt-check race e2e python-test

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:" $$out >&2; exit 1; fi

race:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v /e2e)

e2e:
	set -o pipefail; $(GO) test -count=1 -timeout 20m -v ./e2e 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go| {8})'

## python-test: the Python SDK's pytest suite (python/tests) against real nodes of bin/nodeup;
## needs Debian's python3-msgpack, python3-cloudpickle, python3-pytest and python3-numpy for $(PYTHON) (.ci/run installs them)
python-test: build
	@$(PYTHON) -c 'import msgpack, cloudpickle, pytest, numpy' || { echo "python-test needs $(PYTHON) with msgpack, cloudpickle, pytest and numpy: apt-get install python3-msgpack python3-cloudpickle python3-pytest python3-numpy" >&2; exit 1; }
	$(PYTHON) -m pytest -q -p no:cacheprovider python/tests

## check-long: the scheduler invariant checker's long randomized run for CHECK_DURATION (default 5m; docs/checker.md)
CHECK_DURATION ?= 5m
check-long:
	NODEUP_CHECK_DURATION=$(CHECK_DURATION) $(GO) test -count=1 -timeout 60m -run TestLong -v ./check

## chaos: the chaos suite (e2e/chaos_*_test.go, docs/chaos.md): a workload on process clusters through leader kill, freeze, partition and netem (network namespaces: Linux, root), 60 s of hostile frames, a full restart, 5 nodes with 3 voters, a rolling restart, driver kill -9 and a soak (NODEUP_SOAK, default 90s); about 10 minutes
chaos: build
	set -o pipefail; NODEUP_CHAOS=1 $(GO) test -count=1 -timeout 30m -v -run '^(TestChaos|TestDriverKill9FateSharing$$)' ./e2e 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go| {8})'

## fuzz: run each fuzzer for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./rpc -run=NONE -fuzz=FuzzReadFrame -fuzztime=$(FUZZTIME)
	$(GO) test ./rpc -run=NONE -fuzz=FuzzReadBulk -fuzztime=$(FUZZTIME)
	$(GO) test ./rpc -run=NONE -fuzz='^FuzzServerHostileFrames$$' -fuzztime=$(FUZZTIME)
	$(GO) test ./internal/mpsafe -run=NONE -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME)
	$(GO) test ./store -run=NONE -fuzz=FuzzApply -fuzztime=$(FUZZTIME)
	$(GO) test ./sched -run=NONE -fuzz=FuzzParseResources -fuzztime=$(FUZZTIME)
	$(GO) test ./gpu -run=NONE -fuzz='^FuzzParseSMI$$' -fuzztime=$(FUZZTIME)
	$(GO) test ./gpu -run=NONE -fuzz='^FuzzReadFrame$$' -fuzztime=$(FUZZTIME)
	# A live secure node's background goroutines make coverage differ from
	# run to run, so minimizing "new" inputs would never end: skip it.
	$(GO) test ./cluster -run=NONE -fuzz='^FuzzTLSListener$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=0x

## demo: a 3-node cluster on 127.0.0.1 (one node with TPU-v3=2), the wordcount job on it, status, then stop
demo: build
	CGO_ENABLED=0 $(GO) build -o bin/wordcount ./examples/wordcount
	bash scripts/demo.sh

## bench: nodeup's microbenchmark suite on an embedded node (docs/benchmarks.md)
bench: build
	bin/nodeup bench

## compare: nodeup bench and the Dask peer (bench/peers/) on this machine, then one table.
## Installs Debian's python3-distributed when missing (needs root); not part of `make test`.
compare: build
	@$(PYTHON) -c 'import distributed, numpy' 2>/dev/null || { \
	  echo "installing Dask (python3-distributed) with apt-get" >&2; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-distributed python3-numpy; }
	bin/nodeup bench --json > bin/bench-nodeup.json || echo "warning: some nodeup metrics failed (see bin/bench-nodeup.json)" >&2
	$(PYTHON) bench/peers/peer_dask.py --out bin/bench-dask.json || echo "warning: some Dask metrics failed (see bin/bench-dask.json)" >&2
	$(PYTHON) bench/peers/compare.py bin/bench-nodeup.json bin/bench-dask.json

## bench-python: the Python SDK's benchmarks (nodeup bench --python) and the Dask peer on the same metrics, then one table.
## Installs Debian's python3-distributed when missing (needs root); not part of `make test`.
PY_METRICS := ^(single_client_tasks_sync|single_client_tasks_async|1_1_actor_calls_sync|1_1_actor_calls_async|single_client_put_gigabytes|single_client_get_calls)$$
bench-python: build
	@$(PYTHON) -c 'import distributed, numpy' 2>/dev/null || { \
	  echo "installing Dask (python3-distributed) with apt-get" >&2; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-distributed python3-numpy; }
	NODEUP_ADDRESS= bin/nodeup bench --python --python-interpreter $(PYTHON) --json > bin/bench-python.json
	$(PYTHON) bench/peers/peer_dask.py --filter '$(PY_METRICS)' --out bin/bench-dask-python.json || echo "warning: some Dask metrics failed (see bin/bench-dask-python.json)" >&2
	$(PYTHON) bench/peers/compare.py bin/bench-python.json bin/bench-dask-python.json

clean:
	rm -rf bin $(GPU_HELPER)
