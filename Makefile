# The README's two commands are `make run` and `make test`.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/mcpgate/mcpgate/server.Version=$(VERSION)

.PHONY: build run test vet bench

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/mcpgate ./cmd/mcpgate

# Runs the gateway on :8080 with a private PostgreSQL in ./data.
run: build
	./bin/mcpgate serve

test: vet
	$(GO) test -race -count=1 -timeout 25m ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt would change the files above'; exit 1; }
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20x ./sandbox/ ./docker/ ./catalog/ ./gateway/
