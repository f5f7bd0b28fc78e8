#!/usr/bin/env bash
# beside.sh — runs a command in the background beside another, and fails if either fails.
#
#   scripts/beside.sh LOG 'BACKGROUND' FOREGROUND [ARG...]
#
# BACKGROUND (a bash command line) starts first, with its output in LOG; FOREGROUND runs
# as usual. Once both have ended, LOG is printed (each line prefixed "beside: "), and the
# exit status is FOREGROUND's, or 1 if only BACKGROUND failed. make test uses it to put
# installs that are mostly downloads beside steps that are all CPU (see the Makefile).
set -u
[ $# -ge 3 ] || { echo "usage: scripts/beside.sh LOG 'BACKGROUND' FOREGROUND [ARG...]" >&2; exit 2; }
log=$1 bg=$2
shift 2
mkdir -p "$(dirname "$log")"
echo "beside: started '$bg' (log: $log)"
# The subshell notes how long BACKGROUND itself took (wait only says when both had ended).
( start=$SECONDS; bash -c "$bg"; brc=$?; echo "$((SECONDS - start))" >"$log.took"; exit "$brc" ) >"$log" 2>&1 &
pid=$!
# An interrupted run takes the background command with it.
trap 'kill "$pid" 2>/dev/null; exit 130' INT TERM
"$@"
rc=$?
wait "$pid"
brc=$?
trap - INT TERM
sed 's/^/beside: /' "$log"
if [ "$brc" != 0 ]; then
  echo "beside: '$bg' failed (exit $brc)"
  [ "$rc" != 0 ] || rc=1
else
  echo "beside: '$bg' ended ok in $(cat "$log.took" 2>/dev/null || echo '?') s"
fi
exit "$rc"
