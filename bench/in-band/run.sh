#!/usr/bin/env bash
# run.sh — the first stage under load, end to end (docs/classifier.md, "The in-band head").
#
# Dolly's test split through /v1/classify of a gateway with the built-in simulated pools and
# the latency-first narrowing (cascade.narrow_from 0, narrow_to 2: two queued texts and the
# first stage decides everything), at 16 clients and at 1, once with the shipped model and
# once with the same model without its in-band head (those manifest fields removed, the rest
# as shipped: what the gateway did before the head). A fresh gateway per run, so no answer is a cache hit.
#
#   bench/in-band/run.sh            # needs make build; writes bench/results/in-band/
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/.deps/venv/bin/python"
OUT="${OUT:-$ROOT/bench/results/in-band}"
PORT="${PORT:-18480}"
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/triage-in-band-XXXXXX)"
trap 'kill "${gw:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

# The shipped model without its in-band head.
cp -r "$ROOT/models" "$WORK/no-in-band"
"$PY" - "$WORK/no-in-band/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for k in ("in_band_head_file", "in_band_head_sha256", "in_band_features"):
    m["static"].pop(k, None)
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY

run() { # NAME MODEL_DIR CLIENTS
  (cd "$ROOT" && TRIAGE_CLASSIFIER_MODEL_DIR="$2" TRIAGE_CASCADE_NARROW_FROM=0 TRIAGE_CASCADE_NARROW_TO=2 \
    exec bin/triage --simulate --listen "127.0.0.1:$PORT") >"$WORK/$1.log" 2>&1 &
  gw=$!
  for _ in $(seq 240); do curl -sf "127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.5; done
  "$PY" "$ROOT/bench/in-band/measure.py" "http://127.0.0.1:$PORT" "$3" "$OUT/$1.json"
  kill "$gw"; wait "$gw" 2>/dev/null || true
}
uptime > "$OUT/uptime.txt"
for rep in 1 2; do
  run "in-band-head-c16-$rep" "$ROOT/models" 16
  run "static-head-c16-$rep" "$WORK/no-in-band" 16
done
run in-band-head-c1 "$ROOT/models" 1
run static-head-c1 "$WORK/no-in-band" 1
uptime >> "$OUT/uptime.txt"
"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
lines = ["# The first stage under load, end to end", "",
         f"- Command: `bench/in-band/run.sh`; load average before and after: {' / '.join(l.split('load average:')[1].strip() for l in (out / 'uptime.txt').read_text().splitlines())}",
         "- Gateway: `bin/triage --simulate`, `cascade.narrow_from 0`, `narrow_to 2`; Dolly's test split (1,135 rows) through `/v1/classify`, one text per request", "",
         "| run | clients | accuracy (test) | decided by the first stage | cache hits (repeated texts) |", "|---|---|---|---|---|"]
for f in sorted(out.glob("*.json")):
    r = json.loads(f.read_text())
    lines.append(f"| {f.stem} | {r['clients']} | {100 * r['accuracy']:.2f}% | {100 * r['static_share']:.1f}% | {r['cache_hits']} |")
(out / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
