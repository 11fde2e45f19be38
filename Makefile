# cri-compose: a CRI runtime on Docker Engine. `make run` and `make test` are
# all a fresh machine needs: both start a Docker Engine first (installing
# Debian's docker.io if it is missing).

GO ?= go
SOCKET ?= /run/cri-compose/cri-compose.sock
ENDPOINT := unix://$(SOCKET)
# Extra flags for bin/cri-compose in `make run`.
RUN_ARGS ?=
TEST_TIMEOUT ?= 20m
TEST_FLAGS ?=

# Binaries: cmd/cri-compose, and cmd/vk-cri once it has Go files.
CMDS := ./cmd/cri-compose $(if $(wildcard cmd/vk-cri/*.go),./cmd/vk-cri)

.PHONY: all build pause run test test-e2e lint bench ensure-docker ensure-tools clean help

all: build

help:
	@echo 'make build     build $(CMDS) into bin/'
	@echo 'make run       start Docker if needed, build, run bin/cri-compose on $(ENDPOINT)'
	@echo 'make test      start Docker if needed, install test tools, go vet, go test -race ./...'
	@echo 'make test-e2e  the end-to-end tests (test/e2e)'
	@echo 'make lint      gofmt and go vet'
	@echo 'make bench     the benchmarks (test/bench)'
	@echo 'make pause     rebuild pkg/pause/pause.bin from cmd/pause (commit the result)'

build:
	$(GO) build -o bin/ $(CMDS)

# The pause binary is committed so that a fresh clone builds without this
# step; run it after changing cmd/pause, and commit pkg/pause/pause.bin.
pause:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w -buildid=' -o pkg/pause/pause.bin ./cmd/pause
	@ls -l pkg/pause/pause.bin
	@echo "pause image: localhost/cri-compose/pause:$$(sha256sum pkg/pause/pause.bin | cut -c1-12)"

ensure-docker:
	@bash hack/ensure-docker.sh

ensure-tools:
	@bash hack/ensure-tools.sh

run: ensure-docker build
	@mkdir -p $(dir $(SOCKET))
	@echo "cri-compose listens on $(ENDPOINT)"
	@echo "try, in another terminal:  $(GO) tool crictl --runtime-endpoint $(ENDPOINT) pods"
	./bin/cri-compose --listen $(ENDPOINT) $(RUN_ARGS)

test: ensure-docker ensure-tools
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

test-e2e: ensure-docker ensure-tools
	@if [ -d test/e2e ]; then \
		echo '$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./test/e2e/...'; \
		$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./test/e2e/...; \
	else \
		echo 'test-e2e: no test/e2e yet, nothing to run'; \
	fi

lint:
	@files="$$(git ls-files -co --exclude-standard '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')"; \
	out="$$(if [ -n "$$files" ]; then gofmt -l $$files; fi)"; \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench: ensure-docker ensure-tools
	@if [ -d test/bench ]; then \
		echo "$(GO) test -run '^\$$' -bench . -benchtime 20x -timeout $(TEST_TIMEOUT) ./test/bench/..."; \
		$(GO) test -run '^$$' -bench . -benchtime 20x -timeout $(TEST_TIMEOUT) ./test/bench/...; \
	else \
		echo 'bench: no test/bench yet, nothing to run'; \
	fi

clean:
	rm -rf bin/
