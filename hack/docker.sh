#!/usr/bin/env bash
# A Docker daemon for the image builds and kind (docs/development.md "Containers").
#
#   hack/docker.sh up     installs Debian's docker.io when /usr/bin/docker is absent and
#                         starts dockerd when none answers; idempotent
#   hack/docker.sh down   stops the dockerd that `up` started (by its PID) and removes the
#                         bridge it made; a daemon this script did not start is left alone
#   hack/docker.sh run CMD...  `up`, CMD, then `down` if this call started dockerd (on
#                         success and on failure); exits with CMD's status
#   hack/docker.sh env    prints the variables to use it: DOCKER (the client) and
#                         DOCKER_BUILDKIT=1
#
# Host settings, each applied only where detected (facts: ../shared/facts/containers.md):
# - root without CAP_SYS_RESOURCE in its bounding set (these Firecracker machines): runc
#   fails to start any privileged container ("unable to apply caps: operation not
#   permitted"), kind's nodes included. dockerd then runs with a runtime wrapper
#   (hack/runc-wrapper.py) that removes that one capability from the container's spec.
# - the dockerd started here runs with --iptables=false: nothing a run starts needs NAT
#   or published ports beyond loopback (the userland proxy serves those), and no rule is
#   left on the host after `down`.
# The client is /usr/bin/docker (Debian's, with BuildKit): another client earlier in
# PATH (a 28.x without buildx on these machines) would fall back to the legacy builder.
set -euo pipefail
cd "$(dirname "$0")/.."
state="${XDG_CACHE_HOME:-$HOME/.cache}/karpenter-provider-scaleway/docker"
pidfile="$state/dockerd.pid"
DOCKER=/usr/bin/docker

lacks_sys_resource() {
  # CAP_SYS_RESOURCE is capability 24.
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  (( (16#$bnd >> 24 & 1) == 0 ))
}

answers() { "$DOCKER" info >/dev/null 2>&1; }

up() {
  if [ ! -x "$DOCKER" ] || ! command -v dockerd >/dev/null 2>&1; then
    echo "docker: installing docker.io (apt)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker.io >/dev/null
  fi
  if answers; then
    if lacks_sys_resource && ! "$DOCKER" info --format '{{json .Runtimes}}' | grep -q kps-runc; then
      echo "docker: warning: a dockerd is running without the kps-runc runtime; privileged" \
        "containers (kind's nodes) will fail on this host (no CAP_SYS_RESOURCE)." \
        "Stop it and run hack/docker.sh up." >&2
    fi
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || { echo "docker: starting dockerd needs root" >&2; exit 1; }
  mkdir -p "$state"
  args=(--iptables=false -p "$pidfile")
  if lacks_sys_resource; then
    install -m 0755 hack/runc-wrapper.py "$state/runc-wrapper"
    args+=(--add-runtime "kps-runc=$state/runc-wrapper" --default-runtime kps-runc)
    echo "docker: no CAP_SYS_RESOURCE here: runtime kps-runc (hack/runc-wrapper.py)" >&2
  fi
  echo "docker: starting dockerd (log $state/dockerd.log)" >&2
  setsid dockerd "${args[@]}" >"$state/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    answers && { echo "docker: dockerd $(cat "$pidfile") answers" >&2; return 0; }
    sleep 0.5
  done
  echo "docker: dockerd did not answer in 30 s; last lines of its log:" >&2
  tail -n 20 "$state/dockerd.log" >&2
  exit 1
}

down() {
  [ -f "$pidfile" ] || { echo "docker: no dockerd started by this script" >&2; return 0; }
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$pidfile"
  # dockerd leaves its default bridge behind.
  ip link show docker0 >/dev/null 2>&1 && ip link delete docker0 || true
  echo "docker: dockerd $pid stopped" >&2
}

run() {
  local started=0 rc=0
  answers || started=1
  up
  "$@" || rc=$?
  if [ $started = 1 ]; then down; fi
  return $rc
}

case "${1:-up}" in
  up) up ;;
  run) shift; [ $# -gt 0 ] || { echo "usage: $0 run CMD..." >&2; exit 2; }; run "$@" ;;
  down) down ;;
  env) echo "DOCKER=$DOCKER"; echo "DOCKER_BUILDKIT=1" ;;
  *) echo "usage: $0 up|down|run CMD...|env" >&2; exit 2 ;;
esac
