#!/usr/bin/env python3
"""PyTorch's bf16 mixed precision on titan's Qwen3 and gpt-oss references: the loss curves of one AdamW run
(same weights, same batches) in float64, in float32, and in float32 under torch.autocast("cpu", torch.bfloat16)
as TorchTitan trains (parameters, gradients, AdamW state float32; the loss on float32 logits; gpt-oss's router
in float32, as TorchTitan's MoE keeps it). titan's test (tests/test_decoder.cpp, Bf16Reference) runs the same
steps under its own bf16 autocast and holds its curve as close to the float64 one as PyTorch's bf16 curve is.

The forwards are scripts/qwen3_reference.py's and scripts/gpt_oss_reference.py's (independent of titan), run
here as they are; autocast decides which of their ops run in bf16 (matmuls and einsums: bf16 operands, float32
accumulation, bf16 results; elementwise ops on bf16 tensors in bf16; norms on the float32 residual stream). Their
biased projections are written `x @ W.T + b`, so the bias adds in float32 after the bf16 matmul (nn.Linear under
autocast, and titan, add it inside the bf16 GEMM and round once): fewer roundings on PyTorch's side, a stricter
comparison for titan.

  /usr/bin/python3 scripts/bf16_reference.py --model qwen3 --out tests/golden/bf16_qwen3.h5
  /usr/bin/python3 scripts/bf16_reference.py --model gpt_oss --out tests/golden/bf16_gpt_oss.h5

How close is "as close": a bf16 curve's distance to float64 is one draw of its rounding noise. The bf16 run is
repeated from weights nudged by a relative 1e-5 (noise far below bf16's 4e-3 spacing that re-rolls which way
each value rounds; the float64 curve moves by less than 1e-5): PyTorch's own bf16 distance over those runs is
the spread titan's must fall within.

File: attrs config (HF config.json), lr / beta1 / beta2 / eps / weight_decay / max_norm; the float32-exact
weights under HF's names; inputs/tokens int64 [steps, B, S+1]; ref/losses_f64, ref/losses_f32,
ref/losses_bf16 [steps]; ref/losses_bf16_nudged [runs, steps].
"""
import argparse
import json

import h5py
import numpy as np
import torch

import gpt_oss_reference
import qwen3_reference
from golden import adamw_run


def router_fp32(x, w, b):  # TorchTitan's MoE: the router under autocast(float32)
    with torch.autocast("cpu", enabled=False):
        return x.float() @ w.float().T + b.float()


def run(mod, cfg, params, tokens, hp, mode):
    """The AdamW run of scripts/golden.py's make_golden in `mode`: f64 | f32 | bf16 (float32 under autocast)."""
    dt = torch.float64 if mode == "f64" else torch.float32
    torch.set_default_dtype(dt)  # the references' RoPE tables follow it
    train = {k: v.to(dt).clone().requires_grad_(True) for k, v in params.items()}

    def loss_of(p, batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            logits = mod.forward(p, cfg, batch[:, :-1])
        if mode == "bf16":
            assert logits.dtype == torch.bfloat16, "autocast did not run the head in bf16"
        return torch.nn.functional.cross_entropy(logits.to(dt).reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))

    losses = adamw_run(train, tokens, hp, loss_of)
    torch.set_default_dtype(torch.float64)
    return np.array(losses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["qwen3", "gpt_oss"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--nudged-runs", type=int, default=6)
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    if a.model == "qwen3":
        mod = qwen3_reference
        cfg = mod.make_config("base")
        gen = torch.Generator().manual_seed(2027)
        params = mod.make_params(cfg, gen)
        hp = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)
    else:
        mod = gpt_oss_reference
        mod.router_logits = router_fp32
        cfg = mod.make_config()
        gen = torch.Generator().manual_seed(2027)
        params = mod.make_params(cfg, gen)
        hp = dict(lr=2e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)
    B, S = 4, 16
    tokens = torch.randint(0, cfg["vocab_size"], (a.steps, B, S + 1), generator=gen)
    curves = {m: run(mod, cfg, params, tokens, hp, m) for m in ("f64", "f32", "bf16")}
    nudged = []
    for r in range(a.nudged_runs):
        ng = torch.Generator().manual_seed(100 + r)
        pn = {k: (v * (1 + 1e-5 * torch.randn(v.shape, generator=ng))).to(torch.float32).to(torch.float64)
              for k, v in params.items()}
        nudged.append(run(mod, cfg, pn, tokens, hp, "bf16"))
    with h5py.File(a.out, "w") as f:
        f.attrs["config"] = json.dumps(cfg)
        for k, v in params.items():
            f.create_dataset(k, data=v.numpy().astype(np.float32))
        f.create_dataset("inputs/tokens", data=tokens.numpy().astype(np.int64))
        for m, c in curves.items():
            f.create_dataset("ref/losses_" + m, data=c)
        f.create_dataset("ref/losses_bf16_nudged", data=np.stack(nudged))
        for k, v in hp.items():
            f.attrs[k] = v
    ref = curves["f64"]

    def dist(c):
        return np.sqrt(np.mean(((c - ref) / ref) ** 2))
    for m in ("f32", "bf16"):
        print(f"{a.model} {m}: RMS relative distance to float64 over {a.steps} steps {dist(curves[m]):.3e} "
              f"(losses {curves[m][0]:.4f} -> {curves[m][-1]:.4f})")
    print(f"{a.model} bf16 from nudged weights: " + ", ".join(f"{dist(c):.3e}" for c in nudged))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
