"""The first stage under load, end to end: Dolly's test split through /v1/classify.

    measure.py URL CLIENTS OUT.json

Sends every row of the notebook's test split (the same stratified 80/20 split, seed 42; the
instruction and its context) once to a running gateway's /v1/classify, one text per request from
CLIENTS concurrent clients, and compares each answer's model_label with the row's label. Prints
and writes the accuracy, the share the first stage decided and the mean encoder queue seen.
Run with the notebook's venv (.deps/venv): it reads the split with scikit-learn and
train/dataset.py, as the notebook does.
"""
import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "train"))
from dataset import DOLLY_LABELS, load_dolly  # noqa: E402


def test_split():
    rows, _ = load_dolly(ROOT.parent / "shared" / "datasets" / "dolly-15k-dev.jsonl")
    cats = np.array([r.category for r in rows])
    _, idx_test = train_test_split(np.arange(len(rows)), test_size=0.2, random_state=42, stratify=cats)
    return [rows[i] for i in idx_test]


def classify(url, row):
    body = json.dumps({"text": row.instruction, "context": row.context}).encode()
    req = urllib.request.Request(url + "/v1/classify", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)["results"][0]


def main(url, clients, out):
    rows = test_split()
    with ThreadPoolExecutor(clients) as pool:
        res = list(pool.map(lambda r: classify(url, r), rows))
    gold = np.array([DOLLY_LABELS[r.category] for r in rows])
    got = np.array([r["model_label"] for r in res])
    static = np.array([r["stage"] == "static" for r in res])
    # A row whose text repeats an earlier one (after the noise filter) can be a cache hit.
    out_row = {"clients": clients, "rows": len(rows), "accuracy": float(np.mean(got == gold)),
               "static_share": float(static.mean()), "cache_hits": sum(r["cache"] == "hit" for r in res)}
    print(json.dumps(out_row))
    Path(out).write_text(json.dumps(out_row, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
