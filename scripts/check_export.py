"""Check that a notebook export is complete and self-consistent.

usage: check_export.py EXPORT_DIR

Used on the operator-data example (make test-train-example): every file the
manifest names exists with its sha256, the static stage has a valid band, and
the parity file carries both stages' probabilities.
"""
import hashlib
import json
import sys
from pathlib import Path


def sha256(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main(d):
    d = Path(d)
    m = json.load(open(d / "manifest.json"))
    failures = []
    files = [(m["head"]["file"], m["head"]["sha256"])]
    s = m.get("static")
    if s is None:
        failures.append("manifest has no static stage")
    else:
        files += [(s["table_file"], s["table_sha256"]), (s["head_file"], s["head_sha256"])]
        if s.get("pooling") == "weighted_mean":
            files.append((s.get("weights_file", ""), s.get("weights_sha256", "")))
            if m.get("format_version", 1) < 2:
                failures.append("pooling weighted_mean needs format_version 2")
        if s.get("in_band_head_file"):
            files.append((s["in_band_head_file"], s.get("in_band_head_sha256", "")))
            if m.get("format_version", 1) < 3:
                failures.append("static.in_band_head_file needs format_version 3")
        if s.get("long_head_file"):
            files.append((s["long_head_file"], s.get("long_head_sha256", "")))
            if m.get("format_version", 1) < 4:
                failures.append("static.long_head_file needs format_version 4")
        if s.get("long_table_file"):
            files.append((s["long_table_file"], s.get("long_table_sha256", "")))
            if m.get("format_version", 1) < 5:
                failures.append("static.long_table_file needs format_version 5")
        if s.get("first_sentence"):
            if m.get("format_version", 1) < 6:
                failures.append("static.first_sentence needs format_version 6")
            if not s.get("long_head_file") or "first_sentence_mean_l2" not in s.get("long_features", []):
                failures.append("static.first_sentence without a long head that reads first_sentence_mean_l2")
        lo, hi = s["band"]
        if not (0 <= lo <= hi <= 1):
            failures.append(f"band {s['band']} invalid")
    for name, want in files:
        if not (d / name).exists():
            failures.append(f"{name} missing")
        elif sha256(d / name) != want:
            failures.append(f"{name}: sha256 does not match the manifest")
    rows = [json.loads(l) for l in open(d / "parity.jsonl", encoding="utf-8")]
    if not rows or any("p_slow" not in r or "p_static" not in r for r in rows):
        failures.append("parity.jsonl lacks p_slow/p_static")
    if s is not None and s.get("in_band_head_file") and any("p_static_in_band" not in r for r in rows):
        failures.append("parity.jsonl lacks p_static_in_band")
    if s is not None and s.get("long_head_file") and any("static_long" not in r for r in rows):
        failures.append("parity.jsonl lacks static_long")
    met = json.load(open(d / "metrics.json"))
    for k, r in met.get("static", {}).get("test", {}).items():
        print(f"{k}: accuracy {r['accuracy']:.4f}, static share {r['static_share_texts']:.3f}, "
              f"out-of-category agreement {r['ood_agreement']:.4f}")
    if failures:
        print("EXPORT CHECK FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"export check: {d} is complete ({len(rows)} parity rows, band {s['band']})")


if __name__ == "__main__":
    main(sys.argv[1])
