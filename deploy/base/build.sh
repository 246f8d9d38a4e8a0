#!/usr/bin/env bash
# build.sh makes the Debian base of the full mcpgate image (node, npm,
# python3) without any registry: mmdebstrap writes a rootfs tarball from the
# machine's own apt mirror and `docker import` turns it into an image.
#
# Idempotent: when the image already exists it does nothing.
#
# Usage: deploy/base/build.sh [--from-registry]
#   --from-registry  build deploy/base/Dockerfile (FROM debian:bookworm-slim)
#                    instead, for machines that can pull from a registry.
#
# Environment:
#   MCPGATE_BASE_IMAGE  image name (default mcpgate-base:bookworm)
#   MCPGATE_SUITE       Debian suite (default bookworm)
#   MCPGATE_BASE_FORCE=1  rebuild even when the image exists
set -euo pipefail
cd "$(dirname "$0")"

IMAGE="${MCPGATE_BASE_IMAGE:-mcpgate-base:bookworm}"
SUITE="${MCPGATE_SUITE:-bookworm}"
# Keep in step with deploy/base/Dockerfile.
PACKAGES="ca-certificates,tzdata,nodejs,npm,python3,python3-venv,pipx"

log() { printf 'base/build.sh: %s\n' "$*" >&2; }

if [ "${MCPGATE_BASE_FORCE:-}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
	log "$IMAGE exists"
	exit 0
fi

if [ "${1:-}" = "--from-registry" ]; then
	docker build -t "$IMAGE" -f Dockerfile .
	exit 0
fi

if ! command -v mmdebstrap >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { log "mmdebstrap is missing and installing it needs root"; exit 1; }
	log "installing mmdebstrap"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2 ||
		{ apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2; }
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The gateway's user (65532) gets a passwd entry so that tools which look the
# uid up (npm, python's getpass) find a name and a home.
log "building the $SUITE rootfs (a few minutes)"
mmdebstrap --variant=minbase --mode=root --format=tar \
	--include="$PACKAGES" \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--customize-hook='echo "mcpgate:x:65532:65532:mcpgate:/data:/usr/sbin/nologin" >>"$1/etc/passwd"' \
	--customize-hook='echo "mcpgate:x:65532:" >>"$1/etc/group"' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
	"$SUITE" "$work/rootfs.tar" >&2

log "importing as $IMAGE"
docker import \
	-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
	-c 'CMD ["/bin/bash"]' \
	"$work/rootfs.tar" "$IMAGE" >&2
log "done: $(docker image inspect -f '{{.Size}}' "$IMAGE") bytes"
