#!/bin/sh
# Runs the upstream package's tests the way CI does. They need only Go and
# the usual POSIX tools (sh, sleep, cat, env): no daemon, no network.
set -eu
cd "$(dirname "$0")/.."
for tool in go sh sleep cat env; do
	command -v "$tool" >/dev/null || { echo "upstream tests need $tool" >&2; exit 1; }
done
MCPGATE_TEST_STRICT=1 go test -race -count=1 ./upstream/...
