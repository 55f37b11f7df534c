#!/usr/bin/env python3
"""Compares two or more titan runs (an ablation and its baseline): what their configs changed, their losses
at the steps they share, throughput and MFU, as text and as a PNG of the loss curves.

  /usr/bin/python3 scripts/compare_runs.py outputs/qwen3_debug outputs/ablation_layernorm [--out compare.png]

Each argument is a job folder (its metrics.jsonl and config.yaml, as titan-train writes them). The first run is
the baseline: differences are printed relative to it. The PNG goes to --out (default: compare.png in the
current folder).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# keys that differ between any two runs by nature (where they write), not what the run trained
IGNORED = {"job.dump_folder", "job.description", "job.print_args"}


def read_config(folder):
    """config.yaml as {section.key: value text} (titan writes two levels: `section:` then `  key: value`)."""
    path = os.path.join(folder, "config.yaml")
    flat, section = {}, None
    if not os.path.exists(path):
        return flat
    with open(path) as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if not line.startswith(" "):
                section = line.strip().rstrip(":")
            elif section and ":" in line:
                key, value = line.strip().split(":", 1)
                flat[f"{section}.{key.strip()}"] = value.strip().strip('"')
    return flat


def read_metrics(folder):
    """(train rows by step, validation losses by step); a resumed job's redone steps keep their last row."""
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"compare_runs: {path} not found (a titan-train job folder with metrics.save_jsonl true)")
    train, val = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"compare_runs: {path}:{n}: not JSON ({e})")
            if "val_loss" in r:
                val[r["step"]] = r["val_loss"]
            elif "loss" in r:
                train[r["step"]] = r
    if not train:
        sys.exit(f"compare_runs: {path}: no training rows")
    return train, val


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="job folders; the first is the baseline")
    ap.add_argument("--out", default="compare.png", help="the PNG of the loss curves")
    a = ap.parse_args()
    if len(a.runs) < 2:
        sys.exit("compare_runs: give two or more job folders (the first is the baseline)")
    names = [os.path.basename(os.path.normpath(r)) or r for r in a.runs]
    configs = [read_config(r) for r in a.runs]
    metrics = [read_metrics(r) for r in a.runs]

    print("config differences (baseline first):")
    keys = sorted(set().union(*configs) - IGNORED)
    diff = [k for k in keys if len({c.get(k, "(absent)") for c in configs}) > 1]
    for k in diff:
        print(f"  {k}: " + " | ".join(c.get(k, "(absent)") for c in configs))
    if not diff:
        print("  none (the same job config)")

    base_train, base_val = metrics[0]
    print(f"\n{'run':28s} {'last step':>9s} {'loss':>9s} {'d loss':>9s} {'val loss':>9s} {'d val':>9s} "
          f"{'tok/s/rank':>11s} {'MFU %':>7s}")
    for name, (train, val) in zip(names, metrics):
        shared = sorted(set(train) & set(base_train))
        last = shared[-1] if shared else max(train)
        loss = train[last]["loss"]
        d = loss - base_train[last]["loss"] if last in base_train else float("nan")
        vshared = sorted(set(val) & set(base_val))
        vl = val[vshared[-1]] if vshared else (val[max(val)] if val else float("nan"))
        dv = vl - base_val[vshared[-1]] if vshared else float("nan")
        steady = [r for s, r in sorted(train.items()) if s != min(train)] or list(train.values())
        tps = sum(r["tps"] for r in steady) / len(steady)
        mfu = sum(r["mfu"] for r in steady) / len(steady)
        print(f"{name[:28]:28s} {last:9d} {loss:9.4f} {d:+9.4f} {vl:9.4f} {dv:+9.4f} {tps:11,.0f} {mfu:7.2f}")
    print("(loss and val loss at the last step every run logged; d: minus the baseline's; tok/s and MFU: means "
          "over the logged steps after the first)")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, (train, val) in zip(names, metrics):
        steps = sorted(train)
        line, = ax1.plot(steps, [train[s]["loss"] for s in steps], label=name)
        if val:
            vs = sorted(val)
            ax2.plot(vs, [val[s] for s in vs], "o-", color=line.get_color(), label=name)
    for ax, title in ((ax1, "training loss"), (ax2, "validation loss")):
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("; ".join(f"{k}: {' | '.join(c.get(k, '-') for c in configs)}" for k in diff[:3]) or "same config",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
