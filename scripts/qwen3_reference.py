#!/usr/bin/env python3
"""Independent PyTorch reference of Qwen3ForCausalLM (written from the Hugging
Face definition, functional, float64) used to make titan's golden files.

  /usr/bin/python3 scripts/qwen3_reference.py --out tests/golden/qwen3_tiny.h5 [--variant tied_window_gelu]

The golden file holds everything the C++ test needs (no torch in CI):
  root attr `config`            HF config.json content (model_type qwen3)
  <HF param name>               the random weights (float64 -> stored float32-exact)
  inputs/tokens                 int64 [steps, B, S+1]; step 0 is the loss/grad batch
  ref/loss                      loss of batch 0 (float64)
  ref/grads/<HF param name>     d loss / d param
  ref/adamw_losses              losses of `steps` AdamW steps (torch.optim.AdamW + clip_grad_norm_)
  attrs lr, beta1, beta2, eps, weight_decay, max_norm
"""
import argparse
import math

import torch

from golden import make_golden, random_params

torch.set_default_dtype(torch.float64)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_cos_sin(seq, head_dim, theta):
    # as HF: inv_freq in float32 from an int64 arange, then float32 angles
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim))
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    dt = torch.get_default_dtype()  # float64 here; float32 in scripts/bf16_reference.py (autocast's fp32 tables)
    return emb.cos().to(dt), emb.sin().to(dt)


def act(name, x):
    if name == "silu":
        return x * torch.sigmoid(x)
    if name == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    raise ValueError(name)


def forward(p, cfg, tokens):
    """tokens [B, S] -> logits [B, S, V]"""
    B, S = tokens.shape
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    cos, sin = rope_cos_sin(S, D, cfg["rope_theta"])
    h = p["model.embed_tokens.weight"][tokens]
    pos = torch.arange(S)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        window = cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else 0
        x = rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        q = (x @ p[pre + "self_attn.q_proj.weight"].T).view(B, S, H, D)
        k = (x @ p[pre + "self_attn.k_proj.weight"].T).view(B, S, Hkv, D)
        v = (x @ p[pre + "self_attn.v_proj.weight"].T).view(B, S, Hkv, D)
        q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], eps).transpose(1, 2)  # [B, H, S, D]
        k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], eps).transpose(1, 2)
        v = v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // Hkv, dim=1)  # GQA: query head h uses kv head h // (H/Hkv)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) * D ** -0.5
        allowed = pos[None, :] <= pos[:, None]
        if window:
            allowed &= (pos[:, None] - pos[None, :]) < window
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v  # [B, H, S, D]
        attn = attn.transpose(1, 2).reshape(B, S, H * D)
        h = h + attn @ p[pre + "self_attn.o_proj.weight"].T
        x = rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps)
        g = act(cfg["hidden_act"], x @ p[pre + "mlp.gate_proj.weight"].T)
        u = x @ p[pre + "mlp.up_proj.weight"].T
        h = h + (g * u) @ p[pre + "mlp.down_proj.weight"].T
    h = rms_norm(h, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return h @ head.T


def loss_of(p, cfg, batch):
    logits = forward(p, cfg, batch[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def make_config(variant):
    cfg = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=64, hidden_size=32,
               intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               head_dim=16, hidden_act="silu", max_position_embeddings=128, rms_norm_eps=1e-6,
               rope_theta=10000.0, tie_word_embeddings=False, use_sliding_window=False, sliding_window=None,
               layer_types=["full_attention", "full_attention"])
    if variant == "tied_window_gelu":
        cfg.update(tie_word_embeddings=True, hidden_act="gelu", use_sliding_window=True, sliding_window=3,
                   max_window_layers=1, layer_types=["full_attention", "sliding_attention"], rope_theta=1e6)
    return cfg


def make_params(cfg, gen):
    d, f, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    shapes = {"model.embed_tokens.weight": (V, d)}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        shapes.update({
            pre + "self_attn.q_proj.weight": (H * D, d), pre + "self_attn.k_proj.weight": (Hkv * D, d),
            pre + "self_attn.v_proj.weight": (Hkv * D, d), pre + "self_attn.o_proj.weight": (d, H * D),
            pre + "self_attn.q_norm.weight": (D,), pre + "self_attn.k_norm.weight": (D,),
            pre + "mlp.gate_proj.weight": (f, d), pre + "mlp.up_proj.weight": (f, d),
            pre + "mlp.down_proj.weight": (d, f),
            pre + "input_layernorm.weight": (d,), pre + "post_attention_layernorm.weight": (d,)})
    shapes["model.norm.weight"] = (d,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, d)
    return random_params(shapes, gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", default="base", choices=["base", "tied_window_gelu"])
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(1234)
    cfg = make_config(a.variant)
    p = make_params(cfg, gen)
    B, S = 2, 8
    tokens = torch.randint(0, cfg["vocab_size"], (a.steps, B, S + 1), generator=gen)
    hp = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)

    make_golden(a.out, cfg, p, tokens, loss_of, hp)


if __name__ == "__main__":
    main()
