#!/usr/bin/env bash
# Cache-hit throughput of the gateway's HTTP path beside a bare net/http server,
# both driven by wrk (Debian package wrk) with the same connections, threads
# and duration, one after the other in one run. wrk is a far lighter client
# than a Go load generator on the same 2 cores, so this is the HTTP path's
# ceiling. Traffic goes to 127.0.0.1 only; each run lasts DURATION.
#
#   bench/wrk/run.sh            (after make build; prints both wrk reports)
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
command -v wrk >/dev/null || { echo "wrk not installed: apt-get install wrk" >&2; exit 1; }
gw_port=18931; hello_port=18932
bin/triage --simulate --listen 127.0.0.1:$gw_port >/tmp/triage-wrk.log 2>&1 & gw=$!
bin/triage-bench hello --listen 127.0.0.1:$hello_port >/dev/null 2>&1 & hello=$!
trap 'kill $gw $hello 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 1 300); do curl -fs 127.0.0.1:$gw_port/readyz >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs -H 'content-type: application/json' 127.0.0.1:$gw_port/v1/classify \
  -d '{"text":"Classify each of these as a fruit or a vegetable: apple, carrot, banana, leek."}' >/dev/null
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== gateway POST /v1/classify (cache hits), $CONNS connections, $DURATION"
wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s bench/wrk/classify_hit.lua http://127.0.0.1:$gw_port/v1/classify
echo "== bare net/http (triage-bench hello), same client settings"
wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s bench/wrk/hello_post.lua http://127.0.0.1:$hello_port/
