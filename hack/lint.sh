#!/usr/bin/env bash
# make lint: gofmt on every Go file, then golangci-lint (.golangci.yml:
# govet, staticcheck, errcheck, ineffassign, unused, gocritic) on every
# module of the tree that has Go code (the root module, test/vk and the
# tool modules), and the checks that `make help` names every target and
# that the docs name only files of the tree and every file of pkg/cri and
# pkg/vk.
#
# golangci-lint is pinned in hack/tools/go.mod (a module of its own, so its
# dependencies never enter the product's build list) and built once per
# version from the Go module proxy into ~/.cache/cri-compose/tools, beside
# the tests' tools; its results are cached too (~/.cache/golangci-lint), so
# a warm run takes seconds. Change the version with
# `GOWORK=off go get -tool github.com/golangci/golangci-lint/v2/cmd/golangci-lint@VERSION`
# in hack/tools.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
export GOWORK=off

files="$(git ls-files -co --exclude-standard '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')"
out="$(if [ -n "$files" ]; then gofmt -l $files; fi)"
if [ -n "$out" ]; then
	echo "gofmt -l: these files need gofmt -w:" >&2
	echo "$out" >&2
	exit 1
fi

mod=github.com/golangci/golangci-lint/v2
version="$("$GO" -C hack/tools list -m -f '{{.Version}}' "$mod")"
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/cri-compose/tools"
bin="$cache/golangci-lint-$version"
if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	echo "lint: building golangci-lint $version into $cache (once; a few minutes)"
	tmp="$(mktemp "$cache/.golangci-lint-build-XXXXXX")"
	trap 'rm -f "$tmp"' EXIT
	"$GO" -C hack/tools build -o "$tmp" "$mod/cmd/golangci-lint"
	mv "$tmp" "$bin"
fi

# Every module with Go code; test/conformance/tools holds only its tools
# build-tagged imports.
status=0
for gomod in $(git ls-files -co --exclude-standard 'go.mod' '**/go.mod' | sort -u); do
	dir="$(dirname "$gomod")"
	if [ -z "$(cd "$dir" && "$GO" list ./... 2>/dev/null)" ]; then
		continue
	fi
	echo "golangci-lint run ($dir)"
	(cd "$dir" && "$bin" run --config "$root/.golangci.yml" ./...) || status=1
done

bash hack/check-help.sh || status=1
bash hack/check-docs.sh || status=1
exit "$status"
