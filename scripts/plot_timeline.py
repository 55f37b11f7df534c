#!/usr/bin/env python3
"""A PNG of one step's timeline from titan's Chrome trace (simulated or measured): one lane per stream of
chip 0 / rank 0 (compute, each communication stream), kernels coloured by class, stalls in red.

    ./build/titan-train --config configs/qwen3_32b.yaml        # writes outputs/qwen3_32b/trace_trn2.json
    /usr/bin/python3 scripts/plot_timeline.py outputs/qwen3_32b/trace_trn2.json outputs/qwen3_32b/timeline.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def color(ev):
    if ev.get("cat") == "idle":
        return "#d62728"
    if ev.get("cat") == "bubble":  # a pipeline stage waiting for its neighbour
        return "#c7c7c7"
    if ev.get("cat") == "host":  # the device waiting for the host to issue its next kernel
        return "#17becf"
    if ev.get("cat") == "comm":
        return {"all_gather": "#1f77b4", "reduce_scatter": "#9467bd", "all_reduce": "#8c564b",
                "all_to_all": "#e377c2"}.get(ev["name"], "#7f7f7f")
    n = ev["name"]
    if n.startswith("linear") or n.startswith("matmul") or n.startswith("grouped"):
        return "#2ca02c"
    if n.startswith("flex_attention") or n.startswith("flex_score_mod"):
        return "#ff7f0e"
    return "#bcbd22"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_timeline.py TRACE.json OUT.png")
    with open(sys.argv[1]) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    # the first process (chip or rank): its first compute track (tid 1) and its collective tracks (tid >= 1000)
    pid = min((e["pid"] for e in events if e.get("ph") == "X"), default=None)
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == pid}
    lanes = sorted({e["tid"] for e in events if e.get("ph") == "X" and e.get("pid") == pid and
                    (e["tid"] == 1 or e["tid"] >= 1000)})
    if not lanes:
        sys.exit(f"{sys.argv[1]}: no timeline events")
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.6 * len(lanes)))
    for row, tid in enumerate(lanes):
        spans = [(e["ts"] / 1e6, e["dur"] / 1e6, color(e)) for e in events
                 if e.get("ph") == "X" and e.get("pid") == pid and e["tid"] == tid and e.get("cat") != "step"]
        ax.broken_barh([(s, d) for s, d, _ in spans], (row - 0.4, 0.8), facecolors=[c for _, _, c in spans],
                       linewidth=0)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([names.get(t, str(t)) for t in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    other = trace.get("otherData", {})
    ax.set_title(f"one step on {other.get('chip', '?')} ({other.get('system', '')}, {other.get('mode', '')}):"
                 f" {other.get('step_s', 0):.3f} s")
    ax.legend(handles=[Patch(color=c, label=l) for l, c in [
        ("GEMM", "#2ca02c"), ("attention", "#ff7f0e"), ("elementwise", "#bcbd22"), ("stall (waiting)", "#d62728"),
        ("host-bound", "#17becf"),
        ("all_gather", "#1f77b4"), ("reduce_scatter", "#9467bd"), ("all_reduce", "#8c564b"),
        ("all_to_all", "#e377c2")]], fontsize=7, ncol=8, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
