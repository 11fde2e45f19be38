#!/usr/bin/env bash
# Fails when a target of the Makefile is missing from `make help` (or help
# names one that does not exist), so that help stays the list of targets.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets="$(grep -oE '^[a-z][a-z0-9_-]*:([^=]|$)' Makefile | cut -d: -f1 | sort -u)"
listed="$(make -s --no-print-directory help | awk '$1 == "make" { print $2 }' | sort -u)"
missing="$(comm -23 <(echo "$targets") <(echo "$listed"))"
extra="$(comm -13 <(echo "$targets") <(echo "$listed"))"
if [ -n "$missing" ] || [ -n "$extra" ]; then
	[ -z "$missing" ] || echo "make help does not list these targets of the Makefile:" $missing >&2
	[ -z "$extra" ] || echo "make help lists targets the Makefile does not have:" $extra >&2
	exit 1
fi
echo "make help lists all $(echo "$targets" | wc -l) targets"
