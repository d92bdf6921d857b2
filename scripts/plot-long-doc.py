#!/usr/bin/env python3
"""Draws the results of scripts/long-doc-bench.sh (its --out folder) as one PNG.

Usage: plot-long-doc.py RESULTS_DIR [OUT.png]
Reads RESULTS_DIR/pipeline-*.json (one `impress bench pipeline --json` per document size) and
draws, against the document's length: each system's mean time to first token (left) and SSD
megabytes read per question (right). Writes OUT.png (default RESULTS_DIR/long-doc-ttft.png).
The title names the CPU and the model. Run it with the reference venv's python.
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    results = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(results, "long-doc-ttft.png")
    runs = []
    for path in glob.glob(os.path.join(results, "pipeline-*.json")):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        sys.exit(f"no pipeline-*.json in {results}")
    runs.sort(key=lambda r: r["document_tokens"])
    systems = [s["system"] for s in runs[0]["systems"]]
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in systems:
        xs, ttft, mb = [], [], []
        for r in runs:
            for s in r["systems"]:
                if s["system"] == name:
                    xs.append(r["document_tokens"])
                    ttft.append(s["mean_ttft_ms"])
                    mb.append(s["mean_ssd_bytes"] / 1e6)
        ax_t.plot(xs, ttft, marker="o", label=name)
        if any(m > 0 for m in mb):
            ax_b.plot(xs, mb, marker="o", label=name)
    ax_t.set_xlabel("document tokens")
    ax_t.set_ylabel("mean time to first token (ms)")
    ax_t.grid(alpha=0.3)
    ax_t.legend(fontsize=8)
    ax_b.set_xlabel("document tokens")
    ax_b.set_ylabel("SSD MB read per question")
    ax_b.grid(alpha=0.3)
    ax_b.legend(fontsize=8)
    r0 = runs[0]
    fig.suptitle(f"Questions over long documents: {r0.get('cpu', '?')}, {r0.get('backend', 'cpu')}, "
                 f"{r0['questions']} questions per size", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
