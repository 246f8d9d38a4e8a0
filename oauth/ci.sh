#!/bin/sh
# CI for the oauth package. Needs only Go and the PostgreSQL server binaries
# (initdb, postgres, pg_ctl on PATH): storetest starts a private server, or
# uses MCPGATE_TEST_DATABASE_URL when set. The authorization server and the
# protected MCP server run inside the test process on loopback.
set -eu
cd "$(dirname "$0")/.."
if [ -z "${MCPGATE_TEST_DATABASE_URL:-}" ] && ! command -v initdb >/dev/null 2>&1; then
	echo "oauth/ci.sh: install the PostgreSQL server (initdb, postgres) or set MCPGATE_TEST_DATABASE_URL" >&2
	exit 1
fi
test -z "$(gofmt -l oauth store/oauth.go)"
go vet ./oauth/
MCPGATE_TEST_STRICT=1 go test -race -count=1 ./oauth/
go test -count=1 -run '^$' -bench . -benchtime 500x ./oauth/
