#!/usr/bin/env bash
# Fails when the docs name a file or folder of the tree that is not there:
# every `path` in backquotes that starts with cmd/, pkg/, test/, hack/,
# deploy/ or proto/, and in docs/architecture.md every `name.go` (its
# tables name files of pkg/cri, pkg/vk, the cmds and their subpackages by
# their base name). Fails too when docs/architecture.md leaves out a
# non-test Go file of pkg/cri (its top level) or pkg/vk, so that a new file
# gets its line: named by its path anywhere, or by its base name in its
# package's section (the base names of the two packages overlap).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
for doc in README.md BENCHMARKS.md docs/*.md; do
	for p in $(grep -oE '`(cmd|pkg|test|hack|deploy|proto)/[A-Za-z0-9_./-]+`' "$doc" | tr -d '`' | sort -u); do
		p="${p%.}"
		case "$p" in */_output/*) continue ;; esac # made by a run
		if [ ! -e "$p" ]; then
			echo "$doc names $p, which is not in the tree" >&2
			status=1
		fi
	done
done
for f in $(grep -oE '`[A-Za-z0-9_]+\.go`' docs/architecture.md | tr -d '`' | sort -u); do
	if [ -z "$(find pkg/cri pkg/vk cmd/cri-compose cmd/vk-cri -name "$f" -print -quit)" ]; then
		echo "docs/architecture.md names $f, which is in none of pkg/cri, pkg/vk, cmd/cri-compose, cmd/vk-cri or their subpackages" >&2
		status=1
	fi
done

# section prints docs/architecture.md from the heading $1 to the next one.
section() {
	awk -v h="$1" '/^## /{on = ($0 == h)} on' docs/architecture.md
}
for pkg in "pkg/cri|## Where each CRI RPC lives" "pkg/vk|## Where each pod feature of vk-cri lives"; do
	dir="${pkg%%|*}" heading="${pkg#*|}"
	text="$(section "$heading")"
	for f in "$dir"/*.go; do
		case "$f" in *_test.go) continue ;; esac
		if ! grep -qF "\`$f\`" docs/architecture.md && ! grep -qF "\`${f##*/}\`" <<<"$text"; then
			echo "docs/architecture.md does not name $f (by its path, or by its name under \"$heading\")" >&2
			status=1
		fi
	done
done
[ "$status" -ne 0 ] || echo "the docs name only files and folders of the tree, and every file of pkg/cri and pkg/vk"
exit "$status"
