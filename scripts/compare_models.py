"""Check that a fresh notebook export matches the committed models/.

usage: compare_models.py COMMITTED_DIR FRESH_DIR

The notebook is deterministic (fixed split, fixed CV folds, lbfgs), so a fresh
run must reproduce the committed head: the same parity probabilities to 1e-4
and the same test metrics to 0.5 points. A mismatch means models/ was not
regenerated after a change to the notebook, the data or the encoder.
"""
import json
import sys
from pathlib import Path


def parity(d):
    return [json.loads(l) for l in open(d / "parity.jsonl", encoding="utf-8")]


def main(committed, fresh):
    committed, fresh = Path(committed), Path(fresh)
    failures = []
    for variant in ["", "int8"]:
        a, b = committed / variant, fresh / variant
        if not (b / "manifest.json").exists():
            failures.append(f"{b}/manifest.json missing: the notebook did not export {variant or 'fp32'}")
            continue
        pa, pb = parity(a), parity(b)
        if [r["text"] for r in pa] != [r["text"] for r in pb]:
            failures.append(f"{variant or 'fp32'}: parity texts differ")
        else:
            worst = max(abs(x["p_slow"] - y["p_slow"]) for x, y in zip(pa, pb))
            print(f"{variant or 'fp32'}: {len(pa)} parity rows, max |committed - fresh| = {worst:.2e}")
            if worst > 1e-4:
                failures.append(f"{variant or 'fp32'}: parity P(slow) differs by {worst:.2e} > 1e-4")
        ma = json.load(open(a / "metrics.json"))["test"]
        mb = json.load(open(b / "metrics.json"))["test"]
        for k in ["accuracy", "macro_f1", "grey_zone_rate"]:
            print(f"  {k}: committed {ma[k]:.4f}, fresh {mb[k]:.4f}")
            if abs(ma[k] - mb[k]) > 0.005:
                failures.append(f"{variant or 'fp32'}: {k} committed {ma[k]:.4f} vs fresh {mb[k]:.4f}")
    if failures:
        print("MODEL CHECK FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("model check: committed models/ matches a fresh notebook run")


if __name__ == "__main__":
    main(*sys.argv[1:3])
