#!/usr/bin/env bash
# dockerd.sh makes a Docker engine available for the docker package's tests.
#
# Idempotent: if an engine already answers at $DOCKER_HOST (or the default
# socket, or the socket this script started earlier) it only prints where.
# Otherwise it installs Debian's docker.io when dockerd is missing and starts a
# private dockerd whose data root, exec root and socket live under a work dir.
# The private engine touches neither iptables nor bridges, so containers must
# use NetworkMode "none".
#
# Output: `export DOCKER_HOST=...` on stdout, also written to "$WORK/env", so a
# caller can do `eval "$(.ci/dockerd.sh)"` or `. "$WORK/env"`.
# Logs go to stderr and "$WORK/dockerd.log".
#
# Environment:
#   MCPGATE_DOCKERD_DIR      work dir (default /var/tmp/mcpgate-dockerd)
#   MCPGATE_DOCKERD_TIMEOUT  seconds to wait for the engine (default 60)
#   MCPGATE_DOCKERD_STOP=1   stop the engine this script started, then exit
set -euo pipefail

WORK="${MCPGATE_DOCKERD_DIR:-/var/tmp/mcpgate-dockerd}"
TIMEOUT="${MCPGATE_DOCKERD_TIMEOUT:-60}"
SOCK="$WORK/docker.sock"
PIDFILE="$WORK/dockerd.pid"

log() { printf 'dockerd.sh: %s\n' "$*" >&2; }

# answers HOST succeeds when an engine replies to /_ping at HOST (unix:// only
# for curl; the docker CLI handles every scheme).
answers() {
	local host="$1"
	if command -v docker >/dev/null 2>&1; then
		timeout 5 docker -H "$host" version --format '{{.Server.APIVersion}}' >/dev/null 2>&1 && return 0
	fi
	case "$host" in
	unix://*)
		local path="${host#unix://}"
		[ -S "$path" ] || return 1
		if command -v curl >/dev/null 2>&1; then
			[ "$(curl -fsS --max-time 5 --unix-socket "$path" http://localhost/_ping 2>/dev/null)" = "OK" ] && return 0
		fi
		;;
	esac
	return 1
}

emit() {
	mkdir -p "$WORK"
	printf 'export DOCKER_HOST=%s\n' "$1" | tee "$WORK/env"
}

stop_ours() {
	if [ -f "$PIDFILE" ]; then
		local pid
		pid="$(cat "$PIDFILE")"
		if kill -0 "$pid" 2>/dev/null; then
			log "stopping dockerd $pid"
			kill -TERM "$pid"
			for _ in $(seq 1 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.2
			done
		fi
		rm -f "$PIDFILE"
	fi
}

if [ "${MCPGATE_DOCKERD_STOP:-}" = "1" ]; then
	stop_ours
	exit 0
fi

if [ -n "${DOCKER_HOST:-}" ] && answers "$DOCKER_HOST"; then
	log "engine already answers at $DOCKER_HOST"
	emit "$DOCKER_HOST"
	exit 0
fi
if answers "unix:///var/run/docker.sock"; then
	log "engine already answers at the default socket"
	emit "unix:///var/run/docker.sock"
	exit 0
fi
if answers "unix://$SOCK"; then
	log "engine started earlier answers at $SOCK"
	emit "unix://$SOCK"
	exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { log "dockerd is missing and installing it needs root"; exit 1; }
	log "installing docker.io"
	# Keep the package's init script from starting a system dockerd that
	# would set up iptables and a bridge on the default socket.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends docker.io >&2
	command -v dockerd >/dev/null 2>&1 || { log "docker.io installed no dockerd"; exit 1; }
fi

# A stale daemon of ours that no longer answers would hold the data root.
stop_ours
mkdir -p "$WORK/root" "$WORK/exec"
rm -f "$SOCK"
log "starting dockerd on $SOCK"
# setsid: the engine must outlive this script and the caller's process group.
setsid dockerd \
	--data-root "$WORK/root" \
	--exec-root "$WORK/exec" \
	--pidfile "$PIDFILE" \
	-H "unix://$SOCK" \
	--iptables=false --ip6tables=false --bridge=none \
	--storage-driver overlay2 \
	</dev/null >>"$WORK/dockerd.log" 2>&1 &
started=$!

deadline=$((SECONDS + TIMEOUT))
until answers "unix://$SOCK"; do
	if ! kill -0 "$started" 2>/dev/null; then
		log "dockerd exited; last log lines:"
		tail -n 20 "$WORK/dockerd.log" >&2
		exit 1
	fi
	if [ "$SECONDS" -ge "$deadline" ]; then
		log "dockerd did not answer within ${TIMEOUT}s; last log lines:"
		tail -n 20 "$WORK/dockerd.log" >&2
		exit 1
	fi
	sleep 0.5
done
log "engine ready"
emit "unix://$SOCK"
