#!/usr/bin/python3
"""Dense float64 PyTorch reference for titan's flex attention variants.

Independent of titan: each variant is written here with torch ops over the
full [B, H, Sq, Skv] score tensor (masks as boolean tensors, score mods as
broadcast index arithmetic), softmax with an optional sink column, and
autograd for the gradients of q, k, v, the sinks and every captured tensor.
Inputs are float32-representable, so titan can run them in float32 and in
float64. Writes tests/golden/flex_attention.h5 (group per variant: inputs,
the upstream gradient `w` of loss = sum(out * w), out, grads).

Run: /usr/bin/python3 scripts/flex_attention_reference.py [out.h5]
"""
import math
import sys

import h5py
import numpy as np
import torch

torch.manual_seed(0)
B, S, HQ, HKV, D = 2, 37, 4, 2, 8
DOC_STARTS = [[0, 9, 20], [0, 1, 25, 36]]  # document starts per batch row (titan's doc ids count them)


def f32(*shape, lo=-1.0, hi=1.0):
    return (torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo).double()


def doc_ids():
    ids = torch.zeros(B, S, dtype=torch.int64)
    for b, starts in enumerate(DOC_STARTS):
        for s in starts[1:]:
            ids[b, s:] += 1
    return ids


def alibi_slopes(n):  # Press et al. / HF build_alibi_tensor, computed here independently
    cp = 2 ** math.floor(math.log2(n))
    base = 2.0 ** (-(2.0 ** -(math.log2(cp) - 3)))
    s = [base ** p for p in range(1, cp + 1)]
    if cp != n:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * cp) - 3)))
        s += [extra ** p for p in range(1, 2 * min(cp, n - cp) + 1, 2)]
    return torch.tensor(s, dtype=torch.float32).double()


b_i = torch.arange(B).view(B, 1, 1, 1)
h_i = torch.arange(HQ).view(1, HQ, 1, 1)
q_i = torch.arange(S).view(1, 1, S, 1)
k_i = torch.arange(S).view(1, 1, 1, S)
CAUSAL = k_i <= q_i
R = 8  # relative bias: distances clipped to [-(R-1), R-1]
DOCS = doc_ids()


def reference(q, k, v, sinks, caps, mask, mod):
    """q [B, S, HQ, D], k/v [B, S, HKV, D] -> [B, S, HQ, D]; rows that see nothing give 0."""
    g = HQ // HKV
    qh = q.permute(0, 2, 1, 3)
    kh = k.permute(0, 2, 1, 3).repeat_interleave(g, dim=1)
    vh = v.permute(0, 2, 1, 3).repeat_interleave(g, dim=1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(D)
    if mod is not None:
        s = mod(s, caps)
    m = torch.ones_like(s, dtype=torch.bool) if mask is None else mask.expand_as(s)
    s = s.masked_fill(~m, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.view(1, HQ, 1, 1).expand(B, HQ, S, 1)], dim=-1)
    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx).detach()
    e = torch.exp(s - mx)
    den = e.sum(-1, keepdim=True)
    p = torch.where(den > 0, e / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(e))
    if sinks is not None:
        p = p[..., :S]
    return (p @ vh).permute(0, 2, 1, 3)


def rel_index():
    return (q_i - k_i).clamp(-(R - 1), R - 1) + R - 1  # [1, 1, S, S]


VARIANTS = {
    "noop": dict(mask=None),
    "causal": dict(mask=CAUSAL),
    "sliding_window": dict(mask=CAUSAL & (q_i - k_i < 8)),
    "prefix_lm": dict(mask=CAUSAL | (k_i < 10)),
    "document": dict(mask=CAUSAL & (DOCS.view(B, 1, S, 1) == DOCS.view(B, 1, 1, S))),
    "alibi": dict(mask=CAUSAL, caps=[alibi_slopes(HQ)],
                  mod=lambda s, c: s + c[0].view(1, HQ, 1, 1) * (k_i - q_i)),
    "relative": dict(mask=None, caps=[f32(HQ, 2 * R - 1)],
                     mod=lambda s, c: s + c[0][torch.arange(HQ).view(HQ, 1, 1), rel_index()[0]].unsqueeze(0)),
    "softcap": dict(mask=CAUSAL, mod=lambda s, c: 1.5 * torch.tanh(s / 1.5)),
    "head_bias": dict(mask=CAUSAL, caps=[f32(HQ)], mod=lambda s, c: s + c[0].view(1, HQ, 1, 1)),
    "sinks": dict(mask=CAUSAL, sinks=True),
    "user_decay": dict(
        mask=CAUSAL & (((q_i + b_i) % 2 == 0) | (k_i % 2 == 0)),
        caps=[f32(HQ, lo=0.2, hi=1.0), f32(B, lo=0.5, hi=2.0)],
        mod=lambda s, c: s / c[1].view(B, 1, 1, 1)
        - torch.sigmoid(3.0 * c[0]).view(1, HQ, 1, 1) * torch.log(1.0 + (q_i - k_i).clamp(min=0).double())),
    # what a model layer composes: documents x sliding window, ALiBi then softcap, sinks
    "model_combo": dict(
        mask=CAUSAL & (DOCS.view(B, 1, S, 1) == DOCS.view(B, 1, 1, S)) & (q_i - k_i < 12),
        caps=[alibi_slopes(HQ)], sinks=True,
        mod=lambda s, c: 2.0 * torch.tanh((s + c[0].view(1, HQ, 1, 1) * (k_i - q_i)) / 2.0)),
}


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/flex_attention.h5"
    with h5py.File(out_path, "w") as f:
        f.attrs["shape"] = [B, S, HQ, HKV, D]
        f.create_dataset("doc_ids", data=DOCS.numpy())
        for name, cfg in VARIANTS.items():
            q, k, v = f32(B, S, HQ, D), f32(B, S, HKV, D), f32(B, S, HKV, D)
            sinks = f32(HQ) if cfg.get("sinks") else None
            caps = [c.clone() for c in cfg.get("caps", [])]
            w = f32(B, S, HQ, D)
            leaves = [q, k, v] + ([sinks] if sinks is not None else []) + caps
            for t in leaves:
                t.requires_grad_(True)
            out = reference(q, k, v, sinks, caps, cfg.get("mask"), cfg.get("mod"))
            (out * w).sum().backward()
            g = f.create_group(name)
            for n, t in [("q", q), ("k", k), ("v", v), ("w", w)]:  # float32-exact: stored as float32
                g.create_dataset(n, data=t.detach().float().numpy())
            g.create_dataset("out", data=out.detach().numpy())
            for n, t in [("dq", q), ("dk", k), ("dv", v)]:
                g.create_dataset(n, data=t.grad.numpy())
            if sinks is not None:
                g.create_dataset("sinks", data=sinks.detach().float().numpy())
                g.create_dataset("dsinks", data=sinks.grad.numpy())
            for i, c in enumerate(caps):
                g.create_dataset(f"cap{i}", data=c.detach().float().numpy())
                g.create_dataset(f"dcap{i}", data=c.grad.numpy())
            print(f"{name:15s} |out| {out.abs().max().item():.3f}  |dq| {q.grad.abs().max().item():.3f}")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
