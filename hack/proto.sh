#!/usr/bin/env bash
# Generates the Go code of proto/ (cri-compose's own gRPC API) with the
# generators pinned in proto/tools/go.mod: buf (which compiles the .proto
# files itself, so no protoc is needed), protoc-gen-go and
# protoc-gen-go-grpc. They are Go modules: the Go module proxy (or the
# module cache) is all this needs. The binaries go to bin/proto-tools; the
# first run builds them (a minute or two), later runs reuse Go's build cache.
#
#   hack/proto.sh          regenerate proto/**/*.pb.go in place (make proto)
#   hack/proto.sh --check  lint the .proto files, generate into a temp dir
#                          and fail if that differs from the committed code
#                          (make proto-check)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
tools="$root/bin/proto-tools"

mkdir -p "$tools"
# proto/tools is a module of its own, so the generators' dependencies never
# enter the main module's build list; no workspace may pull it in.
GOWORK=off "$GO" -C proto/tools build -o "$tools/" \
	github.com/bufbuild/buf/cmd/buf \
	google.golang.org/protobuf/cmd/protoc-gen-go \
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
export PATH="$tools:$PATH"
# buf keeps a cache; a fresh HOME-less CI shell still has a place for it.
export BUF_CACHE_DIR="${BUF_CACHE_DIR:-$root/bin/proto-tools/cache}"

cd proto
case "${1:-}" in
"")
	buf generate
	echo "proto: generated $(find . -path ./tools -prune -o -name '*.pb.go' -print | sort | tr '\n' ' ')"
	;;
--check)
	buf lint
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	buf generate --output "$tmp"
	status=0
	committed="$(find . -path ./tools -prune -o -name '*.pb.go' -print | sort)"
	generated="$(cd "$tmp" && find . -name '*.pb.go' | sort)"
	if [ "$committed" != "$generated" ]; then
		echo "proto-check: the generated files differ from the committed ones:" >&2
		diff <(echo "$committed") <(echo "$generated") >&2 || true
		status=1
	fi
	for f in $generated; do
		if [ -f "$f" ] && ! cmp -s "$f" "$tmp/$f"; then
			echo "proto-check: proto/${f#./} is not what its .proto generates:" >&2
			diff -u "$f" "$tmp/$f" | head -40 >&2 || true
			status=1
		fi
	done
	if [ "$status" -ne 0 ]; then
		echo "proto-check: run 'make proto' and commit the result" >&2
		exit 1
	fi
	echo "proto-check: the generated Go code is current and the .proto files pass buf lint"
	;;
*)
	echo "usage: hack/proto.sh [--check]" >&2
	exit 2
	;;
esac
