#!/usr/bin/env python3
"""Renders a job's metrics.jsonl as PNG curves: training and validation loss,
and throughput (tokens/s per rank) with MFU.

  /usr/bin/python3 scripts/plot_metrics.py outputs/qwen3_debug [--out outputs/qwen3_debug/curves.png]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("job_folder")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    path = os.path.join(a.job_folder, "metrics.jsonl")
    train, val = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            (val if "val_loss" in r else train).append(r)
    if not train:
        raise SystemExit(f"{path}: no training records")
    # a resumed job appends: keep the last record of each step
    train = list({r["step"]: r for r in train}.values())
    val = list({r["step"]: r for r in val}.values())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    if val:
        ax1.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation loss")
    ax1.set_xlabel("step")
    ax1.set_ylabel("cross-entropy (nats/token)")
    ax1.set_title("loss")
    ax1.grid(alpha=0.3)
    ax1.legend()
    steps = [r["step"] for r in train[1:]] or [train[0]["step"]]
    ax2.plot(steps, [r["tps"] for r in (train[1:] or train)], color="tab:green", label="tokens/s per rank")
    ax2.set_xlabel("step")
    ax2.set_ylabel("tokens/s")
    ax2.set_title("throughput")
    ax2.grid(alpha=0.3)
    ax3 = ax2.twinx()
    ax3.plot(steps, [r["mfu"] for r in (train[1:] or train)], color="tab:orange", alpha=0.6, label="MFU %")
    ax3.set_ylabel("MFU (%)")
    fig.legend(loc="lower center", ncol=4)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out = a.out or os.path.join(a.job_folder, "curves.png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
