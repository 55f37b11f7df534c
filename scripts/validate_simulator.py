#!/usr/bin/env python3
"""Validation of the simulated UltraServer against published training runs (docs/simulator.md).

Runs titan-train's simulation for each published measurement and prints simulated vs published
tokens/s and MFU with the relative error and the bar it must meet. Exit status 1 if any misses.

    ./scripts/validate_simulator.py [--build build] [--out outputs/validate_simulator]

Each run writes under its own folder of --out (never into a user's job folder).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, config, overrides, published tokens/s, per, published MFU (or None), bar, source)
CASES = [
    ("Qwen3-32B, 16 Trn2, eager", "configs/qwen3_32b.yaml", [], 11099, "total", 0.2389, 0.10,
     "SemiAnalysis, TorchTitan on Trainium2 (background article)"),
    ("Qwen3-32B, 16 Trn2, compiled", "configs/qwen3_32b.yaml", ["--simulation.mode", "compiled"], 14156, "total",
     0.3047, 0.10, "SemiAnalysis, TorchTitan on Trainium2 (background article)"),
    ("Llama 3 70B, 64 A100, FSDP, full AC", "configs/validation/llama3_70b_a100x64.yaml", [], 331, "chip", 0.517,
     0.20, "TorchTitan docs/performance.md (2024), Llama 3 table"),
    ("Llama 3 8B, 64 A100, FSDP, AC every 2nd", "configs/validation/llama3_8b_a100x64.yaml", [], 2904, "chip",
     0.568, 0.20, "TorchTitan docs/performance.md (2024), Llama 3 table, selective layer"),
    ("Llama 2 13B, 64 A100, FSDP, no AC", "configs/validation/llama2_13b_a100x64.yaml", [], 2162, "chip", 0.611,
     0.20, "TorchTitan docs/performance.md (2024), Llama 2 table"),
    ("Llama 3.1 405B, 128 H100, FSDP16 x TP8", "configs/validation/llama31_405b_h100x128.yaml", [], 109, "chip",
     0.290, 0.20, "TorchTitan docs/performance.md (2024), Llama 3.1 table"),
]

# Rows the simulator misses today, with why; they are printed, marked open, and do not fail the run. Nothing
# was refitted to bring them in (docs/simulator.md, "Validation").
OPEN = {
    "Llama 3.1 405B, 128 H100, FSDP16 x TP8":
        "open (issue 11): priced on the 700 W HBM3 H100 SXM; the run used Meta's 500 W HBM2e H100 (no spec yet)",
}

LINE = re.compile(r"sim step: ([0-9.]+) s\s+tps: ([0-9.]+) \(([0-9.]+) per chip\).*mfu: ([0-9.]+)%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--out", default=str(ROOT / "outputs" / "validate_simulator"),
                    help="folder for the runs' configs and traces")
    args = ap.parse_args()
    exe = Path(args.build) / "titan-train"
    if not exe.exists():
        sys.exit(f"{exe} not found: build first (cmake --build build)")
    print(f"{'measurement':38s} {'published':>10s} {'simulated':>10s} {'err':>7s} {'MFU pub':>8s} {'MFU sim':>8s}"
          f" {'err':>7s}  bar")
    ok = True
    for i, (name, cfg, over, tps, per, mfu, bar, src) in enumerate(CASES):
        dump = Path(args.out) / f"{i:02d}_{Path(cfg).stem}{'_' + over[-1] if over else ''}"
        out = subprocess.run([str(exe), "--config", cfg, "--job.print_args", "false", *over,
                              "--job.dump_folder", str(dump)], cwd=ROOT,
                             capture_output=True, text=True)
        m = LINE.search(out.stdout + out.stderr)
        if out.returncode != 0 or not m:
            print(f"{name}: simulation failed\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
            ok = False
            continue
        sim_tps = float(m.group(2)) if per == "total" else float(m.group(3))
        sim_mfu = float(m.group(4)) / 100
        e1 = sim_tps / tps - 1
        e2 = sim_mfu / mfu - 1
        good = abs(e1) <= bar and abs(e2) <= bar
        ok &= good or name in OPEN
        verdict = "ok" if good else "MISSED" + (f" - {OPEN[name]}" if name in OPEN else "")
        print(f"{name:38s} {tps:10,.0f} {sim_tps:10,.0f} {100 * e1:+6.1f}% {100 * mfu:7.2f}% {100 * sim_mfu:7.2f}%"
              f" {100 * e2:+6.1f}%  +-{100 * bar:.0f}% {verdict}  [{src}]")
    print("all within their bars, except the rows marked open" if ok else "some measurements missed their bars")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
