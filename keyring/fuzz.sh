#!/usr/bin/env bash
# fuzz.sh runs the keyring's fuzz target (RELIABILITY-TESTS J6) for a bounded
# time; CI uses 30-60 s, nightly longer. A crasher lands in
# keyring/testdata/fuzz/FuzzOpen/: commit it as a regression seed.
# Needs only the Go toolchain. Usage: keyring/fuzz.sh [duration, default 45s]
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -run '^$' -fuzz '^FuzzOpen$' -fuzztime "${1:-45s}" -parallel "${FUZZ_PARALLEL:-2}" ./keyring
