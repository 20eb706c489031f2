# Developer shortcuts. The README's two commands are scripts/run.sh and
# scripts/test.sh, which need nothing but bash on a fresh Debian 12.

GO ?= go

.PHONY: all build agent template run test unit proto fmt vet

all: build

build:
	mkdir -p bin
	$(GO) build -o bin/spaced ./cmd/spaced
	$(GO) build -o bin/space ./cmd/space
	scripts/build-spawn-helper.sh
	CGO_ENABLED=0 $(GO) build -o bin/space-agent ./cmd/space-agent
	CGO_ENABLED=0 $(GO) build -o bin/space-interpreter ./cmd/space-interpreter
	CGO_ENABLED=0 $(GO) build -o bin/space-mcp-gateway ./cmd/space-mcp-gateway

template: build
	scripts/build-template.sh --agent bin/space-agent

run:
	scripts/run.sh

test:
	scripts/test.sh

# Unit tests only: no root, runsc or template needed. Tests that need them
# skip, unless SPACE_TEST_STRICT=1 is set (scripts/test.sh sets it).
unit:
	$(GO) test -race ./internal/... ./client/... ./cmd/...

proto:
	api/generate.sh

fmt:
	gofmt -w cmd internal client test

vet:
	$(GO) vet ./...
