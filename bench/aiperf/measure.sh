#!/usr/bin/env bash
# measure.sh — the gateway's own cost as NVIDIA's aiperf sees it (docs/gateway.md, "Measure it yourself").
#
# Starts one mockllm replica (fast preset) and a gateway whose fast and slow pools are both
# that replica, then runs aiperf four times for DURATION seconds each: streaming chat at
# CONCURRENCY, 256-token prompts, 16 output tokens, against the gateway (model auto) and
# against the replica directly (model mock-fast), once with a few prompts repeated (the
# gateway's result cache hits after the warm-up) and once with a new prompt per request
# (every classification is a cache miss). Prints a markdown table of TTFT and errors.
#
#   bench/aiperf/measure.sh                 # needs make build and scripts/setup.sh aiperf
#   CONCURRENCY=16 DURATION=30 bench/aiperf/measure.sh
#
# Everything listens on 127.0.0.1; both servers are stopped at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
AIPERF="$ROOT/.deps/aiperf-venv/bin/aiperf"
TOKENIZER="$ROOT/.deps/encoders/all-minilm-l6-v2"
CONCURRENCY="${CONCURRENCY:-8}"
DURATION="${DURATION:-20}"
REPLICA_PORT="${REPLICA_PORT:-18001}"
GATEWAY_PORT="${GATEWAY_PORT:-18080}"
OUT="${OUT:-$(mktemp -d /tmp/triage-aiperf-XXXXXX)}"
[ -x "$AIPERF" ] || { echo "measure.sh: $AIPERF missing: run scripts/setup.sh aiperf" >&2; exit 1; }
[ -x "$ROOT/bin/triage" ] || { echo "measure.sh: bin/triage missing: run make build" >&2; exit 1; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$ROOT/bin/mockllm" --listen "127.0.0.1:$REPLICA_PORT" --preset fast --log-level warn >"$OUT/mockllm.log" 2>&1 &
pids+=($!)
cat >"$OUT/one-replica.yaml" <<YAML
pools:
  fast:
    replicas: [{url: "http://127.0.0.1:$REPLICA_PORT", id: replica}]
  slow:
    replicas: [{url: "http://127.0.0.1:$REPLICA_PORT", id: replica}]
YAML
(cd "$ROOT" && exec bin/triage --config "$OUT/one-replica.yaml" --listen "127.0.0.1:$GATEWAY_PORT") >"$OUT/triage.log" 2>&1 &
pids+=($!)
for _ in $(seq 120); do curl -sf "127.0.0.1:$GATEWAY_PORT/readyz" >/dev/null && break; sleep 0.5; done
curl -sf "127.0.0.1:$GATEWAY_PORT/readyz" >/dev/null || { echo "measure.sh: gateway not ready; see $OUT/triage.log" >&2; exit 1; }

# run NAME URL MODEL PROMPTS: one aiperf profile; PROMPTS distinct prompts, cycled.
run() {
  "$AIPERF" profile --model "$3" --url "$2" --endpoint-type chat --streaming \
    --wait-for-model-timeout 30 --wait-for-model-mode both --wait-for-model-interval 1 \
    --concurrency "$CONCURRENCY" --benchmark-duration "$DURATION" --warmup-request-count "$((4 * CONCURRENCY))" \
    --isl 256 --osl 16 --num-dataset-entries "$4" --random-seed 1 \
    --tokenizer "$TOKENIZER" --use-server-token-count \
    --ui-type none --artifact-dir "$OUT/$1" >"$OUT/$1.log" 2>&1 \
    || { echo "measure.sh: aiperf $1 failed; see $OUT/$1.log" >&2; exit 1; }
}
GW="http://127.0.0.1:$GATEWAY_PORT" DIRECT="http://127.0.0.1:$REPLICA_PORT"
run gateway-hit "$GW" auto 16
run direct-hit "$DIRECT" mock-fast 16
run gateway-miss "$GW" auto 20000
run direct-miss "$DIRECT" mock-fast 20000

"$ROOT/.deps/venv/bin/python" - "$OUT" "$CONCURRENCY" <<'PY'
import json, sys
out, conc = sys.argv[1], sys.argv[2]
def load(name):
    return json.load(open(f"{out}/{name}/profile_export_aiperf.json"))
print(f"| prompts ({conc} clients) | target | requests | errors | req/s | TTFT p50 | TTFT p99 | added p50 | added p99 |")
print("|---|---|---|---|---|---|---|---|---|")
for kind, label in (("hit", "repeated (cache hit)"), ("miss", "new each request (cache miss)")):
    d, g = load(f"direct-{kind}"), load(f"gateway-{kind}")
    for name, r in (("replica directly", d), ("gateway", g)):
        t = r["time_to_first_token"]
        errs = sum(e.get("count", 0) for e in r["error_summary"])
        added = ("", "") if r is d else (f"{t['p50'] - d['time_to_first_token']['p50']:+.2f} ms", f"{t['p99'] - d['time_to_first_token']['p99']:+.2f} ms")
        print(f"| {label} | {name} | {r['request_count']['avg']:.0f} | {errs} | {r['request_throughput']['avg']:.1f} | "
              f"{t['p50']:.2f} ms | {t['p99']:.2f} ms | {added[0]} | {added[1]} |")
PY
echo "artifacts: $OUT" >&2
