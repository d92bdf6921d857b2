#!/usr/bin/env python3
"""Draws the results of `impress bench workload` (its --out folder) as PNG plots.

Usage: plot-workload.py RESULTS_DIR
Reads RESULTS_DIR/workload.json (when there) and writes, next to it:
  ttft.png       mean / p50 / p99 time to first token per system, with each system's fidelity
                 (first-token agreement, greedy-continuation match, facts answered) under its name
  ttft-cdf.png   the distribution of TTFT per system
  ssd-bytes.png  SSD megabytes read per request, and read amplification
  hit-rates.png  where the chunks came from (device / host / SSD / team tier) per system
and for every RESULTS_DIR/sweep-NAME.json (impress bench workload --sweep NAME=...):
  sweep-NAME.png TTFT, SSD megabytes and fidelity of the swept system against the setting's
                 value, AS-like (full KV) as the reference line
Each title names the CPU and the workload the numbers were measured with.
Run it with the reference venv's python (scripts/setup.sh installs matplotlib there).
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def subtitle(r):
    return (f"{r['documents']} documents, {r['document_tokens']} tokens, {r['requests']} requests "
            f"(Zipf s={r['zipf_s']:.2f}); device {r['device_bytes'] / 1e6:.0f} MB, host "
            f"{r['host_bytes'] / 1e6:.0f} MB; keep {r['keep']:.2f}"
            f"{'; team tier under them' if r.get('team') else ''}\n{r['cpu']}")


def share(x):
    return "-" if x is None or x < 0 else f"{x * 100:.0f}%"


def fidelity_label(s):
    """The system's name with its fidelity figures, for an axis tick."""
    facts = s.get("facts", [])
    right = sum(1 for f in facts if f["correct"])
    lines = [s["system"], f"agree {share(s.get('first_token_agreement'))}"]
    if facts:
        lines.append(f"cont {share(s.get('continuation_match'))}")
        lines.append(f"facts {right}/{len(facts)}")
    return "\n".join(lines)


def plot_sweep(out, path):
    with open(path) as f:
        r = json.load(f)
    name = r["sweep"]
    swept = [s for s in r["systems"] if s["system"] != "as"]
    ref = next((s for s in r["systems"] if s["system"] == "as"), None)
    if not swept:
        return
    # The values as categories, in the order they ran (select-group's -1 means "a block group").
    xs = list(range(len(swept)))
    ticks = [f"{s['sweep_value']:g}" for s in swept]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5))
    ax.plot(xs, [s["mean_ttft_ms"] for s in swept], "o-", label=f"{swept[0]['system']} mean TTFT")
    ax.plot(xs, [s["p99_ttft_ms"] for s in swept], "o--", label=f"{swept[0]['system']} p99 TTFT")
    if ref:
        ax.axhline(ref["mean_ttft_ms"], color="gray", linestyle=":", label="AS-like (full KV) mean")
    ax.set_xticks(xs, ticks)
    ax.set_xlabel(name)
    ax.set_ylabel("TTFT (ms)")
    ax2 = ax.twinx()
    ax2.plot(xs, [s["mean_ssd_bytes"] / 1e6 for s in swept], "s-", color="black", label="SSD MB/request")
    if ref:
        ax2.axhline(ref["mean_ssd_bytes"] / 1e6, color="black", linestyle=":", label="AS-like SSD MB/request")
    ax2.set_ylabel("SSD MB per request")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="best", framealpha=0.6)
    bx.plot(xs, [max(0, s["first_token_agreement"]) * 100 for s in swept], "o-", label="first-token agreement")
    bx.plot(xs, [max(0, s["continuation_match"]) * 100 for s in swept], "o-",
            label=f"continuation match ({r['n_continue']} tokens)")
    bx.plot(xs, [max(0, s["fact_accuracy"]) * 100 for s in swept], "o-", label="facts answered")
    if ref and ref.get("fact_accuracy", -1) >= 0:
        bx.axhline(ref["fact_accuracy"] * 100, color="gray", linestyle=":", label="facts, full KV")
    bx.set_xticks(xs, ticks)
    bx.set_xlabel(name)
    bx.set_ylabel("%")
    bx.set_ylim(0, 105)
    bx.legend(fontsize=8)
    fig.suptitle(f"Sweep of {name}\n" + subtitle(r), fontsize=9)
    save(fig, os.path.join(out, f"sweep-{name}.png"))


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(path)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    for path in sorted(glob.glob(os.path.join(out, "sweep-*.json"))):
        plot_sweep(out, path)
    if not os.path.exists(os.path.join(out, "workload.json")):
        return
    with open(os.path.join(out, "workload.json")) as f:
        r = json.load(f)
    systems = r["systems"]
    names = [s["system"] for s in systems]
    x = range(len(names))

    fig, ax = plt.subplots(figsize=(10, 5))
    w = 0.27
    for i, (key, label) in enumerate([("mean_ttft_ms", "mean"), ("p50_ttft_ms", "p50"), ("p99_ttft_ms", "p99")]):
        ax.bar([j + (i - 1) * w for j in x], [s[key] for s in systems], w, label=label)
    ax.set_xticks(list(x), [fidelity_label(s) for s in systems], fontsize=7)
    ax.set_ylabel("TTFT (ms)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Time to first token\n" + subtitle(r), fontsize=9)
    save(fig, os.path.join(out, "ttft.png"))

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for s in systems:
        t = sorted(s["ttft_ms"])
        if t:
            ax.plot(t, [(i + 1) / len(t) for i in range(len(t))], label=s["system"])
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("share of requests")
    ax.legend(fontsize=8)
    ax.set_title("TTFT distribution\n" + subtitle(r), fontsize=9)
    save(fig, os.path.join(out, "ttft-cdf.png"))

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.bar(x, [s["mean_ssd_bytes"] / 1e6 for s in systems], 0.5, label="SSD MB per request")
    ax.set_xticks(list(x), names, rotation=20)
    ax.set_ylabel("MB read from the SSD per request")
    ax2 = ax.twinx()
    ax2.plot(list(x), [s["read_amplification"] for s in systems], "o-", color="black", label="read amplification")
    ax2.set_ylabel("read amplification")
    ax.set_title("SSD reads\n" + subtitle(r), fontsize=9)
    save(fig, os.path.join(out, "ssd-bytes.png"))

    fig, ax = plt.subplots(figsize=(9, 4.5))
    bottom = [0.0] * len(systems)
    for key, label in [("hit_device", "device"), ("hit_host", "host"), ("hit_ssd", "SSD"),
                       ("hit_team", "team tier")]:
        vals = [s.get(key, 0) * 100 for s in systems]
        ax.bar(x, vals, 0.5, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(list(x), names, rotation=20)
    ax.set_ylabel("% of chunks read")
    ax.legend()
    ax.set_title("Where the KV came from\n" + subtitle(r), fontsize=9)
    save(fig, os.path.join(out, "hit-rates.png"))


if __name__ == "__main__":
    main()
