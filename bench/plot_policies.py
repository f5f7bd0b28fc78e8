#!/usr/bin/env python3
"""Draw the replica-policy sweep (triage-bench policies --out DIR) as a PNG.

    .deps/venv/bin/python bench/plot_policies.py DIR/results.csv bench/results/policies.png

Left: time to first token per policy (p50 and p99 bars, mean as a dot).
Right: prefix-cache hit rate per policy (and, where the CSV has the column,
SLO attainment: the share of requests within the sweep's TTFT target), with
per-replica load max/mean on a second axis (1.0 is perfectly even; the
target bound 1.5 is dashed).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{src}: no rows")
    names = [r["policy"] for r in rows]
    x = list(range(len(rows)))
    p50 = [float(r["ttft_p50_ms"]) for r in rows]
    p99 = [float(r["ttft_p99_ms"]) for r in rows]
    mean = [float(r["ttft_mean_ms"]) for r in rows]
    hit = [100 * float(r["prefix_hit_rate"]) for r in rows]
    load = [float(r["load_max_over_mean"]) for r in rows]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    w = 0.38
    ax1.bar([i - w / 2 for i in x], p50, w, label="TTFT p50")
    ax1.bar([i + w / 2 for i in x], p99, w, label="TTFT p99")
    ax1.plot(x, mean, "o", color="black", label="TTFT mean")
    ax1.set_xticks(x, names, rotation=35, ha="right")
    ax1.set_ylabel("time to first token (ms)")
    ax1.set_title("Time to first token by replica policy")
    ax1.grid(axis="y", alpha=0.3)
    ax1.legend()

    ax2.bar(x, hit, 0.6, color="tab:green", label="prefix-cache hit rate")
    if "slo_attainment" in rows[0]:
        slo = [100 * float(r["slo_attainment"]) for r in rows]
        ax2.plot(x, slo, "s", color="tab:blue", label="TTFT within SLO target")
    ax2.set_xticks(x, names, rotation=35, ha="right")
    ax2.set_ylabel("share (%)")
    ax2.set_ylim(0, 100)
    ax2.set_title("Prefix-cache hit rate, SLO attainment and per-replica load")
    ax2.grid(axis="y", alpha=0.3)
    ax3 = ax2.twinx()
    ax3.plot(x, load, "D", color="tab:red", label="load max/mean")
    ax3.axhline(1.5, color="tab:red", linestyle="--", linewidth=1, alpha=0.6)
    ax3.set_ylabel("requests per replica, max/mean")
    ax3.set_ylim(0.9, max(2.2, max(load) + 0.1))
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, loc="lower right")

    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
