# nodeup: one static binary. `make demo` runs the main job, `make test` every test.
SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/nodeup/nodeup/cli.Version=$(VERSION)
PKGS    := ./...

.PHONY: all build test vet fmt-check unit race e2e fuzz demo clean

all: build

## build: statically linked bin/nodeup (CGO_ENABLED=0)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/nodeup .
	@file bin/nodeup 2>/dev/null | grep -q 'statically linked' || { echo "bin/nodeup is not statically linked" >&2; exit 1; }

## test: vet, format check, unit and in-process cluster tests under the race detector, process-level tests
test: vet fmt-check race e2e

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:" $$out >&2; exit 1; fi

race:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v /e2e)

e2e:
	set -o pipefail; $(GO) test -count=1 -timeout 20m -v ./e2e 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go)'

## fuzz: run each fuzzer for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./rpc -run=NONE -fuzz=FuzzReadFrame -fuzztime=$(FUZZTIME)
	$(GO) test ./store -run=NONE -fuzz=FuzzApply -fuzztime=$(FUZZTIME)
	$(GO) test ./sched -run=NONE -fuzz=FuzzParseResources -fuzztime=$(FUZZTIME)

## demo: a 3-node cluster on 127.0.0.1 (one node with TPU-v3=2), the wordcount job on it, status, then stop
demo: build
	CGO_ENABLED=0 $(GO) build -o bin/wordcount ./examples/wordcount
	bash scripts/demo.sh

clean:
	rm -rf bin
