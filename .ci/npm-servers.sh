#!/bin/sh
# Installs the npm MCP servers that the sandbox tests run, at pinned
# versions, into ${MCPGATE_NPM_DIR:-$HOME/.cache/mcpgate/npm}. The tests look
# for them at $MCPGATE_NPM_DIR/node_modules/... (same default) and skip, or
# fail under MCPGATE_TEST_STRICT=1, when they are missing.
set -eu

EVERYTHING_VERSION=2026.8.31

dir=${MCPGATE_NPM_DIR:-$HOME/.cache/mcpgate/npm}
mkdir -p "$dir"
# Sandboxed test servers run as uid 65534 and must be able to read and
# execute what is installed here.
chmod 0755 "$dir"
cd "$dir"
[ -f package.json ] || printf '{"private": true}\n' > package.json
npm install --no-audit --no-fund --save-exact \
	"@modelcontextprotocol/server-everything@${EVERYTHING_VERSION}"
chmod -R a+rX "$dir"
echo "installed into $dir"
