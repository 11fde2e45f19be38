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

.PHONY: all build pause run test test-e2e lint bench bench-smoke ensure-docker ensure-tools clean help proto proto-check

all: build

help:
	@echo 'make help      this list (make lint checks that it names every target)'
	@echo 'make all       the same as make build (the default)'
	@echo 'make build     build $(CMDS) into bin/'
	@echo 'make clean     remove bin/'
	@echo 'make run       start Docker if needed, build, run bin/cri-compose on $(ENDPOINT)'
	@echo 'make ensure-docker  start a Docker Engine if none answers (installs Debian'"'"'s docker.io if missing)'
	@echo 'make ensure-tools   install what the tests need from Debian (busybox-static)'
	@echo 'make lint      gofmt, golangci-lint (.golangci.yml) on every module, this list'"'"'s check and the docs'"'"' (hack/check-docs.sh)'
	@echo 'make test      start Docker if needed, install test tools, go vet, go test -race ./... (but test/fault)'
	@echo 'make test-e2e  the end-to-end tests (test/e2e)'
	@echo 'make test-vk   vk-cri'"'"'s end-to-end suite (test/vk: real kube-apiserver and etcd; VK_RUN=regexp)'
	@echo 'make test-networking  cluster networking on two Docker hosts: flanneld, kube-proxy, CoreDNS; Services, DNS, pod to pod (docs/networking.md)'
	@echo 'make conformance-networking  test-networking'"'"'s cluster, then e2e.test'"'"'s [sig-network] [Conformance] specs on it (CONFORMANCE_NETWORKING_FLAGS)'
	@echo 'make test-fault  the fault tests (test/fault) with a CPU hog beside them (FAULT_CPU_HOG busy processes)'
	@echo 'make test-logflood  a container writes 1 GiB at full speed; every line checked in its CRI log'
	@echo 'make test-engines  test/e2e, test/fault, critest and the basic vk-cri flow on this machine'"'"'s engine, then on a current one (ENGINE=current picks it for one target)'
	@echo 'make test-engine-current  a current Docker Engine (dockerd 29, containerd 2; built once) runs privately: busybox, then a pod through cri-compose'
	@echo 'make conformance  critest (cri-tools'"'"' CRI validation suite) against bin/cri-compose, offline'
	@echo 'make conformance-node  Kubernetes'"'"' e2e.test [NodeConformance] specs against vk-cri on cri-compose (CONFORMANCE_NODE_FLAGS; NODE=kubelet: a real kubelet on cri-compose)'
	@echo 'make conformance-node-ci  the part of conformance-node that CI runs (207 of 242 specs, no long probe waits; about 11 minutes)'
	@echo 'make fuzz      every fuzz target for FUZZTIME each (default 10s)'
	@echo 'make churn     the churn test, CI mode (30 pods, leak and memory checks)'
	@echo 'make soak      200 pods churned for 10 minutes, streaming URL expiry, longer fuzz'
	@echo 'make demo      the whole stack: control plane, cri-compose, vk-cri and a sample pod (Ctrl-C stops it)'
	@echo 'make bench     the benchmarks (test/bench; about 18 minutes; BENCHMARKS.md; ENGINE=current: pod start on a current engine)'
	@echo 'make bench-smoke  the same benchmarks and bench-vk, small (a few minutes)'
	@echo 'make bench-remote pod start over ssh, tcp+TLS and the local socket of one engine'
	@echo 'make bench-vk  vk-cri, then kubelet, on cri-compose: pod create -> Running, 50 at once and one at a time; 110 pods at rest'
	@echo 'make pause     rebuild pkg/pause/pause.bin from cmd/pause (commit the result)'
	@echo 'make install   binaries, systemd units, example configs (PREFIX=$(PREFIX), DESTDIR=)'
	@echo 'make install-compose  build Docker Compose v2 once and install it as the docker CLI plugin (root: for every user), so docker compose ls shows pods'
	@echo 'make verify-install  install into a temp DESTDIR and systemd-analyze verify the units'
	@echo 'make docs      regenerate docs/configuration.md from the flags of cri-compose and vk-cri'
	@echo 'make proto     regenerate proto/**/*.pb.go (generators pinned in proto/tools/go.mod)'
	@echo 'make proto-check  buf lint, and fail if the committed *.pb.go are not what make proto generates'

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ $(CMDS)

# The pause binary is committed so that a fresh clone builds without this
# step; run it after changing cmd/pause, and commit pkg/pause/pause.bin.
pause:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w -buildid=' -o pkg/pause/pause.bin ./cmd/pause
	@ls -l pkg/pause/pause.bin
	@echo "pause image: localhost/cri-compose/pause:$$(sha256sum pkg/pause/pause.bin | cut -c1-12)"

# cri-compose's own gRPC API (proto/cricompose/v1): buf, protoc-gen-go and
# protoc-gen-go-grpc are pinned as tools of the module proto/tools, built
# into bin/proto-tools; buf compiles the .proto files itself (no protoc).
# Commit the generated code; proto-check (also run by the test in
# proto/cricompose/v1) fails when it is stale.
proto:
	@GO=$(GO) bash hack/proto.sh

proto-check:
	@GO=$(GO) bash hack/proto.sh --check

ensure-docker:
	@bash hack/ensure-docker.sh

ensure-tools:
	@bash hack/ensure-tools.sh

run: ensure-docker build
	@mkdir -p $(dir $(SOCKET))
	@echo "cri-compose listens on $(ENDPOINT)"
	@echo "try, in another terminal:  $(GO) tool crictl --runtime-endpoint $(ENDPOINT) pods"
	./bin/cri-compose --listen $(ENDPOINT) $(RUN_ARGS)

# test/fault runs in test-fault, under load, not here as well: a quiet run
# proves nothing the loaded one does not.
test: ensure-docker ensure-tools
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $$($(GO) list ./... | grep -v '/test/fault$$')

# ENGINE picks the engine of test-e2e, test-fault, test-vk and conformance:
# machine (the default: this machine's) or current, a current Docker Engine
# (dockerd 29, containerd 2; see test-engine-current) started privately for
# the run, which runs the suite unchanged in the engine's network namespace
# with DOCKER_HOST naming it (test/engines TestSuiteOnCurrentEngine); the
# private engines a suite starts itself are current ones too.
ENGINE ?= machine
ifeq ($(filter $(ENGINE),machine current),)
$(error ENGINE is machine (the default) or current, not $(ENGINE))
endif
in-current-engine = CRI_COMPOSE_ENGINE_CURRENT=1 CRI_COMPOSE_ENGINE=current CRI_COMPOSE_ENGINE_RUN="$(1)" \
	$(GO) test -count=1 -v -timeout 150m -run '^TestSuiteOnCurrentEngine$$' ./test/engines

test-e2e: ensure-docker ensure-tools
ifeq ($(ENGINE),current)
	$(call in-current-engine,$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./test/e2e/...)
else
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./test/e2e/...
endif

# A container writes 1 GiB at full speed; every line is checked in its CRI
# log (test/e2e TestLogFlood; not in `make test`, see README, Guarantees).
FLOOD_BYTES ?= 1073741824
.PHONY: test-logflood
test-logflood: ensure-docker ensure-tools
	$(GO) test -count=1 -timeout 20m -run 'TestLogFlood|TestLogLastLine' -v ./test/e2e/ -args -e2e.flood-bytes=$(FLOOD_BYTES)

# A current Docker Engine beside the machine's: dockerd and containerd at
# the versions test/engine/tools/go.mod pins, built from the Go module proxy
# once into ~/.cache/cri-compose/tools (the first run takes many
# CPU-minutes; GOFLAGS=-p=1 in the environment builds one package at a
# time, for a busy machine), run as a private engine in a network
# namespace of its own (test/privengine, Options.Current).
# TestCurrentEngine checks its API version and runs a busybox container on
# it; TestPodOnCurrentEngine runs cri-compose on it (recursive read-only
# mounts reported and used, a pod's log line, exec, removal).
# The suites that care about the engine, on both: test/e2e, test/fault,
# critest and vk-cri's basic pod flow (ENGINES_VK_RUN), first on this
# machine's engine, then on a current one.
ENGINES_VK_RUN ?= ^(TestNode|TestPod|TestCrashLoop|TestPodSucceeded)$$
.PHONY: test-engines
test-engines:
	$(MAKE) test-e2e test-fault conformance
	$(MAKE) test-vk VK_RUN='$(ENGINES_VK_RUN)'
	$(MAKE) ENGINE=current test-e2e test-fault conformance
	$(MAKE) ENGINE=current test-vk VK_RUN='$(ENGINES_VK_RUN)'

.PHONY: test-engine-current
test-engine-current: ensure-docker ensure-tools
	CRI_COMPOSE_ENGINE_CURRENT=1 $(GO) test -count=1 -v -timeout 90m ./test/engines

# gofmt and golangci-lint (pinned in hack/tools/go.mod, built once into
# ~/.cache/cri-compose/tools) on every module, and the checks that help
# names every target and that the docs and the tree agree: hack/lint.sh.
lint:
	@GO=$(GO) bash hack/lint.sh

# Benchmarks (test/bench; results in BENCHMARKS.md): cri-compose, run as
# its own process, against the same engine calls made directly and against
# `docker compose up -d`, plus list, stats, CPU and memory at scale. They
# print the Go benchmark lines (benchstat reads them) and a summary table.
# Sizes: BENCH_FLAGS, e.g. BENCH_FLAGS='-bench.levels=100 -bench.poll=10s'
# (go test -args -h lists them; BENCH_* variables work too). bench-smoke is
# the same run, small (a few minutes).
BENCH_TIMEOUT ?= 90m
BENCH_FLAGS ?=
BENCH_SMOKE_FLAGS ?= -bench.pods=3 -bench.concurrent=4 -bench.rounds=1 -bench.levels=10,20 -bench.stats-pods=10 -bench.poll=5s -bench.settle=2s -bench.list-calls=50 -bench.log-mib=8 -bench.log-window=5s

# BENCH_RUN picks benchmarks by regexp (BENCH_RUN=PodStart). ENGINE=current
# runs pod start alone on a current engine, in its network namespace: the
# scale benchmark's CPU figures read the machine's dockerd and containerd.
ifeq ($(ENGINE),current)
BENCH_RUN ?= ^BenchmarkPodStart$$
else
BENCH_RUN ?= .
endif
bench: ensure-docker ensure-tools
ifeq ($(ENGINE),current)
	$(call in-current-engine,$(GO) test -run '^$$' -bench '$(BENCH_RUN)' -benchtime 1x -timeout $(BENCH_TIMEOUT) ./test/bench -args $(BENCH_FLAGS))
else
	$(GO) test -run '^$$' -bench '$(BENCH_RUN)' -benchtime 1x -timeout $(BENCH_TIMEOUT) ./test/bench -args $(BENCH_FLAGS)
endif

bench-smoke: ensure-docker ensure-tools
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/bench -args $(BENCH_SMOKE_FLAGS) $(BENCH_FLAGS)
	$(MAKE) bench-vk BENCH_VK_FLAGS='$(BENCH_VK_SMOKE_FLAGS)'

# Pod start over ssh://, tcp+TLS and the local socket of one private engine
# (test/remote): the ratio is the cost of a remote endpoint.
.PHONY: bench-remote
bench-remote: ensure-docker ensure-tools
	$(GO) test -run '^$$' -bench BenchmarkPodStart -benchtime 10x -timeout 20m ./test/remote

# The node benchmarks (test/vk's set-up: real kube-apiserver, cri-compose,
# and the node): pod create -> Running+Ready, 50 pods at once (beside the
# same pods straight through CRI) and one at a time, p50/p99 as a watch sees
# them; then a full node at rest (110 pods with exec probes, 5 minutes):
# CPU of the node, cri-compose, dockerd, containerd and shims, and API
# requests/s (BENCHMARKS.md, "Nodes"). Run for each of BENCH_VK_NODES in
# turn: vk-cri, then a real kubelet on cri-compose. BENCH_VK_PODS sets the
# pods per round, BENCH_VK_RUN picks benchmarks, BENCH_VK_FLAGS adds flags
# (-bench.profile=DIR writes the node's pprof profiles).
BENCH_VK_PODS ?= 50
BENCH_VK_RUN ?= .
BENCH_VK_NODES ?= vk-cri kubelet
BENCH_VK_FLAGS ?=
BENCH_VK_SMOKE_FLAGS ?= -bench.pods=5 -bench.rest-pods=10 -bench.rest-window=30s -bench.rest-settle=5s -bench.profile-span=5s
.PHONY: bench-vk
bench-vk: ensure-docker ensure-tools
	@set -e; for node in $(BENCH_VK_NODES); do \
		echo "bench-vk: node $$node"; \
		(cd test/vk && VK_NODE=$$node VK_E2E_RACE=0 VK_E2E_ARGS='--max-pods=110' GOWORK=off $(GO) test -count=1 -run '^$$' \
			-bench '$(BENCH_VK_RUN)' -benchtime 1x -timeout 60m . -args -bench.pods=$(BENCH_VK_PODS) $(BENCH_VK_FLAGS)); \
	done

clean:
	rm -rf bin/

# --- conformance: critest (cri-tools' CRI validation suite) against
# bin/cri-compose; the images it needs come from a registry the run serves on
# 127.0.0.1 through cri-compose's --registry-mirror. Prints
# "N passed, N failed, N skipped" last and fails if a spec failed. Output in
# test/conformance/_output. See test/conformance/run for what a run does.
# CONFORMANCE_FLAGS passes flags to it: -v, -parallel=N, -focus=RE, -skip=RE
# (quote a regexp with | in it: CONFORMANCE_FLAGS="-focus='Image|Pod'").
# ENGINE=current runs it on a current Docker Engine instead (dockerd 29,
# containerd 2, as make test-engine-current builds and runs them), privately
# in a network namespace of its own with the whole run; output in
# test/conformance/_output/current.
CONFORMANCE_FLAGS ?=
ENGINE ?= machine

.PHONY: conformance
conformance: ensure-docker ensure-tools
ifeq ($(ENGINE),current)
	CRI_COMPOSE_ENGINE_CURRENT=1 CRI_COMPOSE_CONFORMANCE=1 CONFORMANCE_FLAGS="$(CONFORMANCE_FLAGS)" GO=$(GO) \
		$(GO) test -count=1 -v -timeout 90m -run '^TestConformanceCurrent$$' ./test/engines
else
	$(GO) build -o bin/ ./cmd/cri-compose
	$(GO) run ./test/conformance/run -go=$(GO) $(CONFORMANCE_FLAGS)
endif

# --- install: `make install` puts bin/cri-compose (and bin/vk-cri
# when built) in $(BINDIR), the systemd units in $(UNITDIR), and the example
# configs (/etc/cri-compose/config.yaml, /etc/vk-cri/vk-cri.env) and
# /etc/crictl.yaml where none exist yet: an operator's files are never
# overwritten. DESTDIR stages the whole install (packaging, verify-install).
# VERSION sets the version `cri-compose version` and the CRI Version RPC
# report; COMMIT defaults to the checkout's revision.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR ?= $(SYSCONFDIR)/systemd/system
DESTDIR ?=
VERSION ?=
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
LDFLAGS = $(if $(VERSION),-X github.com/cri-compose/cri-compose/pkg/cri.Version=$(VERSION)) \
	$(if $(COMMIT),-X github.com/cri-compose/cri-compose/pkg/buildinfo.Commit=$(COMMIT))

.PHONY: install verify-install docs install-compose
# Compose v2 as the docker CLI plugin (Debian 12 has only Compose v1, which
# lists a project only from its folder): the version the tests use, built
# once into the tool cache; root installs it for every user
# (/usr/local/lib/docker/cli-plugins), others into ~/.docker/cli-plugins.
# COMPOSE_PLUGIN_DIR picks another folder.
install-compose:
	$(GO) run ./test/toolcache/install-compose $(if $(COMPOSE_PLUGIN_DIR),-dir $(COMPOSE_PLUGIN_DIR))

install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/cri-compose
	install -m 0755 bin/cri-compose $(DESTDIR)$(BINDIR)/cri-compose
	sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/cri-compose.service >$(DESTDIR)$(UNITDIR)/cri-compose.service
	sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/cri-compose@.service >$(DESTDIR)$(UNITDIR)/cri-compose@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/cri-compose.service $(DESTDIR)$(UNITDIR)/cri-compose@.service
	@set -e; keep() { if [ -e "$$2" ]; then echo "keeping $$2"; else install -m "$$3" "$$1" "$$2"; echo "installed $$2"; fi; }; \
	keep deploy/config/config.yaml $(DESTDIR)$(SYSCONFDIR)/cri-compose/config.yaml 0644; \
	keep deploy/config/crictl.yaml $(DESTDIR)$(SYSCONFDIR)/crictl.yaml 0644; \
	if [ -x bin/vk-cri ]; then \
		install -d $(DESTDIR)$(SYSCONFDIR)/vk-cri; \
		install -m 0755 bin/vk-cri $(DESTDIR)$(BINDIR)/vk-cri; \
		sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/vk-cri.service >$(DESTDIR)$(UNITDIR)/vk-cri.service; \
		sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/vk-cri@.service >$(DESTDIR)$(UNITDIR)/vk-cri@.service; \
		chmod 0644 $(DESTDIR)$(UNITDIR)/vk-cri.service $(DESTDIR)$(UNITDIR)/vk-cri@.service; \
		keep deploy/config/vk-cri.env $(DESTDIR)$(SYSCONFDIR)/vk-cri/vk-cri.env 0640; \
	fi
	@echo 'next: systemctl daemon-reload && systemctl enable --now cri-compose (and vk-cri once /etc/vk-cri/vk-cri.env names a kubeconfig)'

# Installs into a temporary DESTDIR and checks every unit of deploy/systemd
# with `systemd-analyze verify` against the installed binaries (a stand-in
# for one not built, e.g. vk-cri); it fails on any complaint, as verify
# itself exits 0 on parse warnings. Without systemd-analyze it says so and
# checks only the install.
verify-install:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install DESTDIR=$$tmp >/dev/null; \
	for f in $(BINDIR)/cri-compose $(UNITDIR)/cri-compose.service $(UNITDIR)/cri-compose@.service $(SYSCONFDIR)/cri-compose/config.yaml $(SYSCONFDIR)/crictl.yaml; do \
		test -e "$$tmp$$f" || { echo "verify-install: $$f not installed"; exit 1; }; \
	done; \
	"$$tmp$(BINDIR)/cri-compose" version; \
	if ! command -v systemd-analyze >/dev/null; then \
		echo 'verify-install: systemd-analyze not found (apt-get install systemd): units not verified'; exit 0; \
	fi; \
	mkdir "$$tmp/verify"; units=; \
	for u in deploy/systemd/*.service; do \
		n=$$(basename "$$u" .service); b="$$tmp$(BINDIR)/$${n%@}"; \
		if [ ! -x "$$b" ]; then printf '#!/bin/sh\nexit 0\n' >"$$b"; chmod 0755 "$$b"; echo "verify-install: $${b##*/} not built: its unit is checked against a stand-in"; fi; \
		v="$$tmp/verify/$${u##*/}"; sed "s|@BINDIR@|$$tmp$(BINDIR)|g" "$$u" >"$$v"; units="$$units $$v"; \
	done; \
	out=$$(systemd-analyze verify $$units 2>&1) || { echo "$$out"; exit 1; }; \
	if [ -n "$$out" ]; then echo "$$out"; echo 'verify-install: systemd-analyze verify complained'; exit 1; fi; \
	echo "verify-install: systemd-analyze verify$$(for u in $$units; do printf ' %s' "$${u##*/}"; done): ok"

# docs/configuration.md from the flag definitions: each binary regenerates
# its own section (the tests of cmd/cri-compose and cmd/vk-cri fail when one
# is stale).
docs:
	$(GO) generate ./cmd/cri-compose ./cmd/vk-cri

# --- test-vk: vk-cri's end-to-end suite (test/vk, a module of its own so
# that envtest stays out of the product's go.mod). It runs a real
# kube-apiserver and etcd on loopback (built from the Go module proxy by the
# module test/vk/tools and cached by version under
# ~/.cache/cri-compose/tools: about 10 CPU-minutes on the first run only),
# bin/cri-compose on the engine and bin/vk-cri (both built by the test), and
# checks pods through client-go. VK_TEST_FLAGS passes go test flags (-v);
# VK_RUN selects tests by regexp (VK_RUN='TestProbe|TestHook'), quoted here
# so that a | reaches go test rather than the shell.
VK_TEST_FLAGS ?=
VK_RUN ?= .

.PHONY: test-vk
test-vk: ensure-docker ensure-tools
	cd test/vk && GOWORK=off $(GO) vet ./...
ifeq ($(ENGINE),current)
	$(call in-current-engine,cd test/vk && GOWORK=off $(GO) test -count=1 -timeout 45m -run '$(VK_RUN)' $(VK_TEST_FLAGS) ./...)
else
	cd test/vk && GOWORK=off $(GO) test -count=1 -timeout 45m -run '$(VK_RUN)' $(VK_TEST_FLAGS) ./...
endif

# --- test-networking: test/vk's TestNetworking under VK_NETWORKING=1. Two
# Docker hosts (the machine's engine and a private one in a network
# namespace of its own) as two virtual nodes of one cluster, each with
# cri-compose, vk-cri, flanneld and kube-proxy (built from the module proxy
# by test/vk/tools and test/vk/tools/network, cached like kube-apiserver),
# kube-controller-manager allocating pod CIDRs, kube-scheduler, and CoreDNS.
# It changes the machine's network while it runs (flannel.1, iptables and
# nftables rules) and removes what it added when it ends; one run at a time.
# VK_FLANNEL_BACKEND=host-gw runs flannel's host-gw backend instead of VXLAN.
NETWORKING_TIMEOUT ?= 30m

.PHONY: test-networking
test-networking: ensure-docker ensure-tools
	cd test/vk && VK_NETWORKING=1 VK_E2E_RACE=0 GOWORK=off $(GO) test -count=1 -timeout $(NETWORKING_TIMEOUT) -run '^TestNetworking$$' $(VK_TEST_FLAGS) .

# conformance-networking: the same cluster, then e2e.test's [sig-network]
# [Conformance] specs on it (but Serial, Slow, Flaky, Disruptive), two ginkgo
# processes; the JUnit report and summary in test/vk/_output/conformance-networking.
CONFORMANCE_NETWORKING_FLAGS ?= --ginkgo.procs=2

.PHONY: conformance-networking
conformance-networking: ensure-docker ensure-tools
	mkdir -p test/vk/_output
	cd test/vk && rc=0; VK_NETWORK_CONFORMANCE=1 VK_E2E_RACE=0 CONFORMANCE_NETWORKING_FLAGS='$(CONFORMANCE_NETWORKING_FLAGS)' \
		GOWORK=off $(GO) test -count=1 -timeout 90m -run '^TestNetworking$$' -v . > _output/conformance-networking.log 2>&1 || rc=$$?; \
		grep -E '^(=== RUN|--- |\s+--- |\s+node_conformance_test.go|\s+networking_flow_test.go|FAIL|ok|vk e2e)' _output/conformance-networking.log | tail -60; \
		tail -1 _output/conformance-networking/summary.txt 2>/dev/null || echo 'no summary: see test/vk/_output/conformance-networking.log'; exit $$rc

# --- conformance-node: Kubernetes' e2e suite (e2e.test, built from the module
# proxy by test/vk/tools and cached like kube-apiserver: about 20 minutes of
# two cores on the first run, with the control plane) judges the virtual node. test/vk's set-up, plus
# kube-controller-manager and kube-scheduler, an untainted node, and the
# specs' images served through cri-compose's --registry-mirror; then
# TestNodeConformance runs the [NodeConformance] specs without
# [Serial|Slow|Flaky|Disruptive]. CONFORMANCE_NODE_FLAGS adds e2e.test flags
# (--ginkgo.focus=…, --ginkgo.skip=…, --ginkgo.procs=2). The JUnit report and
# the suite's log are in test/vk/_output/conformance-node; the last line is
# "N passed, N failed, N skipped". VK_SUITE=1 runs virtual-kubelet's own
# provider suite (TestProviderSuite, also part of make test-vk) after it.
CONFORMANCE_NODE_FLAGS ?=
VK_SUITE ?=
# NODE=kubelet: the node under test is a real kubelet (the suite's version,
# built into the tool cache) on cri-compose, in vk-cri's place.
NODE ?= vk-cri
CONFORMANCE_NODE_RUN = ^TestNodeConformance$$$(if $(filter 1,$(VK_SUITE)),|^TestProviderSuite$$)

# conformance-node-ci: the part of it that CI runs, with two ginkgo
# processes: every spec but the probe specs that wait out minutes of probing
# (a liveness probe that must *not* restart a container is watched for four
# minutes), and PrivilegedPod, which needs the kernel's dummy link driver
# (docs/conformance.md, the table of skips). 207 of the 242 specs, about 11 minutes.
CONFORMANCE_NODE_CI_SKIP = \[Serial\]|\[Slow\]|\[Flaky\]|\[Disruptive\]|PrivilegedPod|Probing.*(\*not\*|monotonically|exec|GRPC|startup\s?[pP]robe|never\sbe\sready|disable\sliveness)

.PHONY: conformance-node-ci
conformance-node-ci:
	$(MAKE) conformance-node CONFORMANCE_NODE_FLAGS='--ginkgo.procs=2 --ginkgo.skip=$(CONFORMANCE_NODE_CI_SKIP)'

.PHONY: conformance-node
conformance-node: ensure-docker ensure-tools
	mkdir -p test/vk/_output
	cd test/vk && rc=0; VK_NODE_CONFORMANCE=1 VK_NODE='$(NODE)' VK_E2E_RACE=0 CONFORMANCE_NODE_FLAGS='$(CONFORMANCE_NODE_FLAGS)' \
		GOWORK=off $(GO) test -count=1 -timeout 150m -run '$(CONFORMANCE_NODE_RUN)' -v . > _output/conformance-node.log 2>&1 || rc=$$?; \
		grep -E '^(=== RUN|--- |\s+node_conformance_test.go|FAIL|ok|vk e2e)' _output/conformance-node.log | tail -60; \
		tail -1 _output/conformance-node/summary.txt 2>/dev/null || echo 'no summary: see test/vk/_output/conformance-node.log'; exit $$rc

# --- demo: the whole stack on this machine. test/vk's set-up (kube-apiserver
# + etcd on loopback, bin/cri-compose, bin/vk-cri) and its TestDemo, run from
# a compiled test binary so that Ctrl-C reaches it alone and it tears down in
# order: a sample pod, shown by kubectl, crictl and docker compose (v2), all
# built once into ~/.cache/cri-compose/tools. It stays up until Ctrl-C;
# DEMO_KEEP=0 tears it down at once.
.PHONY: demo
demo: ensure-docker ensure-tools
	cd test/vk && GOWORK=off $(GO) test -c -o $(CURDIR)/bin/vk-demo.test .
	cd test/vk && exec $(CURDIR)/bin/vk-demo.test -test.run='^TestDemo$$' -test.timeout=0 -demo

# --- hardening: faults, churn, hostile input, access control.
# `make test-fault` runs test/fault (kill -9 at every failpoint, engine
# away, slow or restarted, disks that fill) with FAULT_CPU_HOG busy-loop
# processes beside it (one per CPU; the test binary itself, bounded by the
# test's timeout, nothing to install), so that a guarantee that holds only
# on a quiet machine fails here. test/access and the streaming URL tests
# run in `make test`. `make churn`
# is the churn test's CI mode (30 pods, without -race: it measures memory);
# `make fuzz` runs every fuzz target for FUZZTIME each; `make soak` is the
# long mode: 200 pods churned for 10 minutes, the streaming URL expiry
# (a minute's wait) and a longer fuzz. README.md, "Guarantees".
FUZZTIME ?= 10s
# Go before 1.27 can fail a fuzz target with a bare "context deadline
# exceeded" when -fuzztime ends while a worker is mid-input (a race in the
# fuzzing coordinator, fixed in 1.27.0), so fuzzing alone runs on 1.27; the
# go command fetches that toolchain from the module proxy once.
FUZZ_GO ?= GOTOOLCHAIN=go1.27.3 $(GO)
SOAK_FUZZTIME ?= 2m
CHURN_FLAGS ?=
FUZZ_TARGETS := ./pkg/sandbox:FuzzProjectName ./pkg/sandbox:FuzzServiceName \
	./pkg/sandbox:FuzzValidateSandbox ./pkg/sandbox:FuzzValidateContainer ./pkg/sandbox:FuzzComposeYAML \
	./pkg/cri/crilog:FuzzParseLine ./pkg/cri/crilog:FuzzPump ./pkg/cri/crilog:FuzzReadLog

FAULT_CPU_HOG ?= $(shell nproc 2>/dev/null || echo 2)
FAULT_TIMEOUT ?= 20m

.PHONY: test-fault fuzz churn soak
test-fault: ensure-docker ensure-tools
ifeq ($(ENGINE),current)
	$(call in-current-engine,$(GO) test -race -count=1 -v -timeout $(FAULT_TIMEOUT) $(TEST_FLAGS) ./test/fault -args -fault.cpu-hog=$(FAULT_CPU_HOG))
else
	$(GO) test -race -count=1 -v -timeout $(FAULT_TIMEOUT) $(TEST_FLAGS) ./test/fault -args -fault.cpu-hog=$(FAULT_CPU_HOG)
endif

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "$(FUZZ_GO) test -run '^$$' -fuzz '^$$fn$$' -fuzztime $(FUZZTIME) $$pkg"; \
		$(FUZZ_GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

churn: ensure-docker ensure-tools
	$(GO) test -count=1 -v -timeout 20m -run '^TestChurn$$' ./test/churn -args $(CHURN_FLAGS)

soak: ensure-docker ensure-tools
	$(GO) test -count=1 -v -timeout 60m -run '^TestChurn$$' ./test/churn -args -churn.pods=200 -churn.duration=10m $(CHURN_FLAGS)
	CRI_COMPOSE_SOAK=1 $(GO) test -count=1 -v -timeout 10m -run '^TestStreamURLsExpire$$' ./pkg/cri
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(SOAK_FUZZTIME)
