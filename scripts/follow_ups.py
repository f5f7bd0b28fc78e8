#!/usr/bin/env python3
"""A person's follow-up in a chat: which pool the second turn gets, against the first.

A chat goes on after its first answer: "Make it shorter.", "Thanks!", or a new request. The
gateway classifies the last user message alone. This script starts a gateway (`--triage-bin`,
default bin/triage, built-in simulated pools), sends 150 Dolly instructions of the four
training categories without a context (seeded) as first turns through /v1/chat/completions, then
each conversation again with Dolly's answer and a follow-up as the second turn, and reports how
many second turns went to another pool than the first:

- follow-ups that carry no request of their own (15 common phrasings, one drawn per
  conversation): the task has not changed, so the first turn's pool is the right one;
- follow-ups that are a new request (another Dolly instruction): the new request's own pool
  (its first turn alone) is the right one.

For each, it also classifies through /v1/classify the alternative of reading the task and the
follow-up together (one text, a space between) and reports how often that gives the right
pool. Standard library only.

    scripts/follow_ups.py [--triage-bin bin/triage] [--tasks 150]
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_turns import DOLLY, REPO, Gateway  # noqa: E402

LABELS = {"classification": 0, "summarization": 0, "creative_writing": 1, "general_qa": 1}
FOLLOW_UPS = ["Make it shorter.", "Thanks!", "Explain that in simpler terms.", "Give me another example.",
              "Translate it to French.", "Why?", "Can you expand on the second point?", "Write it as a bulleted list.",
              "Are you sure?", "Can you say more about that?", "What do you mean?", "ok",
              "Rewrite it in a more formal tone.", "Give me three more.", "Summarize your answer in one sentence."]


def chat(gw, messages):
    h, _ = gw.post("/v1/chat/completions", {"model": "auto", "max_tokens": 4, "messages": messages})
    return h["x-router-path"]


def label(gw, text):
    return "slow" if gw.post("/v1/classify", {"text": text})[1]["results"][0]["model_label"] == 1 else "fast"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triage-bin", default=os.path.join(REPO, "bin", "triage"))
    ap.add_argument("--tasks", type=int, default=150)
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(DOLLY)]
    rows = [r for r in rows if r["category"] in LABELS and not r["context"].strip()]
    rng = random.Random(5)
    tasks, news = rng.sample(rows, args.tasks), rng.sample(rows, args.tasks)
    gw = Gateway(args.triage_bin)
    try:
        first = [chat(gw, [{"role": "user", "content": r["instruction"]}]) for r in tasks]
        own = [chat(gw, [{"role": "user", "content": r["instruction"]}]) for r in news]
        print(f"binary: {args.triage_bin}; {len(tasks)} conversations; first turns on the fast pool: "
              f"{first.count('fast')}, slow: {first.count('slow')}")
        print("\n| second turn | conversations | on another pool than the right one: last message alone (shipped) "
              "| the task and the follow-up read together (not shipped) |")
        print("|---|---|---|---|")
        for kind, follow, right in (
                ("a follow-up without a request of its own (right: the first turn's pool)",
                 [rng.choice(FOLLOW_UPS) for _ in tasks], first),
                ("a new request (right: its own pool)", [r["instruction"] for r in news], own)):
            second, together = [], []
            for t, f in zip(tasks, follow):
                msgs = [{"role": "user", "content": t["instruction"]}, {"role": "assistant", "content": t["response"]},
                        {"role": "user", "content": f}]
                second.append(chat(gw, msgs))
                together.append(label(gw, t["instruction"] + " " + f))
            wrong = sum(a != b for a, b in zip(second, right))
            wrong_t = sum(a != b for a, b in zip(together, right))
            differ = [i for i in range(len(tasks)) if right[i] != first[i]]
            extra = ""
            if differ:
                extra = (f" (where it differs from the first turn's, {len(differ)}: "
                         f"{sum(second[i] != right[i] for i in differ)} / {sum(together[i] != right[i] for i in differ)})")
            print(f"| {kind} | {len(tasks)} | {wrong} ({100 * wrong / len(tasks):.1f}%) | "
                  f"{wrong_t} ({100 * wrong_t / len(tasks):.1f}%){extra} |")
        print("\n| follow-up, alone through /v1/classify | P(slow) |")
        print("|---|---|")
        for f in FOLLOW_UPS:
            print(f"| {f} | {gw.post('/v1/classify', {'text': f})[1]['results'][0]['p_slow']:.3f} |")
    finally:
        gw.close()


if __name__ == "__main__":
    main()
