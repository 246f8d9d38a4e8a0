#!/usr/bin/env bash
# fuzz.sh runs the catalog's fuzz target (tokenizer, index and search on
# arbitrary tools and queries) for a bounded time. A crasher lands in
# catalog/testdata/fuzz/FuzzSearch/: commit it as a regression seed.
# Needs only the Go toolchain. Usage: catalog/fuzz.sh [duration, default 30s]
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -run '^$' -fuzz '^FuzzSearch$' -fuzztime "${1:-30s}" -parallel "${FUZZ_PARALLEL:-2}" ./catalog
