#!/usr/bin/env bash
# image-context.sh stages what the Dockerfile copies: a static mcpgate binary,
# the host's CA certificates, passwd/group entries for uid 65532, /tmp and an
# empty /data.
#
# Usage: deploy/image-context.sh BINARY [OUTDIR]   (OUTDIR default: bin/image)
# BINARY must be static (CGO_ENABLED=0) and should embed the time zone
# database (-tags timetzdata), since the slim image has no /usr/share/zoneinfo.
set -euo pipefail
bin="${1:?usage: image-context.sh BINARY [OUTDIR]}"
out="${2:-$(dirname "$0")/../bin/image}"
ca="${MCPGATE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
[ -r "$ca" ] || { echo "image-context.sh: no CA bundle at $ca (apt-get install ca-certificates, or set MCPGATE_CA_BUNDLE)" >&2; exit 1; }

rm -rf "$out/rootfs" "$out/data"
mkdir -p "$out/rootfs/usr/local/bin" "$out/rootfs/etc/ssl/certs" "$out/rootfs/tmp" "$out/data"
chmod 1777 "$out/rootfs/tmp"
chmod 0755 "$out/data"
cp "$bin" "$out/rootfs/usr/local/bin/mcpgate"
chmod 0755 "$out/rootfs/usr/local/bin/mcpgate"
# The small sandbox wrapper, when built beside the binary: sandboxed children
# then skip the gateway's own start-up.
if [ -x "$(dirname "$bin")/mcpgate-sandbox" ]; then
	cp "$(dirname "$bin")/mcpgate-sandbox" "$out/rootfs/usr/local/bin/mcpgate-sandbox"
	chmod 0755 "$out/rootfs/usr/local/bin/mcpgate-sandbox"
fi
cp "$ca" "$out/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$out/rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nmcpgate:x:65532:65532:mcpgate:/data:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$out/rootfs/etc/passwd"
printf 'root:x:0:\nmcpgate:x:65532:\nnogroup:x:65534:\n' >"$out/rootfs/etc/group"
chmod 0644 "$out/rootfs/etc/passwd" "$out/rootfs/etc/group"
