#!/usr/bin/env bash
# dockerd.sh — make sure a Docker engine answers; start dockerd if none does.
#
# CI machines and fresh development machines run no service manager, so the
# engine installed by `scripts/setup.sh docker` is not running after install.
# This starts it in the background (its own session, so it outlives the make
# that started it), logs to $DOCKERD_LOG and waits until `docker info`
# answers. Idempotent: an engine that already answers (systemd's, Docker
# Desktop's, an earlier run's) is used as it is.
#
#   scripts/dockerd.sh          start if needed, wait, print the engine's version
#   scripts/dockerd.sh stop     stop the dockerd this script started (its pid file)
#
# A failure stops the script with "dockerd: <why>" and the tail of the log.
set -euo pipefail

LOG="${DOCKERD_LOG:-/tmp/triage-dockerd.log}"
PIDFILE="${DOCKERD_PIDFILE:-/tmp/triage-dockerd.pid}"
WAIT_S="${DOCKERD_WAIT_S:-60}"

fail() {
  echo "dockerd: $*" >&2
  [ -f "$LOG" ] && { echo "--- last lines of $LOG ---" >&2; tail -n 20 "$LOG" >&2; }
  exit 1
}
answers() { docker info >/dev/null 2>&1; }

case "${1:-start}" in
  start) ;;
  stop)
    [ -f "$PIDFILE" ] || { echo "dockerd: no pid file $PIDFILE; nothing to stop"; exit 0; }
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && fail "dockerd (pid $pid) still running 30 s after SIGTERM"
    fi
    rm -f "$PIDFILE"
    echo "dockerd: stopped (pid $pid)"
    exit 0 ;;
  *) fail "unknown command '$1' (known: start stop)" ;;
esac

command -v docker >/dev/null 2>&1 || fail "the docker CLI is not installed (run: scripts/setup.sh docker)"
if answers; then
  echo "dockerd: engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi
command -v dockerd >/dev/null 2>&1 || fail "no engine answers and dockerd is not installed (run: scripts/setup.sh docker)"
[ "$(id -u)" = 0 ] || fail "no engine answers and starting dockerd needs root"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "dockerd: pid $(cat "$PIDFILE") is starting; waiting"
else
  # setsid: a session of its own, so neither make's end nor a terminal's
  # hangup takes the daemon with it.
  echo "dockerd: starting (log: $LOG)"
  setsid dockerd >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
fi
for _ in $(seq "$((WAIT_S * 2))"); do
  if answers; then
    echo "dockerd: engine answers ($(docker version -f '{{.Server.Version}}'), storage driver $(docker info -f '{{.Driver}}'))"
    exit 0
  fi
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || fail "dockerd exited during start"
  sleep 0.5
done
fail "dockerd started but 'docker info' did not answer within ${WAIT_S}s"
