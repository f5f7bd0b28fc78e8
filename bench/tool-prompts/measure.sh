#!/usr/bin/env bash
# measure.sh — how the cascade's first stage does on the prompts benchmark tools send
# (docs/classifier.md, "Prompts benchmark tools send").
#
# Makes the prompts: NVIDIA's aiperf (the pinned .deps/aiperf-venv) run against one mockllm
# replica with synthetic 128- and 550-token prompts (550 is aiperf's default --isl), its
# inputs.json kept; and guidellm 0.8.1's synthetic prompts (Faker text, 128 and 512 tokens),
# made by prompts.py as guidellm makes them. Then classifies each prompt once through two
# gateways on the shipped model: cascade on with the model's band held fixed, and cascade off
# (MiniLM's own answer). Writes table.md and results.json to OUT.
#
#   make bench-tool-prompts                       # needs make build and scripts/setup.sh aiperf
#   N=100 OUT=/tmp/tp bench/tool-prompts/measure.sh
#
# Everything listens on 127.0.0.1; every server is stopped at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/tool-prompts"
PY="$ROOT/.deps/aiperf-venv/bin/python"
AIPERF="$ROOT/.deps/aiperf-venv/bin/aiperf"
N="${N:-300}"
OUT="${OUT:-$ROOT/bench/results/tool-prompts}"
BASE="${BASE_PORT:-18400}"
[ -x "$AIPERF" ] || { echo "measure.sh: $AIPERF missing: run scripts/setup.sh aiperf" >&2; exit 1; }
[ -x "$ROOT/bin/triage" ] || { echo "measure.sh: bin/triage missing: run make build" >&2; exit 1; }
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/triage-tool-prompts-XXXXXX)"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Faker, pinned by hash, into its own directory (no dependencies): only this script uses it.
if ! PYTHONPATH="$ROOT/.deps/faker" "$PY" -c 'import faker, sys; sys.exit(faker.VERSION != "40.63.0")' 2>/dev/null; then
  "$PY" -m pip install --quiet --no-deps --require-hashes --target "$ROOT/.deps/faker" -r "$HERE/requirements.txt"
fi

"$ROOT/bin/mockllm" --listen "127.0.0.1:$BASE" --preset fast --log-level warn >"$WORK/mockllm.log" 2>&1 &
pids+=($!)
for isl in 128 550; do
  "$AIPERF" profile --model mock-fast --url "http://127.0.0.1:$BASE" --endpoint-type chat --streaming \
    --wait-for-model-timeout 30 --wait-for-model-mode both --wait-for-model-interval 1 \
    --concurrency 8 --request-count "$N" --num-dataset-entries "$N" --isl "$isl" --osl 8 --random-seed 1 \
    --tokenizer "$ROOT/.deps/encoders/all-minilm-l6-v2" --ui-type none --artifact-dir "$WORK/aiperf-$isl" \
    >"$WORK/aiperf-$isl.log" 2>&1 || { echo "measure.sh: aiperf failed; see $WORK/aiperf-$isl.log" >&2; exit 1; }
  "$PY" "$HERE/prompts.py" aiperf "$WORK/aiperf-$isl/inputs.json" "$WORK/aiperf-$isl.jsonl"
done
for tokens in 128 512; do
  PYTHONPATH="$ROOT/.deps/faker" "$PY" "$HERE/prompts.py" guidellm "$tokens" "$N" "$WORK/guidellm-$tokens.jsonl"
done

# Two gateways with the built-in simulated pools: the cascade with the model's band held fixed,
# and MiniLM alone.
(cd "$ROOT" && TRIAGE_CASCADE_NARROW_TO=0 exec bin/triage --simulate --listen "127.0.0.1:$((BASE + 1))") >"$WORK/cascade.log" 2>&1 &
pids+=($!)
(cd "$ROOT" && TRIAGE_CASCADE_ENABLED=false exec bin/triage --simulate --listen "127.0.0.1:$((BASE + 2))") >"$WORK/encoder.log" 2>&1 &
pids+=($!)
for port in $((BASE + 1)) $((BASE + 2)); do
  for _ in $(seq 240); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.5; done
  curl -sf "127.0.0.1:$port/readyz" >/dev/null || { echo "measure.sh: gateway on $port not ready; see $WORK" >&2; exit 1; }
done
band=$("$PY" -c 'import json,sys; b=json.load(open(sys.argv[1]))["static"]["band"]; print(b[0], b[1])' "$ROOT/models/manifest.json")
cd "$OUT"
{
  echo "# The cascade on prompts benchmark tools send"
  echo
  echo "- Command: \`make bench-tool-prompts\` (bench/tool-prompts/measure.sh), $N prompts a set"
  echo "- Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%dT%H:%M:%SZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- Model: $(grep -m1 '"name"' "$ROOT/models/manifest.json" | cut -d'"' -f4), band $band"
  echo
  "$PY" "$HERE/classify.py" "http://127.0.0.1:$((BASE + 1))" "http://127.0.0.1:$((BASE + 2))" $band \
    "aiperf, --isl 128=$WORK/aiperf-128.jsonl" "aiperf, --isl 550 (its default)=$WORK/aiperf-550.jsonl" \
    "guidellm, 128 tokens=$WORK/guidellm-128.jsonl" "guidellm, 512 tokens=$WORK/guidellm-512.jsonl"
} > table.md
cat table.md
rm -rf "$WORK"
