#!/usr/bin/env bash
# Makes sure a Docker Engine answers on $DOCKER_HOST (a unix:// socket) or
# /var/run/docker.sock. When none does, it installs Debian's docker.io if
# dockerd is missing, starts dockerd in the background (log in
# $DOCKERD_LOG, default /var/log/cri-compose-dockerd.log) and waits up to
# $DOCKER_WAIT seconds (default 60) for /_ping. Quick and silent when the
# engine already answers. Needs root to install or start anything.
set -euo pipefail

wait_secs="${DOCKER_WAIT:-60}"

sock=/var/run/docker.sock
case "${DOCKER_HOST:-}" in
  "") ;;
  unix://*) sock="${DOCKER_HOST#unix://}" ;;
  *)
    # A remote engine: we can only check it, not start it.
    if command -v docker >/dev/null 2>&1 && docker version >/dev/null 2>&1; then
      exit 0
    fi
    echo "ensure-docker: DOCKER_HOST=$DOCKER_HOST does not answer, and a remote engine cannot be started from here" >&2
    exit 1
    ;;
esac

ping() {
  [ -S "$sock" ] || return 1
  if command -v curl >/dev/null 2>&1; then
    [ "$(curl -fsS --max-time 5 --unix-socket "$sock" http://docker/_ping 2>/dev/null)" = OK ]
  elif command -v docker >/dev/null 2>&1; then
    DOCKER_HOST="unix://$sock" timeout 10 docker version >/dev/null 2>&1
  elif command -v python3 >/dev/null 2>&1; then
    python3 - "$sock" <<'PY' >/dev/null 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.exit(0 if data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n")[0] else 1)
PY
  else
    echo "ensure-docker: neither curl, docker nor python3 is here to ping the engine" >&2
    return 1
  fi
}

if ping; then
  exit 0
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v dockerd >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-docker: no Docker engine answers on $sock, dockerd is missing and there is no apt-get to install it" >&2
    exit 1
  fi
  echo "ensure-docker: installing Debian's docker.io" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

# The package may have started the engine already.
if ping; then
  exit 0
fi

log="${DOCKERD_LOG:-}"
if [ -z "$log" ]; then
  if [ -w /var/log ]; then
    log=/var/log/cri-compose-dockerd.log
  else
    log="${TMPDIR:-/tmp}/cri-compose-dockerd.log"
  fi
fi

# Start it only if no dockerd runs yet: a second one would fight for the
# data root. (One that runs but does not answer may just be starting.)
if ! pgrep -x dockerd >/dev/null 2>&1; then
  args=()
  if [ "$sock" != /var/run/docker.sock ]; then
    args+=(--host "unix://$sock")
  fi
  echo "ensure-docker: starting dockerd (log: $log)" >&2
  # setsid: the engine must outlive this script and its terminal.
  as_root setsid dockerd "${args[@]}" >>"$log" 2>&1 </dev/null &
  started=$!
fi

for _ in $(seq 1 "$wait_secs"); do
  if ping; then
    echo "ensure-docker: the engine answers on $sock" >&2
    exit 0
  fi
  if [ -n "${started:-}" ] && ! kill -0 "$started" 2>/dev/null; then
    echo "ensure-docker: dockerd exited at once; the end of $log:" >&2
    tail -n 30 "$log" >&2 2>/dev/null || true
    exit 1
  fi
  sleep 1
done

echo "ensure-docker: no Docker engine answers on $sock after ${wait_secs}s; the end of $log:" >&2
tail -n 30 "$log" >&2 2>/dev/null || true
exit 1
