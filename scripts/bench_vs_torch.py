#!/usr/bin/env python3
"""titan vs PyTorch on the same models, same batch, same threads, same data: tokens/s and peak memory of
both, and ratios, measured in one run (each side run `--rounds` times, alternating, best kept).

  /usr/bin/python3 scripts/bench_vs_torch.py [--threads 2] [--steps 12] [--rounds 2]
                                             [--precision float32,bfloat16] [--cases bench,qwen3_small,gpt_oss_small]

Cases (titan's config, then the PyTorch side's same model):
  bench          configs/qwen3_bench.yaml: Qwen3 dim 512, 8 layers, 8/4 heads x 64, ffn 1536, B 4 x S 512
  qwen3_small    the same with dim 128, 4 layers, 4/2 heads x 32, ffn 384, B 8 x S 256 (a step of ~2 GFLOP:
                 where time outside the GEMMs shows)
  gpt_oss_small  configs/gpt_oss_debug.yaml: gpt-oss dim 128, 4 layers, 4/2 heads x 32 with biases and sinks,
                 sliding window 64 on layers 0 and 2, 8 experts top-2 (hidden 128, biased, clamped SwiGLU),
                 B 8 x S 256

The PyTorch side is an idiomatic eager implementation of each model (nn.Linear, HF-style eager attention with
GQA expanded and, for gpt-oss, its sink column; HF's expert loop for the MoE: tokens gathered per hit expert,
index_add_ back; AdamW), in a child process so its peak RSS is its own. RoPE tables are precomputed on both
sides (gpt-oss's YaRN values are not reproduced on the PyTorch side: they do not change the cost). Both sides
run in the same environment (OMP_NUM_THREADS = --threads; OMP_WAIT_POLICY as inherited, printed). bfloat16:
titan with training.mixed_precision_param bfloat16, PyTorch's forward under torch.autocast("cpu",
torch.bfloat16) with the loss on float32 logits (both: float32 master weights and AdamW state).
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
B, S, E = cfg["batch"], cfg["seq"], cfg.get("experts", 0)
class RMSNorm(nn.Module):
    def __init__(s, n, eps): super().__init__(); s.w = nn.Parameter(torch.ones(n)); s.eps = eps
    def forward(s, x): return s.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps))
def rot(x): h = x.shape[-1] // 2; return torch.cat((-x[..., h:], x[..., :h]), -1)
def attention(q, k, v, mask, sinks=None):  # HF eager attention (torch 1.13 has no fused SDPA); q [B, H, S, D]
    k = k.repeat_interleave(H // Hkv, 1); v = v.repeat_interleave(H // Hkv, 1)
    sc = (q @ k.transpose(-1, -2)) * D ** -0.5 + mask
    if sinks is None: p = torch.softmax(sc, -1)
    else:  # gpt-oss: a sink logit per head joins every row's softmax, then is dropped
        sc = torch.cat([sc, sinks.view(1, H, 1, 1).expand(B, H, S, 1)], -1)
        p = torch.softmax(sc, -1)[..., :-1]
    return (p @ v).transpose(1, 2).reshape(B, S, H * D)
causal = torch.full((S, S), float("-inf")).triu(1)
class QwenLayer(nn.Module):
    def __init__(s, i):
        super().__init__()
        s.q = nn.Linear(dim, H * D, bias=False); s.k = nn.Linear(dim, Hkv * D, bias=False)
        s.v = nn.Linear(dim, Hkv * D, bias=False); s.o = nn.Linear(H * D, dim, bias=False)
        s.qn, s.kn, s.n1, s.n2 = RMSNorm(D, 1e-6), RMSNorm(D, 1e-6), RMSNorm(dim, 1e-6), RMSNorm(dim, 1e-6)
        s.g = nn.Linear(dim, ffn, bias=False); s.u = nn.Linear(dim, ffn, bias=False); s.d = nn.Linear(ffn, dim, bias=False)
    def forward(s, x, cos, sin):
        h = s.n1(x)
        q = s.qn(s.q(h).view(B, S, H, D)).transpose(1, 2); k = s.kn(s.k(h).view(B, S, Hkv, D)).transpose(1, 2)
        v = s.v(h).view(B, S, Hkv, D).transpose(1, 2)
        q = q * cos + rot(q) * sin; k = k * cos + rot(k) * sin
        x = x + s.o(attention(q, k, v, causal))
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))
class Experts(nn.Module):  # HF's GptOssExperts, training path
    def __init__(s):
        super().__init__()
        s.gate_up = nn.Parameter(torch.empty(E, dim, 2 * ffn)); s.gate_up_b = nn.Parameter(torch.zeros(E, 2 * ffn))
        s.down = nn.Parameter(torch.empty(E, ffn, dim)); s.down_b = nn.Parameter(torch.zeros(E, dim))
    def forward(s, h, idx, w):  # h [T, dim], idx / w [T, k]
        out = torch.zeros_like(h)
        with torch.no_grad():
            mask = F.one_hot(idx, E).permute(2, 1, 0)  # [E, k, T]
            hit = torch.greater(mask.sum((-1, -2)), 0).nonzero()
        for e in hit[:, 0].tolist():
            slot, tok = torch.where(mask[e])
            gu = h[tok] @ s.gate_up[e] + s.gate_up_b[e]
            g, u = gu[..., ::2].clamp(max=7.0), gu[..., 1::2].clamp(-7.0, 7.0)
            o = ((u + 1) * (g * torch.sigmoid(g * 1.702))) @ s.down[e] + s.down_b[e]
            out.index_add_(0, tok, o * w[tok, slot, None])
        return out
class OssLayer(nn.Module):
    def __init__(s, i):
        super().__init__()
        s.q = nn.Linear(dim, H * D); s.k = nn.Linear(dim, Hkv * D); s.v = nn.Linear(dim, Hkv * D)
        s.o = nn.Linear(H * D, dim); s.sinks = nn.Parameter(torch.zeros(H))
        s.n1, s.n2 = RMSNorm(dim, 1e-5), RMSNorm(dim, 1e-5)
        s.router = nn.Linear(dim, E); s.experts = Experts()
        s.mask = causal if i % 2 else causal + torch.full((S, S), float("-inf")).tril(-cfg["window"])
    def forward(s, x, cos, sin):
        h = s.n1(x)
        q = s.q(h).view(B, S, H, D).transpose(1, 2); k = s.k(h).view(B, S, Hkv, D).transpose(1, 2)
        v = s.v(h).view(B, S, Hkv, D).transpose(1, 2)
        q = q * cos + rot(q) * sin; k = k * cos + rot(k) * sin
        x = x + s.o(attention(q, k, v, s.mask, s.sinks))
        h = s.n2(x).view(B * S, dim)
        val, idx = torch.topk(s.router(h), cfg["top_k"], -1)
        return x + s.experts(h, idx, torch.softmax(val, -1)).view(B, S, dim)
class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, dim); s.layers = nn.ModuleList([Layer(i) for i in range(L)])
        s.norm = RMSNorm(dim, 1e-5 if cfg["model"] == "gpt_oss" else 1e-6); s.head = nn.Linear(dim, V, bias=False)
        for n, p in s.named_parameters():
            if p.dim() >= 2 or n.endswith("experts.gate_up") or n.endswith("experts.down"): nn.init.normal_(p, std=0.02)
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2).float() / D)); ang = torch.arange(S).float()[:, None] * inv[None]
        emb = torch.cat((ang, ang), -1); s.cos, s.sin = emb.cos(), emb.sin()
    def forward(s, t):
        x = s.emb(t)
        for l in s.layers: x = l(x, s.cos, s.sin)
        return s.head(s.norm(x))
Layer = OssLayer if cfg["model"] == "gpt_oss" else QwenLayer
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


QWEN3_BENCH = dict(model="qwen3", dim=512, n_layers=8, n_heads=8, n_kv_heads=4, head_dim=64, hidden_dim=1536,
                   vocab_size=256, batch=4, seq=512, rope_theta=1e6)
QWEN3_SMALL = dict(QWEN3_BENCH, dim=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=384, batch=8,
                   seq=256)
GPT_OSS_SMALL = dict(model="gpt_oss", dim=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=128,
                     vocab_size=256, batch=8, seq=256, experts=8, top_k=2, window=64, rope_theta=150000.0)
# case -> (titan's config and overrides, the PyTorch side's model)
CASES = {
    "bench": (["configs/qwen3_bench.yaml"], QWEN3_BENCH),
    "qwen3_small": (["configs/qwen3_bench.yaml", "--model.dim", "128", "--model.n_layers", "4", "--model.n_heads", "4",
                     "--model.n_kv_heads", "2", "--model.head_dim", "32", "--model.hidden_dim", "384",
                     "--training.seq_len", "256", "--training.local_batch_size", "8"], QWEN3_SMALL),
    "gpt_oss_small": (["configs/gpt_oss_debug.yaml", "--validation.enabled", "false", "--checkpoint.enable", "false",
                       "--metrics.log_freq", "1", "--metrics.save_jsonl", "false", "--lr_scheduler.warmup_steps", "2"],
                      GPT_OSS_SMALL),
}


def run_titan(args, case, precision):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    config, *overrides = CASES[case][0]
    out = subprocess.run([os.path.join(ROOT, "build", "titan-train"), "--config", config, *overrides,
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


def run_torch(args, case, precision):
    cfg = dict(CASES[case][1], threads=args.threads, steps=args.steps, data=os.path.join(ROOT, "data/kjv_train.h5"),
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
    ap.add_argument("--cases", default="bench", help="comma-separated: " + ", ".join(CASES))
    args = ap.parse_args()
    precisions, cases = args.precision.split(","), args.cases.split(",")
    for p in precisions:
        if p not in ("float32", "bfloat16"):
            sys.exit(f"--precision: float32 or bfloat16, got {p!r}")
    for c in cases:
        if c not in CASES:
            sys.exit(f"--cases: one of {', '.join(CASES)}, got {c!r}")
    print(f"{args.threads} threads, OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', '(unset: the runtime default)')} "
          f"on both sides", flush=True)
    best = {}  # (case, side, precision) -> the best round's figures
    for r in range(args.rounds):
        for case in cases:
            for prec in precisions:
                for side, fn in (("titan", run_titan), ("pytorch", run_torch)):
                    res = fn(args, case, prec)
                    print(f"round {r + 1}: {case} {side} {prec} {res['tps']:.0f} tok/s ({res['peak_rss_gib']:.2f} GiB, "
                          f"loss {res['loss']:.4f})", flush=True)
                    k = (case, side, prec)
                    if k not in best or res["tps"] > best[k]["tps"]:
                        best[k] = res
    for case in cases:
        m = CASES[case][1]
        print(f"\n{case}: {m['model']} dim {m['dim']}, {m['n_layers']} layers, B {m['batch']} x S {m['seq']}; "
              f"best of {args.rounds} rounds")
        print(f"{'':20s} {'tokens/s':>10s} {'peak RSS':>10s}")
        for prec in precisions:
            for side in ("titan", "pytorch"):
                b = best[(case, side, prec)]
                print(f"{side + ' ' + prec:20s} {b['tps']:10.0f} {b['peak_rss_gib']:9.2f}G")
        for prec in precisions:
            t, p = best[(case, "titan", prec)], best[(case, "pytorch", prec)]
            print(f"{prec}: titan/pytorch tokens/s {t['tps'] / p['tps']:.2f}x, peak memory "
                  f"{t['peak_rss_gib'] / p['peak_rss_gib']:.2f}x")
        if len(precisions) == 2:
            for side in ("titan", "pytorch"):
                print(f"{side}: bfloat16/float32 tokens/s "
                      f"{best[(case, side, 'bfloat16')]['tps'] / best[(case, side, 'float32')]['tps']:.2f}x")


if __name__ == "__main__":
    main()
