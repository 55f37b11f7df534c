#!/usr/bin/env python3
"""titan vs PyTorch on the same small Qwen3 (configs/qwen3_bench.yaml), same
batch, same threads, same data: tokens/s and peak memory of both, and ratios,
measured in one run (each side run `--rounds` times, alternating, best kept).

  /usr/bin/python3 scripts/bench_vs_torch.py [--threads 2] [--steps 12] [--rounds 2]
                                             [--precision float32,bfloat16]

The PyTorch side is an idiomatic eager implementation of the same model
(nn.Linear, HF-style eager attention with GQA expanded, AdamW), in a child
process so its peak RSS is its own. bfloat16: titan with
training.mixed_precision_param bfloat16, PyTorch's forward under
torch.autocast("cpu", torch.bfloat16) with the loss on float32 logits (both:
float32 master weights and AdamW state).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_CHILD = r'''
import json, math, resource, sys, time
import h5py, numpy as np, torch
import torch.nn as nn, torch.nn.functional as F
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"]); torch.manual_seed(0)
dim, L, H, Hkv, D, ffn, V = cfg["dim"], cfg["n_layers"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["hidden_dim"], cfg["vocab_size"]
B, S = cfg["batch"], cfg["seq"]
mask = torch.full((S, S), float("-inf")).triu(1)
class RMSNorm(nn.Module):
    def __init__(s, n, eps=1e-6): super().__init__(); s.w = nn.Parameter(torch.ones(n)); s.eps = eps
    def forward(s, x): return s.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps))
def rot(x): h = x.shape[-1] // 2; return torch.cat((-x[..., h:], x[..., :h]), -1)
class Layer(nn.Module):
    def __init__(s):
        super().__init__()
        s.q = nn.Linear(dim, H * D, bias=False); s.k = nn.Linear(dim, Hkv * D, bias=False)
        s.v = nn.Linear(dim, Hkv * D, bias=False); s.o = nn.Linear(H * D, dim, bias=False)
        s.qn, s.kn, s.n1, s.n2 = RMSNorm(D), RMSNorm(D), RMSNorm(dim), RMSNorm(dim)
        s.g = nn.Linear(dim, ffn, bias=False); s.u = nn.Linear(dim, ffn, bias=False); s.d = nn.Linear(ffn, dim, bias=False)
    def forward(s, x, cos, sin):
        h = s.n1(x)
        q = s.qn(s.q(h).view(B, S, H, D)).transpose(1, 2); k = s.kn(s.k(h).view(B, S, Hkv, D)).transpose(1, 2)
        v = s.v(h).view(B, S, Hkv, D).transpose(1, 2)
        q = q * cos + rot(q) * sin; k = k * cos + rot(k) * sin
        k = k.repeat_interleave(H // Hkv, 1); v = v.repeat_interleave(H // Hkv, 1)
        sc = (q @ k.transpose(-1, -2)) * D ** -0.5 + mask  # HF eager attention (torch 1.13 has no fused SDPA)
        a = (torch.softmax(sc, -1) @ v).transpose(1, 2).reshape(B, S, H * D)
        x = x + s.o(a)
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))
class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, dim); s.layers = nn.ModuleList([Layer() for _ in range(L)]); s.norm = RMSNorm(dim)
        s.head = nn.Linear(dim, V, bias=False)
        for m in s.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)): nn.init.normal_(m.weight, std=0.02)
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2).float() / D)); ang = torch.arange(S).float()[:, None] * inv[None]
        emb = torch.cat((ang, ang), -1); s.cos, s.sin = emb.cos(), emb.sin()
    def forward(s, t):
        x = s.emb(t)
        for l in s.layers: x = l(x, s.cos, s.sin)
        return s.head(s.norm(x))
model = Model()
decay = [p for p in model.parameters() if p.dim() >= 2]; nodecay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95), foreach=False)
with h5py.File(cfg["data"], "r") as f: toks = torch.from_numpy(f["tokens"][: cfg["steps"] * B * S + 1].astype(np.int64))
times, losses = [], []
for step in range(cfg["steps"]):
    chunk = toks[step * B * S : (step + 1) * B * S + 1]
    x, y = chunk[:-1].view(B, S), chunk[1:].view(B, S)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg["bf16"]):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
    loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
    times.append(time.perf_counter() - t0); losses.append(loss.item())
steady = times[2:]
print(json.dumps({"tps": B * S * len(steady) / sum(steady), "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "loss": losses[-1]}))
'''


def run_titan(args, precision):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run([os.path.join(ROOT, "build", "titan-train"), "--config", "configs/qwen3_bench.yaml",
                          "--training.steps", str(args.steps), "--training.mixed_precision_param", precision,
                          "--job.dump_folder", "outputs/bench_vs_torch"], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit("titan-train failed:\n" + out.stdout + out.stderr)
    tps = [float(m.replace(",", "")) for m in re.findall(r"step: +(\d+) .*tps: ([\d,]+)", out.stdout) for m in [m[1]]]
    steps = [int(s) for s in re.findall(r"step: +(\d+) ", out.stdout)]
    steady = [t for s, t in zip(steps, tps) if s > 2]  # log_freq 1: per-step tps; skip warm-up steps
    rss = float(re.search(r"peak RSS ([\d.]+) GiB", out.stdout).group(1))
    loss = float(re.findall(r"loss: +([\d.]+)", out.stdout)[-1])
    # harmonic mean of per-step rates = total tokens / total time
    return {"tps": len(steady) / sum(1.0 / t for t in steady), "peak_rss_gib": rss, "loss": loss}


def run_torch(args, precision):
    cfg = dict(threads=args.threads, dim=512, n_layers=8, n_heads=8, n_kv_heads=4, head_dim=64, hidden_dim=1536,
               vocab_size=256, batch=4, seq=512, steps=args.steps, data=os.path.join(ROOT, "data/kjv_train.h5"),
               bf16=precision == "bfloat16")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run(["/usr/bin/python3", "-c", TORCH_CHILD, json.dumps(cfg)], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit("torch run failed:\n" + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--precision", default="float32,bfloat16",
                    help="comma-separated: float32, bfloat16 (each measured for both sides, alternating)")
    args = ap.parse_args()
    precisions = args.precision.split(",")
    for p in precisions:
        if p not in ("float32", "bfloat16"):
            sys.exit(f"--precision: float32 or bfloat16, got {p!r}")
    best = {}  # (side, precision) -> the best round's figures
    for r in range(args.rounds):
        for prec in precisions:
            for side, fn in (("titan", run_titan), ("pytorch", run_torch)):
                res = fn(args, prec)
                print(f"round {r + 1}: {side} {prec} {res['tps']:.0f} tok/s ({res['peak_rss_gib']:.2f} GiB, "
                      f"loss {res['loss']:.4f})", flush=True)
                k = (side, prec)
                if k not in best or res["tps"] > best[k]["tps"]:
                    best[k] = res
    print(f"\nQwen3 dim 512, 8 layers, seq 512, batch 4, {args.threads} threads; best of {args.rounds} rounds")
    print(f"{'':20s} {'tokens/s':>10s} {'peak RSS':>10s}")
    for (side, prec), b in best.items():
        print(f"{side + ' ' + prec:20s} {b['tps']:10.0f} {b['peak_rss_gib']:9.2f}G")
    for prec in precisions:
        t, p = best[("titan", prec)], best[("pytorch", prec)]
        print(f"{prec}: titan/pytorch tokens/s {t['tps'] / p['tps']:.2f}x, peak memory "
              f"{t['peak_rss_gib'] / p['peak_rss_gib']:.2f}x")
    if len(precisions) == 2:
        for side in ("titan", "pytorch"):
            print(f"{side}: bfloat16/float32 tokens/s {best[(side, 'bfloat16')]['tps'] / best[(side, 'float32')]['tps']:.2f}x")


if __name__ == "__main__":
    main()
