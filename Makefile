# rustle: make test runs every test, installing what it needs first.
GO        ?= go
FUZZTIME  ?= 3s
BENCHFLAGS ?=

.PHONY: all build test deps vet cross fmt-check unit fuzz-short fuzz-long bench helm-lint image clean

all: build

build:
	$(GO) build -trimpath -buildvcs=auto -o rustle ./cmd/rustle

## test: everything CI runs: dependencies, formatting, vet, the other
## platforms' builds, race tests, short fuzzing, and helm lint/template of
## the chart.
test: deps fmt-check vet cross unit fuzz-short helm-lint

## deps: Debian packages and Go modules the tests need (apt-get only when missing).
deps:
	@bash scripts/deps.sh
	$(GO) mod download

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## cross: go build and go vet (test files included) of every package for
##        each platform in CROSS (Linux, macOS, Windows, FreeBSD on amd64
##        and arm64), so that the portable fallbacks keep compiling. Builds
##        only fill the build cache; nothing is written to the tree.
CROSS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64 freebsd/amd64 freebsd/arm64
cross:
	@set -e; for p in $(CROSS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		echo "GOOS=$$os GOARCH=$$arch: $(GO) build ./... && $(GO) vet ./..."; \
		GOOS=$$os GOARCH=$$arch $(GO) build ./...; \
		GOOS=$$os GOARCH=$$arch $(GO) vet ./...; \
	done

## unit: every test, race detector on; then the hostile-input suite's counts
##       (e2e/hostile_test.go), which go test does not show for passing tests.
unit:
	@f=$$(mktemp); echo "$(GO) test -race -count=1 -timeout 20m ./..."; \
	RUSTLE_HOSTILE_SUMMARY=$$f $(GO) test -race -count=1 -timeout 20m ./...; rc=$$?; \
	cat $$f; rm -f $$f; exit $$rc

## fuzz-short: every native fuzz target for FUZZTIME (3s) each.
fuzz-short:
	@bash scripts/fuzz.sh $(FUZZTIME)

## fuzz-long: the same for 2 minutes each.
fuzz-long:
	@bash scripts/fuzz.sh 2m

## bench: the benchmark campaign, rustle against Squid and Tinyproxy (bench/README.md).
##        make bench BENCHFLAGS="-quick"  or  BENCHFLAGS="-quick -tests http-1k,connect-bulk"
bench:
	$(GO) run ./bench/campaign $(BENCHFLAGS)

## helm-lint: helm lint and helm template on deploy/helm/rustle, and rustle
## check on the rendered config. helm comes from the Go module proxy: the
## first run builds it (about 3 minutes from a cold cache), later runs take
## seconds.
HELM_VERSION ?= v3.22.0
helm-lint:
	HELM_VERSION=$(HELM_VERSION) bash deploy/helm/check.sh

## image: the FROM scratch container image with podman (or buildah).
IMAGE ?= localhost/rustle:dev
image:
	bash deploy/container/build.sh $(IMAGE)

clean:
	rm -f rustle
