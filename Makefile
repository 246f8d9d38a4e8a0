# The README's two commands are `make run` and `make test`.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/mcpgate/mcpgate/server.Version=$(VERSION)

.PHONY: build run test vet bench

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/mcpgate ./cmd/mcpgate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/mcpgate-sandbox ./cmd/mcpgate-sandbox

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

# Container images, built with no registry (see the Dockerfile): the binary
# first, then the legacy builder, which needs no buildx.
IMAGE      ?= mcpgate
BASE_IMAGE ?= mcpgate-base:bookworm
DOCKER     ?= docker

.PHONY: image image-full

image:
	CGO_ENABLED=0 $(GO) build -tags timetzdata -trimpath -ldflags '$(LDFLAGS)' -o bin/image/mcpgate ./cmd/mcpgate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/image/mcpgate-sandbox ./cmd/mcpgate-sandbox
	deploy/image-context.sh bin/image/mcpgate bin/image
	DOCKER_BUILDKIT=0 $(DOCKER) build --target slim --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) -t $(IMAGE):latest .

# The base (Debian with node, npm, python3) takes a few minutes the first time.
image-full:
	MCPGATE_BASE_IMAGE=$(BASE_IMAGE) deploy/base/build.sh
	CGO_ENABLED=0 $(GO) build -tags timetzdata -trimpath -ldflags '$(LDFLAGS)' -o bin/image/mcpgate ./cmd/mcpgate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/image/mcpgate-sandbox ./cmd/mcpgate-sandbox
	deploy/image-context.sh bin/image/mcpgate bin/image
	DOCKER_BUILDKIT=0 $(DOCKER) build --target full --build-arg FULL_BASE=$(BASE_IMAGE) --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION)-full -t $(IMAGE):full .
