#!/usr/bin/env python3
"""MFU against GFLOP per matmul (the SemiAnalysis sweep plot) from titan-bench's CSV.

    ./build/titan-bench --csv outputs/matmul_sweep.csv
    /usr/bin/python3 scripts/plot_matmul_sweep.py outputs/matmul_sweep.csv outputs/matmul_sweep.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_matmul_sweep.py SWEEP.csv OUT.png")
    with open(sys.argv[1]) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no rows (run ./build/titan-bench --csv {sys.argv[1]})")
    chips = [k[:-4] for k in rows[0] if k.endswith("_mfu") and k != "cpu_mfu"]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    markers = {1: "o", 128: "s", 2048: "^"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = [("cpu", "this CPU (measured, fp32)")] + [(c, f"{c} (simulated)") for c in chips]
    for i, (key, label) in enumerate(series):
        for M, mk in markers.items():
            pts = [(float(r["gflop"]), 100 * float(r[f"{key}_mfu"])) for r in rows
                   if int(r["M"]) == M and r[f"{key}_mfu"] not in ("", None)]
            if not pts:
                continue
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, linestyle="-" if M == 2048 else ":",
                    color=colors[i % len(colors)], label=f"{label}, M={M}", markersize=4, linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("GFLOP per matmul (nn.functional.linear, projection shapes of open-weight models)")
    ax.set_ylabel("MFU (%)")
    ax.set_title("titan-bench: matmul MFU sweep (M = 1, 128, 2048)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
