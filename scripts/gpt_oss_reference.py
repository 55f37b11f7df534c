#!/usr/bin/env python3
"""Independent PyTorch reference of GptOssForCausalLM (written from the
Hugging Face definition; functional, float64; experts computed densely as
HF's training path does: every expert on every token, weighted by the
router scores scattered over all experts) for titan's golden file.

  /usr/bin/python3 scripts/gpt_oss_reference.py --out tests/golden/gpt_oss_tiny.h5

Golden layout as scripts/qwen3_reference.py's (config attr, HF-named
weights, inputs/tokens, ref/loss, ref/grads/*, ref/adamw_losses).
"""
import argparse
import math

import torch

from golden import make_golden

torch.set_default_dtype(torch.float64)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def yarn_cos_sin(cfg, seq):
    D, base = cfg["head_dim"], cfg["rope_theta"]
    rs = cfg["rope_scaling"]
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]

    def corr(rot):
        return (D * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr(rs["beta_fast"]), corr(rs["beta_slow"])
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, D - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    extrap, interp = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = ((torch.arange(D // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    ef = 1 - ramp
    inv = interp * (1 - ef) + extrap * ef
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
    att = 0.1 * math.log(factor) + 1.0
    dt = torch.get_default_dtype()  # float64 here; float32 in scripts/bf16_reference.py (autocast's fp32 tables)
    return (ang.cos() * att).to(dt), (ang.sin() * att).to(dt)


def rotate(x, cos, sin):  # x [..., S, D]: halves rotated by cos/sin [S, D/2]
    a, b = torch.chunk(x, 2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def router_logits(x, w, b):  # [T, H] -> [T, E]; scripts/bf16_reference.py runs it in float32 (TorchTitan's MoE)
    return x @ w.T + b


def forward(p, cfg, tokens):
    B, S = tokens.shape
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, K, eps, lim = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["rms_norm_eps"], cfg["swiglu_limit"]
    cos, sin = yarn_cos_sin(cfg, S)
    pos = torch.arange(S)
    h = p["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        lin = lambda n, t: t @ p[pre + n + ".weight"].T + p[pre + n + ".bias"]
        q = lin("self_attn.q_proj", x).view(B, S, H, D).transpose(1, 2)
        k = lin("self_attn.k_proj", x).view(B, S, Hkv, D).transpose(1, 2)
        v = lin("self_attn.v_proj", x).view(B, S, Hkv, D).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        w = (q @ k.transpose(-1, -2)) * D ** -0.5
        allowed = pos[None, :] <= pos[:, None]
        if cfg["layer_types"][i] == "sliding_attention":
            allowed &= (pos[:, None] - pos[None, :]) < cfg["sliding_window"]
        w = w.masked_fill(~allowed, float("-inf"))
        sinks = p[pre + "self_attn.sinks"].reshape(1, H, 1, 1).expand(B, H, S, 1)
        logits = torch.cat([w, sinks], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = torch.softmax(logits, dim=-1)[..., :-1]
        a = (probs @ v).transpose(1, 2).reshape(B, S, H * D)
        h = h + lin("self_attn.o_proj", a)
        x = rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps).reshape(B * S, -1)
        # router: top-k on the logits, softmax over the k, scattered over all experts
        rl = router_logits(x, p[pre + "mlp.router.weight"], p[pre + "mlp.router.bias"])
        tv, ti = torch.topk(rl, K, dim=-1)
        scores = torch.zeros_like(rl).scatter(1, ti, torch.softmax(tv, dim=1))
        gu = torch.einsum("th,ehf->etf", x, p[pre + "mlp.experts.gate_up_proj"]) + \
            p[pre + "mlp.experts.gate_up_proj_bias"][:, None, :]
        gate, up = gu[..., ::2], gu[..., 1::2]
        gate = gate.clamp(max=lim)
        up = up.clamp(min=-lim, max=lim)
        glu = gate * torch.sigmoid(gate * 1.702)
        out = torch.einsum("eti,eih->eth", (up + 1) * glu, p[pre + "mlp.experts.down_proj"]) + \
            p[pre + "mlp.experts.down_proj_bias"][:, None, :]
        out = (out * scores.T[:, :, None]).sum(0)
        h = h + out.view(B, S, -1)
    h = rms_norm(h, p["model.norm.weight"], eps)
    return h @ p["lm_head.weight"].T


def loss_of(p, cfg, batch):
    logits = forward(p, cfg, batch[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def make_config():
    return dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss", vocab_size=64, hidden_size=16,
                intermediate_size=12, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                num_local_experts=4, num_experts_per_tok=2, sliding_window=3, rope_theta=150000.0,
                rms_norm_eps=1e-5, swiglu_limit=7.0, tie_word_embeddings=False,
                rope_scaling=dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                  original_max_position_embeddings=4096),
                layer_types=["sliding_attention", "full_attention"])


def make_params(cfg, g):
    d, f, V, E = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_local_experts"]
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    shapes = {"model.embed_tokens.weight": (V, d)}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        for n, (o, inp) in {"q_proj": (H * D, d), "k_proj": (Hkv * D, d), "v_proj": (Hkv * D, d),
                            "o_proj": (d, H * D)}.items():
            shapes[pre + f"self_attn.{n}.weight"] = (o, inp)
            shapes[pre + f"self_attn.{n}.bias"] = (o,)
        shapes[pre + "self_attn.sinks"] = (H,)
        shapes[pre + "mlp.router.weight"] = (E, d)
        shapes[pre + "mlp.router.bias"] = (E,)
        shapes[pre + "mlp.experts.gate_up_proj"] = (E, d, 2 * f)
        shapes[pre + "mlp.experts.gate_up_proj_bias"] = (E, 2 * f)
        shapes[pre + "mlp.experts.down_proj"] = (E, f, d)
        shapes[pre + "mlp.experts.down_proj_bias"] = (E, d)
        shapes[pre + "input_layernorm.weight"] = (d,)
        shapes[pre + "post_attention_layernorm.weight"] = (d,)
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (V, d)
    p = {}
    for n, s in shapes.items():
        if n.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(s, generator=g)
        elif "gate_up_proj" in n and not n.endswith("bias"):
            t = 1.5 * torch.randn(s, generator=g)  # large enough that the +-7 clamps are active
        else:
            t = 0.3 * torch.randn(s, generator=g)
        p[n] = t.to(torch.float32).to(torch.float64)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    cfg = make_config()
    g = torch.Generator().manual_seed(4321)
    p = make_params(cfg, g)
    V = cfg["vocab_size"]
    B, S = 2, 8
    tokens = torch.randint(0, V, (a.steps, B, S + 1), generator=g)
    hp = dict(lr=2e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)
    make_golden(a.out, cfg, p, tokens, loss_of, hp)


if __name__ == "__main__":
    main()
