#!/usr/bin/env python3
"""An agent's tool loop through the gateway's /v1/messages: which pool each turn gets.

A coding or research agent sends its task once and then, for every tool it runs, the whole
conversation again with the tool's output as the last user turn. This script replays that
against a gateway it starts itself (`--triage-bin`, default bin/triage, with its built-in
simulated pools) and reports, for the tool turns:

- how many went to another pool than the task's own first turn, and how many conversations
  changed pools at least once (a conversation that changes pools loses its prefix on the
  engine: the other pool prefills the whole conversation again; the prompt tokens of the turns
  that changed pool from the turn before are summed);
- the result cache (hit/miss), the stage that decided, and the gateway's own routing time
  (x-router-latency).

Then, on a second fresh gateway, what /v1/classify says of each kind of tool output on its own
(share decided by the first stage, share the model calls slow), and of each task alone: the
first turns are compared with it.

With --reminders the turns carry what Claude Code adds to them: a <system-reminder> text block
before the task in the first turn (the project's instructions) and one beside each tool result.

Tasks are 80 Dolly instructions (all eight categories, seeded); tool outputs are built from
deterministic local sources: 30 numbered lines of Go's standard library source, a directory
listing, grep hits, a `go test` run, a Go panic's stack trace, a JSON API answer and a Dolly
context (a web page's text). The Go sources are `go env GOROOT`'s, so the texts are the same for
one Go version. Standard library only.

    scripts/agent_turns.py [--triage-bin bin/triage] [--tasks 80] [--reminders]
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOLLY = os.path.join(REPO, "..", "shared", "datasets", "dolly-15k-dev.jsonl")


def goroot():
    return subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()


class ToolOutputs:
    """Tool outputs of seven kinds, the same for one seed and one Go version."""

    def __init__(self, seed=11):
        self.rng = random.Random(seed)
        self.root = goroot()
        src = self.root + "/src"
        self.go = sorted(f for f in glob.glob(src + "/*/*.go") + glob.glob(src + "/*/*/*.go") if not f.endswith("_test.go"))
        self.tests = sorted(glob.glob(src + "/*/*_test.go"))
        self.dirs = sorted(glob.glob(src + "/*/"))

    def rel(self, f):
        return f[len(self.root) + 5:]

    def code(self):
        while True:
            lines = open(self.rng.choice(self.go), errors="replace").read().splitlines()
            if len(lines) >= 40:
                i = self.rng.randrange(0, len(lines) - 30)
                return "\n".join(f"{i + k + 1}\t{l}" for k, l in enumerate(lines[i:i + 30]))

    def listing(self):
        d = self.rng.choice(self.dirs)
        return "\n".join(f"{'d' if os.path.isdir(d + e) else '-'}rw-r--r-- 1 root root {os.path.getsize(d + e):>7} {e}"
                         for e in sorted(os.listdir(d))[:40])

    def grep(self):
        while True:
            word, hits = self.rng.choice(["err", "Close", "context", "buffer", "timeout", "Read", "lock"]), []
            for f in self.rng.sample(self.go, 30):
                for k, l in enumerate(open(f, errors="replace").read().splitlines()):
                    if word in l:
                        hits.append(f"{self.rel(f)}:{k + 1}:{l.strip()}")
            if hits:
                return "\n".join(hits[:25])

    def test_run(self):
        while True:
            f = self.rng.choice(self.tests)
            names = re.findall(r"^func (Test\w+)\(", open(f, errors="replace").read(), re.M)
            if len(names) >= 3:
                break
        fail = self.rng.random() < 0.4
        bad = self.rng.choice(names) if fail else None
        out = []
        for t in names[:15]:
            out.append(f"=== RUN   {t}")
            if t == bad:
                out.append(f"    {os.path.basename(f)}:{self.rng.randrange(20, 900)}: got {self.rng.randrange(100)}, want {self.rng.randrange(100)}")
                out.append(f"--- FAIL: {t} (0.{self.rng.randrange(10, 99)}s)")
            else:
                out.append(f"--- PASS: {t} (0.00s)")
        pkg = self.rel(f).rsplit("/", 1)[0]
        out += ["FAIL" if fail else "PASS", f"{'FAIL' if fail else 'ok  '}\t{pkg}\t{self.rng.random() * 3:.3f}s"]
        return "\n".join(out)

    def trace(self):
        frames = []
        for f in self.rng.sample(self.go, 6):
            funcs = re.findall(r"^func (?:\(\w+ \*?(\w+)\) )?(\w+)\(", open(f, errors="replace").read(), re.M)
            if funcs:
                recv, name = self.rng.choice(funcs)
                pkg = self.rel(f).rsplit("/", 1)[0]
                frames.append(f"{pkg}.{recv + '.' if recv else ''}{name}(...)\n\t{f}:{self.rng.randrange(10, 800)} +0x{self.rng.randrange(16, 4096):x}")
        msg = self.rng.choice(["runtime error: index out of range [3] with length 3",
                               "runtime error: invalid memory address or nil pointer dereference",
                               "assignment to entry in nil map", "send on closed channel", "sync: negative WaitGroup counter"])
        return f"panic: {msg}\n\ngoroutine {self.rng.randrange(1, 90)} [running]:\n" + "\n".join(frames) + "\nexit status 2"

    def json_answer(self):
        r = self.rng
        items = [{"id": r.randrange(10 ** 6), "name": r.choice(["alpha", "beta", "gamma", "order", "user", "invoice"]) + str(r.randrange(100)),
                  "status": r.choice(["open", "closed", "pending", "active"]),
                  "created_at": f"2026-0{r.randrange(1, 9)}-1{r.randrange(0, 9)}T0{r.randrange(0, 9)}:12:00Z",
                  "amount": round(r.random() * 500, 2), "tags": r.sample(["a", "b", "urgent", "eu", "us", "beta"], 2)}
                 for _ in range(r.randrange(2, 7))]
        return json.dumps({"data": items, "total": len(items), "page": 1}, indent=2)

    def kinds(self, n, contexts):
        web = self.rng.sample(contexts, n)
        return {"file contents (30 numbered lines of Go)": [self.code() for _ in range(n)],
                "directory listing": [self.listing() for _ in range(n)],
                "grep hits": [self.grep() for _ in range(n)],
                "a go test run": [self.test_run() for _ in range(n)],
                "a Go panic's stack trace": [self.trace() for _ in range(n)],
                "a JSON API answer": [self.json_answer() for _ in range(n)],
                "a web page (a Dolly context)": web}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Gateway:
    def __init__(self, binary):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
        self.log = open(f"/tmp/agent-turns-{self.port}.log", "w")
        self.proc = subprocess.Popen([binary, "--simulate", "--listen", f"127.0.0.1:{self.port}"], cwd=REPO,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(self.url + "/readyz", timeout=2).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"gateway did not start; see {self.log.name}")
                time.sleep(0.2)

    def post(self, path, doc):
        rq = urllib.request.Request(self.url + path, data=json.dumps(doc).encode(), headers={"content-type": "application/json"})
        with urllib.request.urlopen(rq, timeout=60) as r:
            return r.headers, json.loads(r.read())

    def close(self):
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


# What Claude Code puts in user turns beside the user's words (paraphrased, same shape).
PROJECT_REMINDER = ("<system-reminder>\nAs you answer the user's questions, use this context.\n# Project instructions\n"
                    "Run the tests before every commit. Keep functions short. Never edit generated files.\n"
                    "Answer only what was asked.\n</system-reminder>")
TODO_REMINDER = ("<system-reminder>\nThe todo list is empty. Do not mention this to the user. If the task has "
                 "several steps, use the todo tool to track them.\n</system-reminder>")


def loop(gw, tasks, outputs, reminders, tool_turns=5):
    """Replays each task's tool loop; returns the counts the report prints."""
    c = {"turns": 0, "other_pool": 0, "convs_changed": 0, "changed_tokens": 0, "tokens": 0, "stage": {}, "cache": {}, "lat": [],
         "first": []}
    k = 0
    for i, task in enumerate(tasks):
        content = task
        if reminders:
            content = [{"type": "text", "text": PROJECT_REMINDER}, {"type": "text", "text": task}]
        msgs = [{"role": "user", "content": content}]
        h, _ = gw.post("/v1/messages", {"model": "auto", "max_tokens": 4, "messages": msgs})
        first = prev = h["x-router-path"]
        c["first"].append(first)
        changed = False
        for j in range(tool_turns):
            tid = f"toolu_{i}_{j}"
            msgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "run", "input": {"step": j}}]})
            blocks = [{"type": "tool_result", "tool_use_id": tid, "content": outputs[k % len(outputs)]}]
            if reminders:
                blocks.append({"type": "text", "text": TODO_REMINDER})
            msgs.append({"role": "user", "content": blocks})
            k += 1
            h, _ = gw.post("/v1/messages", {"model": "auto", "max_tokens": 4, "messages": msgs})
            path, tokens = h["x-router-path"], int(h["x-router-prompt-tokens"] or 0)
            c["turns"] += 1
            c["tokens"] += tokens
            c["other_pool"] += path != first
            changed |= path != first
            if path != prev:
                c["changed_tokens"] += tokens
            prev = path
            for key, hdr in (("stage", "x-router-stage"), ("cache", "x-router-cache")):
                c[key][h[hdr]] = c[key].get(h[hdr], 0) + 1
            c["lat"].append(float(h["x-router-latency"] or 0))
        c["convs_changed"] += changed
    c["lat"].sort()
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triage-bin", default=os.path.join(REPO, "bin", "triage"))
    ap.add_argument("--tasks", type=int, default=80)
    ap.add_argument("--reminders", action="store_true", help="add Claude Code's <system-reminder> blocks to the turns")
    args = ap.parse_args()

    rows = [json.loads(l) for l in open(DOLLY)]
    rng = random.Random(5)
    tasks = [r["instruction"] for r in rng.sample(rows, args.tasks)]
    contexts = [r["context"] for r in rows if len(r.get("context", "").split()) > 60]
    kinds = ToolOutputs().kinds(40, contexts)
    outputs = [t for ts in kinds.values() for t in ts]
    rng.shuffle(outputs)

    gw = Gateway(args.triage_bin)
    try:
        c = loop(gw, tasks, outputs, args.reminders)
    finally:
        gw.close()
    n, lat = c["turns"], c["lat"]
    print(f"binary: {args.triage_bin}; reminders: {args.reminders}")
    print(f"tool turns: {n} ({len(tasks)} tasks x 5); on another pool than the task's first turn: {c['other_pool']} "
          f"({100 * c['other_pool'] / n:.1f}%); conversations that changed pools: {c['convs_changed']} of {len(tasks)}")
    print(f"prompt tokens of the tool turns: {c['tokens']}; of those sent to another pool than the turn before: "
          f"{c['changed_tokens']} ({100 * c['changed_tokens'] / max(c['tokens'], 1):.1f}%)")
    print(f"cache: {c['cache']}; stage: {c['stage']}; x-router-latency p50 {lat[n // 2]:.3f} ms, "
          f"p90 {lat[int(n * 0.9)]:.3f} ms, p99 {lat[int(n * 0.99)]:.3f} ms, max {lat[-1]:.3f} ms")

    gw = Gateway(args.triage_bin)
    try:
        print("\n| tool output, alone through /v1/classify | texts | decided by the first stage | the model says slow |")
        print("|---|---|---|---|")
        for kind, texts in kinds.items():
            res = [gw.post("/v1/classify", {"text": t})[1]["results"][0] for t in texts]
            st = sum(r["stage"] == "static" for r in res) / len(res)
            slow = sum(r["model_label"] == 1 for r in res) / len(res)
            print(f"| {kind} | {len(res)} | {100 * st:.0f}% | {100 * slow:.0f}% |")
        alone = [gw.post("/v1/classify", {"text": t})[1]["results"][0]["path"] for t in tasks]
        same = sum(a == f for a, f in zip(alone, c["first"]))
        print(f"\nfirst turns on the pool /v1/classify gives the task's words alone: {same} of {len(tasks)}")
    finally:
        gw.close()


if __name__ == "__main__":
    sys.exit(main())
