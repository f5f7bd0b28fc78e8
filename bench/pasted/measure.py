#!/usr/bin/env python3
"""Documents pasted into the message: how the gateway classifies them, with and without
server.split_pasted.

A user who wants a text summarised, or a question answered from it, pastes the text into the
message, before or after the request. This script sends Dolly rows that carry a context as one
text each through /v1/classify of four gateways it starts itself (--triage-bin, default
bin/triage, built-in simulated pools): the cascade and MiniLM alone (cascade.enabled false),
each with server.split_pasted on (the default) and off. It reports, per set, the share classified
as Dolly's label says (the four training categories), the agreement with MiniLM given the same
row with its context apart ({"text", "context"}: how the model was trained), the share the first
stage decided and the share called slow. Sets:

- the summarization rows of the notebook's test split (80/20, seed 42), instruction and context
  joined by a blank line and by a single newline, in both orders;
- 600 rows (seeded) of the out-of-category rows with a context (closed_qa,
  information_extraction), the same four ways;
- the test split's rows without a context, as they are (the rule must leave them alone);
- every Dolly instruction without a context that holds a blank line, and every one that holds
  a newline but no blank line (the rules split some);
- 210 coding requests (7 phrasings) with 30 lines of Go's standard library source after a
  blank line: no label, the rules leave code whole.

Run with the notebook's venv (.deps/venv): it reads the split with scikit-learn.

    .deps/venv/bin/python bench/pasted/measure.py [--triage-bin bin/triage] [--out DIR]
"""
import argparse
import glob
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "in-band"))
sys.path.insert(0, str(ROOT / "train"))
from measure import test_split  # noqa: E402
from dataset import DOLLY_LABELS, load_dolly  # noqa: E402

GATEWAYS = {  # name: environment
    "cascade": {},
    "MiniLM alone": {"TRIAGE_CASCADE_ENABLED": "false"},
    "cascade, split_pasted off": {"TRIAGE_SERVER_SPLIT_PASTED": "false"},
    "MiniLM alone, split_pasted off": {"TRIAGE_CASCADE_ENABLED": "false", "TRIAGE_SERVER_SPLIT_PASTED": "false"},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, env):
    port = free_port()
    # narrow_to 0: the band stays the model's, whatever this script's concurrency queues.
    e = dict(os.environ, TRIAGE_CASCADE_NARROW_TO="0", **env)
    proc = subprocess.Popen([binary, "--simulate", "--listen", f"127.0.0.1:{port}"], cwd=ROOT, env=e,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            urllib.request.urlopen(url + "/readyz", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"{binary} exited with {proc.returncode}")
            time.sleep(0.5)
    proc.kill()
    sys.exit("gateway not ready")


def classify(url, bodies):
    def one(body):
        req = urllib.request.Request(url + "/v1/classify", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.load(resp)["results"][0]
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, bodies))


CODE_REQUESTS = ["Fix the bug in this code:", "Explain what this code does.", "Refactor this to be more idiomatic.",
                 "Add error handling to this function.", "Write unit tests for this code.",
                 "Why might this code be slow, and how would you speed it up?", "Review this code for concurrency bugs."]


class Row:
    def __init__(self, instruction, context, category):
        self.instruction, self.context, self.category = instruction, context, category


def code_rows(rng, n=210):
    """Coding requests, each with 30 lines of Go's standard library source (`go env GOROOT`, so
    the texts are the same for one Go version) as the code it is about."""
    root = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()
    files = sorted(f for f in glob.glob(root + "/src/*/*.go") if not f.endswith("_test.go"))
    rows = []
    while len(rows) < n:
        lines = open(rng.choice(files), errors="replace").read().splitlines()
        if len(lines) >= 40:
            i = rng.randrange(0, len(lines) - 30)
            rows.append(Row(CODE_REQUESTS[len(rows) % len(CODE_REQUESTS)], "\n".join(lines[i:i + 30]), "code"))
    return rows


def sets():
    rng = random.Random(11)
    test = test_split()
    target, other = load_dolly(ROOT.parent / "shared" / "datasets" / "dolly-15k-dev.jsonl")
    summ = [r for r in test if r.context.strip()]
    ood = rng.sample([r for r in other if r.context.strip()], 600)
    I, C = (lambda r: r.instruction.strip()), (lambda r: r.context.strip())
    return [
        ("summarization (test split): instruction, blank line, context", summ, lambda r: I(r) + "\n\n" + C(r)),
        ("the same: context, blank line, instruction", summ, lambda r: C(r) + "\n\n" + I(r)),
        ("the same: instruction, one newline, context", summ, lambda r: I(r) + "\n" + C(r)),
        ("the same: context, one newline, instruction", summ, lambda r: C(r) + "\n" + I(r)),
        ("closed_qa and information_extraction (600): instruction, blank line, context", ood, lambda r: I(r) + "\n\n" + C(r)),
        ("the same: context, blank line, instruction", ood, lambda r: C(r) + "\n\n" + I(r)),
        ("the same: instruction, one newline, context", ood, lambda r: I(r) + "\n" + C(r)),
        ("the same: context, one newline, instruction", ood, lambda r: C(r) + "\n" + I(r)),
        ("test split rows without a context, as they are", [r for r in test if not r.context.strip()], lambda r: r.instruction),
        ("Dolly instructions holding a blank line, no context", [r for r in target + other
                                                                 if re.search(r"\n\s*\n", r.instruction) and not r.context.strip()],
         lambda r: r.instruction),
        ("coding requests, blank line, 30 lines of Go source", code_rows(random.Random(3)),
         lambda r: I(r) + "\n\n" + C(r)),
        ("Dolly instructions holding a newline but no blank line, no context",
         [r for r in target + other if "\n" in r.instruction.strip() and not re.search(r"\n\s*\n", r.instruction)
          and not r.context.strip()], lambda r: r.instruction),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triage-bin", default=str(ROOT / "bin" / "triage"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "pasted"))
    args = ap.parse_args()
    gws = {name: start(args.triage_bin, env) for name, env in GATEWAYS.items()}
    results = []
    try:
        for name, rows, text in sets():
            # The reference: MiniLM on the row as it was trained, the context apart.
            ref = np.array([r["model_label"] for r in classify(gws["MiniLM alone, split_pasted off"][1],
                                                                 [{"text": r.instruction, "context": r.context} for r in rows])])
            gold = np.array([DOLLY_LABELS.get(r.category, -1) for r in rows])
            labelled = gold >= 0
            row = {"set": name, "texts": len(rows)}
            for gw, (_, url) in gws.items():
                res = classify(url, [{"text": text(r)} for r in rows])
                lab = np.array([r["model_label"] for r in res])
                row[gw] = {"dolly_label": float(np.mean(lab[labelled] == gold[labelled])) if labelled.any() else None,
                           "agrees_with_minilm_context_apart": float(np.mean(lab == ref)),
                           "static": float(np.mean([r["stage"] == "static" for r in res])),
                           "slow": float(lab.mean())}
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for proc, _ in gws.values():
            proc.terminate()
            proc.wait()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    pct = lambda v: "—" if v is None else f"{100 * v:.1f}%"
    lines = ["| texts sent as one message | texts | " + " | ".join(
        f"{gw}: Dolly's label / agrees with MiniLM, context apart / first stage / slow" for gw in GATEWAYS) + " |",
             "|---|---|" + "---|" * len(GATEWAYS)]
    for row in results:
        cells = [" / ".join(pct(row[gw][k]) for k in ("dolly_label", "agrees_with_minilm_context_apart", "static", "slow"))
                 for gw in GATEWAYS]
        lines.append(f"| {row['set']} | {row['texts']} | " + " | ".join(cells) + " |")
    (out / "table.md").write_text("# Pasted documents\n\n- Command: `make bench-pasted` (bench/pasted/measure.py)\n"
                                  f"- Binary: {args.triage_bin}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n\n"
                                  + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
