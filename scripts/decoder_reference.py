#!/usr/bin/env python3
"""Independent PyTorch reference of titan's decoder family's configurations
that the per-model references (qwen3_reference.py, gpt_oss_reference.py) do
not cover: Hugging Face's Qwen3-MoE (norm_topk_prob, dense first layers),
Llama-3.1 (llama3 RoPE scaling, projection biases), Mixtral (every layer
MoE under block_sparse_moe, experts' w1 / w3 / w2, softmax top-2
renormalized, a sliding window on every layer), OLMo 2 (norms after the
attention and MLP outputs, QK-norm over the whole projections) and Gemma 3
text (sandwich norms of 1 + weight, GELU tanh, tied embeddings times
sqrt(dim), scores over sqrt(query_pre_attn_scalar), sliding layers on their
own unscaled RoPE base, the full layers' RoPE scaled linearly) and DeepSeek-V3
(multi-head latent attention with and without the query latent, RoPE on interleaved
dims, YaRN with DeepSeek's mscale, sigmoid group-limited routing renormalized and
scaled, a shared MLP of n experts, dense first layers) and Llama 4 text (iRoPE: chunked
RoPE layers on complex pairs with L2-normed q and k, NoPE layers with tuned query
temperature; a shared expert, sigmoid top-k scaling the experts' inputs, fused
gate_up_proj halves, dense and MoE layers interleaved), written from HF's
definitions into one knob-driven forward; and ablations no HF class has (Gemma's sandwich norms with a
projection-wide QK-norm and LayerNorm, Gemma's embedding scale and Gemma 2's
final-logit softcap on a tied Qwen3, gpt-oss with QK-norm and GELU,
Qwen3 with sinks, a per-layer window pattern and LayerNorm, Qwen3-MoE with
sigmoid scores, a shared expert, a router bias and MoE every second layer),
from the formulas of the knobs. Functional, float64, experts computed densely.

  /usr/bin/python3 scripts/decoder_reference.py --variant qwen3_moe --out tests/golden/decoder_qwen3_moe.h5

Each golden holds 50 AdamW steps (the loss-curve divergence test). Layout as
scripts/qwen3_reference.py's; `config` is what titan reads: HF's config.json
for the HF classes (weights under HF's names, Qwen3-MoE's per expert), the
titan_decoder block for the ablations (weights under titan's names, experts
stacked [E, in, out]).
"""
import argparse
import json
import math

import torch

from golden import make_golden, random_params

torch.set_default_dtype(torch.float64)

# ---- the variants: titan's knobs (the reference reads these) -------------------------------

BASE = dict(family="qwen3", vocab_size=64, dim=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=16, hidden_dim=48,
            norm_type="rmsnorm", norm_eps=1e-6, qk_norm=True, attn_proj_bias=False, attn_sinks=False,
            layer_window=[0, 0, 0], rope_theta=10000.0, rope=dict(type="none"), max_position_embeddings=128,
            activation="silu", swiglu_limit=0.0, moe=False, moe_experts=4, moe_top_k=2, moe_hidden_dim=24,
            moe_score="softmax", moe_renormalize=True, moe_shared_expert=False, moe_router_bias=False,
            moe_expert_bias=False, moe_every=1, moe_first_dense=0, tie_embeddings=False, embed_scale=1.0,
            final_logit_softcap=0.0, norm_placement="pre", qk_norm_scope="head", norm_unit_offset=False,
            query_pre_attn_scalar=0.0, rope_local_theta=0.0, kv_lora_rank=0, q_lora_rank=0, qk_nope_head_dim=0,
            qk_rope_head_dim=0, v_head_dim=0, rope_interleave=False, moe_n_group=1, moe_topk_group=1,
            moe_routed_scale=1.0, moe_shared_width=1, route_bias=0.0, qk_l2_norm=False, nope_interval=0,
            attn_chunk=0, attn_scale=0.0, floor_scale=8192)

VARIANTS = {
    # HF Qwen3MoeForCausalLM: layer 0 dense (mlp_only_layers [0]), norm_topk_prob
    "qwen3_moe": dict(family="qwen3_moe", moe=True, moe_first_dense=1, moe_renormalize=True),
    # HF LlamaForCausalLM, Llama-3.1 RoPE scaling (original context 16 so the test's positions feel it)
    "llama31": dict(family="llama3", qk_norm=False, attn_proj_bias=True, norm_eps=1e-5, rope_theta=500000.0,
                    rope=dict(type="llama3", factor=8.0, original_max_position_embeddings=16, low_freq_factor=1.0,
                              high_freq_factor=4.0)),
    # HF MixtralForCausalLM: no QK-norm, every layer MoE (intermediate_size is the experts'), a window of 5
    "mixtral": dict(family="mixtral", qk_norm=False, moe=True, moe_renormalize=True, norm_eps=1e-5, rope_theta=1e6,
                    layer_window=[5, 5, 5]),
    # HF Olmo2ForCausalLM: norms after the attention and MLP outputs, QK-norm over the whole projections (GQA here,
    # as OLMo-2-32B)
    "olmo2": dict(family="olmo2", qk_norm_scope="projection", norm_placement="post", rope_theta=500000.0),
    # HF Gemma3ForCausalLM (text): sandwich norms of (1 + weight), per-head QK-norm, GELU's tanh form, tied embeddings
    # times sqrt(dim), scores over sqrt(query_pre_attn_scalar), sliding layers on their own RoPE base, the full layer's
    # RoPE linearly scaled
    "gemma3": dict(family="gemma3", norm_placement="sandwich", norm_unit_offset=True, activation="gelu_pytorch_tanh",
                   tie_embeddings=True, embed_scale=math.sqrt(32), query_pre_attn_scalar=24.0, layer_window=[3, 3, 0],
                   rope_theta=1e6, rope_local_theta=10000.0, rope=dict(type="linear", factor=8.0)),
    # HF DeepseekV3ForCausalLM: MLA (q latent 12, kv latent 10, heads of 6 + 4 rope dims, values of 5), RoPE on
    # interleaved dims with YaRN (original context 4, so the test's 8 positions extend it) and mscale 0.7 / 1 (the
    # tables scale by their ratio, the scores by m(1)^2), 8 experts in 4 groups of which 2 are kept, chosen with
    # selection biases (some below -score: a masked expert's 0 can win, as in HF), top-2 renormalized and scaled by
    # 2.5, a shared MLP 2 experts wide, layer 0 dense
    "deepseek_v3": dict(family="deepseek_v3", qk_norm=False, n_kv_heads=4, head_dim=4, kv_lora_rank=10,
                        q_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, rope_interleave=True,
                        moe=True, moe_experts=8, moe_top_k=2, moe_score="sigmoid", moe_renormalize=True,
                        moe_shared_expert=True, moe_shared_width=2, moe_first_dense=1, moe_n_group=4,
                        moe_topk_group=2, moe_routed_scale=2.5, max_position_embeddings=16,
                        rope=dict(type="yarn", factor=4.0, original_max_position_embeddings=4, beta_fast=32.0,
                                  beta_slow=1.0, mscale=0.7, mscale_all_dim=1.0), route_bias=0.5),
    # the same class without the query latent (q_proj), RoPE on halves, one group, no RoPE scaling, rms_norm_eps 1e-5
    # (the latents' norms keep HF's 1e-6)
    "deepseek_v3_q_proj": dict(family="deepseek_v3", qk_norm=False, norm_eps=1e-5, n_kv_heads=4, head_dim=4, kv_lora_rank=10,
                               q_lora_rank=0, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=7, moe=True,
                               moe_experts=4, moe_top_k=2, moe_score="sigmoid", moe_renormalize=False,
                               moe_shared_expert=True, moe_first_dense=2, moe_routed_scale=1.5),
    # HF Llama4ForCausalLM (text): iRoPE with layer 3 of 4 NoPE (HF's every 4th: full attention, queries' temperature
    # tuned with attn_scale 0.5 and floor_scale 2 so the test's 8 positions feel it), the RoPE layers chunked by 3
    # with complex (interleaved-pair) RoPE, Llama-3 scaling with Scout's equal frequency factors and their q and k
    # L2-normed after it; layers 1 and 3 MoE (interleave_moe_layer_step 2): 4 experts with fused gate_up_proj,
    # sigmoid top-2 of the logits scaling the experts' inputs, a shared expert; layers 0 and 2 dense of
    # intermediate_size_mlp
    "llama4": dict(family="llama4", n_layers=4, layer_window=[0, 0, 0, 0], qk_norm=False, qk_l2_norm=True,
                   norm_eps=1e-5, rope_theta=500000.0,
                   rope=dict(type="llama3", factor=8.0, original_max_position_embeddings=16, low_freq_factor=1.0,
                             high_freq_factor=1.0), nope_interval=4, attn_chunk=3, attn_scale=0.5, floor_scale=2,
                   moe=True, moe_every=2, moe_score="sigmoid", moe_renormalize=False, moe_shared_expert=True),
    # ablations (titan_decoder)
    # Gemma 2 / 3's sandwich norms, with OLMo 2's projection-wide QK-norm, all LayerNorm
    "sandwich_projection_ln": dict(norm_placement="sandwich", qk_norm_scope="projection", norm_type="layernorm"),
    "gpt_oss_qknorm_gelu": dict(family="gpt_oss", qk_norm=True, activation="gelu", swiglu_limit=7.0,
                                attn_proj_bias=True, attn_sinks=True, layer_window=[3, 0, 3], norm_eps=1e-5,
                                rope_theta=150000.0, moe=True, moe_router_bias=True, moe_expert_bias=True,
                                rope=dict(type="yarn", factor=32.0, original_max_position_embeddings=4096,
                                          beta_fast=32.0, beta_slow=1.0, truncate=False)),
    # Gemma's embedding scale (sqrt(dim)) and Gemma 2's final-logit softcap on a tied Qwen3
    "gemma_scale_softcap": dict(embed_scale=math.sqrt(32), final_logit_softcap=3.0, tie_embeddings=True),
    "qwen3_sinks_pattern": dict(attn_sinks=True, layer_window=[0, 3, 0], norm_type="layernorm"),
    "qwen3_moe_sigmoid_shared": dict(moe=True, moe_score="sigmoid", moe_shared_expert=True, moe_router_bias=True,
                                     moe_every=2, moe_renormalize=False),
}


def knobs_of(variant):
    k = dict(BASE)
    k.update(VARIANTS[variant])
    return k


def is_moe_layer(k, i):
    return k["moe"] and i >= k["moe_first_dense"] and (i + 1) % k["moe_every"] == 0


def moe_module(k):
    return {"mixtral": "block_sparse_moe.", "llama4": "feed_forward."}.get(k["family"], "mlp.")


def hf_config(k):
    """What titan reads: HF's config.json for the HF classes, else titan_decoder's block."""
    common = dict(vocab_size=k["vocab_size"], hidden_size=k["dim"], num_hidden_layers=k["n_layers"],
                  num_attention_heads=k["n_heads"], num_key_value_heads=k["n_kv_heads"], head_dim=k["head_dim"],
                  hidden_act=k["activation"], max_position_embeddings=k["max_position_embeddings"],
                  rms_norm_eps=k["norm_eps"], rope_theta=k["rope_theta"], tie_word_embeddings=k["tie_embeddings"],
                  attention_bias=k["attn_proj_bias"])
    if k["family"] == "qwen3_moe":
        return dict(common, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                    intermediate_size=k["hidden_dim"], moe_intermediate_size=k["moe_hidden_dim"],
                    num_experts=k["moe_experts"], num_experts_per_tok=k["moe_top_k"],
                    norm_topk_prob=k["moe_renormalize"], decoder_sparse_step=k["moe_every"],
                    mlp_only_layers=list(range(k["moe_first_dense"])), use_sliding_window=False)
    if k["family"] == "mixtral":
        return dict({kk: v for kk, v in common.items() if kk != "attention_bias"}, architectures=["MixtralForCausalLM"],
                    model_type="mixtral", intermediate_size=k["moe_hidden_dim"], num_local_experts=k["moe_experts"],
                    num_experts_per_tok=k["moe_top_k"], sliding_window=k["layer_window"][0] or None,
                    router_aux_loss_coef=0.0)
    if k["family"] == "gemma3":
        g = dict({kk: v for kk, v in common.items() if kk != "hidden_act"}, architectures=["Gemma3ForCausalLM"],
                 model_type="gemma3_text", intermediate_size=k["hidden_dim"], hidden_activation=k["activation"],
                 query_pre_attn_scalar=k["query_pre_attn_scalar"], rope_local_base_freq=k["rope_local_theta"],
                 sliding_window=max(k["layer_window"]),
                 layer_types=["sliding_attention" if w else "full_attention" for w in k["layer_window"]],
                 final_logit_softcapping=None, attn_logit_softcapping=None)
        if k["rope"]["type"] != "none":
            g["rope_scaling"] = dict(rope_type=k["rope"]["type"], factor=k["rope"]["factor"])
        return g
    if k["family"] == "olmo2":
        return dict(common, architectures=["Olmo2ForCausalLM"], model_type="olmo2", intermediate_size=k["hidden_dim"])
    if k["family"] == "deepseek_v3":
        d = dict({kk: v for kk, v in common.items() if kk != "head_dim"}, architectures=["DeepseekV3ForCausalLM"],
                 model_type="deepseek_v3", intermediate_size=k["hidden_dim"], moe_intermediate_size=k["moe_hidden_dim"],
                 n_routed_experts=k["moe_experts"], num_experts_per_tok=k["moe_top_k"],
                 n_shared_experts=k["moe_shared_width"], routed_scaling_factor=k["moe_routed_scale"],
                 n_group=k["moe_n_group"], topk_group=k["moe_topk_group"], norm_topk_prob=k["moe_renormalize"],
                 first_k_dense_replace=k["moe_first_dense"], kv_lora_rank=k["kv_lora_rank"],
                 q_lora_rank=k["q_lora_rank"] or None, qk_nope_head_dim=k["qk_nope_head_dim"],
                 qk_rope_head_dim=k["qk_rope_head_dim"], v_head_dim=k["v_head_dim"],
                 rope_interleave=k["rope_interleave"])
        if k["rope"]["type"] != "none":
            r = dict(k["rope"], rope_type=k["rope"]["type"])
            del r["type"]
            d["rope_scaling"] = r
        return d
    if k["family"] == "llama4":
        r = dict(k["rope"], rope_type="llama3")
        del r["type"]
        return dict(common, architectures=["Llama4ForCausalLM"], model_type="llama4_text",
                    intermediate_size=k["moe_hidden_dim"], intermediate_size_mlp=k["hidden_dim"],
                    num_local_experts=k["moe_experts"], num_experts_per_tok=k["moe_top_k"],
                    interleave_moe_layer_step=k["moe_every"], use_qk_norm=k["qk_l2_norm"],
                    no_rope_layer_interval=k["nope_interval"], attention_chunk_size=k["attn_chunk"],
                    attn_temperature_tuning=True, floor_scale=k["floor_scale"], attn_scale=k["attn_scale"],
                    rope_scaling=r, router_aux_loss_coef=0.0, router_jitter_noise=0.0)
    if k["family"] == "llama3":
        r = dict(k["rope"], rope_type="llama3")
        del r["type"]
        return dict(common, architectures=["LlamaForCausalLM"], model_type="llama", intermediate_size=k["hidden_dim"],
                    mlp_bias=False, rope_scaling=r)
    return dict(architectures=["TitanDecoderForCausalLM"], model_type="titan_decoder", titan_decoder=k)


# ---- the model -----------------------------------------------------------------------------

def norm(x, p, name, k):
    w = p[name + ".weight"]
    if k["norm_unit_offset"]:  # Gemma: scales by 1 + weight
        w = 1.0 + w
    if k["norm_type"] == "layernorm":
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, p[name + ".bias"], k["norm_eps"])
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + k["norm_eps"]))


def inv_freq(k, local=False):
    """HF's _compute_*_rope_parameters, float32 (local: Gemma 3's sliding layers, their own base, unscaled)."""
    D, base, r = k["head_dim"], k["rope_theta"], k["rope"]
    if local:
        base, r = k["rope_local_theta"], dict(type="none")
    pos_freqs = base ** (torch.arange(0, D, 2, dtype=torch.int64).to(torch.float32) / D)
    inv = 1.0 / pos_freqs
    if r["type"] == "yarn":
        factor, orig = r["factor"], r["original_max_position_embeddings"]

        def corr(rot):
            return (D * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr(r["beta_fast"]), corr(r["beta_slow"])
        if r.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, D - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(D // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        ef = 1 - ramp
        def m(s):  # HF's get_mscale
            return 1.0 if factor <= 1 else 0.1 * s * math.log(factor) + 1.0
        att = m(r["mscale"]) / m(r["mscale_all_dim"]) if r.get("mscale") and r.get("mscale_all_dim") else m(1.0)
        return (1.0 / (factor * pos_freqs)) * (1 - ef) + (1.0 / pos_freqs) * ef, att
    if r["type"] == "llama3":
        factor, lo, hi, old = r["factor"], r["low_freq_factor"], r["high_freq_factor"], r["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        return torch.where(medium, smoothed, scaled), 1.0
    if r["type"] == "linear":
        return inv / r["factor"], 1.0
    return inv, 1.0


def rope_cos_sin(k, seq, local=False):
    inv, att = inv_freq(k, local)
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
    return (ang.cos() * att).to(torch.float64), (ang.sin() * att).to(torch.float64)


def rotate(x, cos, sin):  # x [..., S, D], cos/sin [S, D/2]: HF's rotate_half convention
    a, b = torch.chunk(x, 2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def deinterleave(x):  # HF's apply_rotary_pos_emb_interleave: adjacent pairs -> halves
    *lead, d = x.shape
    return x.view(*lead, d // 2, 2).transpose(-1, -2).reshape(*lead, d)


def mla(p, pre, x, k, cos, sin, allowed):
    """HF DeepseekV3Attention: x [B, S, dim] -> [B, S, dim]."""
    B, S, _ = x.shape
    H, dn, dr, dv, R = k["n_heads"], k["qk_nope_head_dim"], k["qk_rope_head_dim"], k["v_head_dim"], k["kv_lora_rank"]
    if k["q_lora_rank"]:
        q = linear(p, pre + "q_b_proj", norm(linear(p, pre + "q_a_proj", x, False), p, pre + "q_a_layernorm",
                                             dict(k, norm_eps=1e-6)), False)
    else:
        q = linear(p, pre + "q_proj", x, False)
    q = q.view(B, S, H, dn + dr).transpose(1, 2)  # [B, H, S, dn + dr]
    q_pass, q_rot = q[..., :dn], q[..., dn:]
    ckv = linear(p, pre + "kv_a_proj_with_mqa", x, False)
    k_pass, k_rot = ckv[..., :R], ckv[..., R:]
    latent = dict(k, norm_eps=1e-6)  # HF's DeepseekV3RMSNorm(rank): its default epsilon, not rms_norm_eps
    kv = linear(p, pre + "kv_b_proj", norm(k_pass, p, pre + "kv_a_layernorm", latent), False).view(B, S, H, dn + dv)
    kv = kv.transpose(1, 2)
    k_pass, v = kv[..., :dn], kv[..., dn:]
    k_rot = k_rot.view(B, 1, S, dr)
    if k["rope_interleave"]:
        q_rot, k_rot = deinterleave(q_rot), deinterleave(k_rot)
    q_rot, k_rot = rotate(q_rot, cos, sin), rotate(k_rot, cos, sin)
    q = torch.cat((q_pass, q_rot), dim=-1)
    kk = torch.cat((k_pass, k_rot.expand(B, H, S, dr)), dim=-1)
    scale = (dn + dr) ** -0.5
    r = k["rope"]
    if r["type"] == "yarn" and r.get("mscale_all_dim"):
        m = 0.1 * r["mscale_all_dim"] * math.log(r["factor"]) + 1.0
        scale = scale * m * m
    w = (q @ kk.transpose(-1, -2)) * scale
    probs = torch.softmax(w.masked_fill(~allowed, float("-inf")), dim=-1)
    return linear(p, pre + "o_proj", (probs @ v).transpose(1, 2).reshape(B, S, H * dv), False)


def gated(gate, up, k):
    lim = k["swiglu_limit"]
    if lim > 0:
        gate, up = gate.clamp(max=lim), up.clamp(min=-lim, max=lim)
    if k["activation"] == "oai_swiglu":
        return (up + 1) * gate * torch.sigmoid(1.702 * gate)
    if k["activation"] == "gelu_pytorch_tanh":
        return torch.nn.functional.gelu(gate, approximate="tanh") * up
    a = gate * torch.sigmoid(gate) if k["activation"] == "silu" else 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))
    return a * up


def linear(p, name, x, bias):
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if bias else y


def dense_mlp(p, pre, x, k):
    return linear(p, pre + "down_proj", gated(linear(p, pre + "gate_proj", x, False), linear(p, pre + "up_proj", x, False), k), False)


def moe(p, pre, x, k):
    """x [T, dim]: every expert on every token, weighted by the routing weights scattered over the experts."""
    E, K = k["moe_experts"], k["moe_top_k"]
    fused = k["family"] == "gpt_oss"
    logits = linear(p, pre + ("router" if fused else "gate"), x, k["moe_router_bias"])
    if k["moe_score"] == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        scores = torch.softmax(logits, dim=-1)
    if k["family"] == "deepseek_v3":  # HF DeepseekV3MoE.route_tokens_to_experts
        G, T = k["moe_n_group"], x.shape[0]
        bias = p.get(pre + "gate.e_score_correction_bias")
        choice = scores + bias if bias is not None else scores
        group_scores = choice.view(T, G, E // G).topk(2, dim=-1)[0].sum(-1)
        group_idx = torch.topk(group_scores, k=k["moe_topk_group"], dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E)
        ti = torch.topk(choice.masked_fill(~score_mask.bool(), 0.0), k=K, dim=-1, sorted=False)[1]
        tw = scores.gather(1, ti)
        if k["moe_renormalize"]:
            tw = tw / (tw.sum(-1, keepdim=True) + 1e-20)
        tw = tw * k["moe_routed_scale"]
    else:
        tw, ti = torch.topk(scores, K, dim=-1)
        if k["moe_renormalize"]:
            tw = tw / tw.sum(-1, keepdim=True)
    weights = torch.zeros_like(logits).scatter(1, ti, tw)  # [T, E]
    out = torch.zeros_like(x)
    if k["family"] in ("qwen3_moe", "deepseek_v3"):  # HF: one nn.Linear per expert
        for e in range(E):
            ep = pre + f"experts.{e}."
            out = out + weights[:, e:e + 1] * dense_mlp(p, ep, x, k)
    elif k["family"] == "mixtral":  # HF: MixtralBlockSparseTop2MLP per expert, w2(act(w1 x) * w3 x)
        for e in range(E):
            ep = pre + f"experts.{e}."
            y = linear(p, ep + "w2", gated(linear(p, ep + "w1", x, False), linear(p, ep + "w3", x, False), k), False)
            out = out + weights[:, e:e + 1] * y
    else:  # titan's stacked layout [E, in, out]
        b = k["moe_expert_bias"]
        for e in range(E):
            if fused:
                gu = x @ p[pre + "experts.gate_up_proj"][e] + (p[pre + "experts.gate_up_proj_bias"][e] if b else 0)
                gate, up = gu[:, ::2], gu[:, 1::2]
            else:
                gate = x @ p[pre + "experts.gate_proj"][e] + (p[pre + "experts.gate_proj_bias"][e] if b else 0)
                up = x @ p[pre + "experts.up_proj"][e] + (p[pre + "experts.up_proj_bias"][e] if b else 0)
            y = gated(gate, up, k) @ p[pre + "experts.down_proj"][e] + (p[pre + "experts.down_proj_bias"][e] if b else 0)
            out = out + weights[:, e:e + 1] * y
    if k["moe_shared_expert"]:
        out = out + dense_mlp(p, pre + ("shared_experts." if k["family"] == "deepseek_v3" else "shared_expert."), x, k)
    return out


def llama4_rope(x, freqs_cis):
    """HF Llama4's apply_rotary_emb: adjacent pairs of x [B, S, H, D] as complex numbers times e^(i pos f)."""
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3)


def llama4_layer(p, pre, h, k, i, freqs_cis):
    """HF Llama4TextDecoderLayer (training path, no cache): h [B, S, dim] -> [B, S, dim]."""
    B, S, _ = h.shape
    H, Hkv, D = k["n_heads"], k["n_kv_heads"], k["head_dim"]
    pos = torch.arange(S)
    x = norm(h, p, pre + "input_layernorm", k)
    a = pre + "self_attn."
    q = linear(p, a + "q_proj", x, False).view(B, S, H, D)
    kk = linear(p, a + "k_proj", x, False).view(B, S, Hkv, D)
    v = linear(p, a + "v_proj", x, False).view(B, S, Hkv, D).transpose(1, 2)
    use_rope = (i + 1) % k["nope_interval"] != 0  # HF's no_rope_layers[i] (1: RoPE)
    if use_rope:
        q, kk = llama4_rope(q, freqs_cis), llama4_rope(kk, freqs_cis)
        if k["qk_l2_norm"]:  # Llama4TextL2Norm(rms_norm_eps): no weight
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + k["norm_eps"])
            kk = kk * torch.rsqrt(kk.pow(2).mean(-1, keepdim=True) + k["norm_eps"])
    else:  # attention temperature tuning on the NoPE layers, in float32 as HF
        scales = torch.log1p(torch.floor((pos.float() + 1.0) / k["floor_scale"])) * k["attn_scale"] + 1.0
        q = q * scales.to(torch.float64).view(1, S, 1, 1)
    q, kk = q.transpose(1, 2), kk.transpose(1, 2)
    kk, v = kk.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    w = (q @ kk.transpose(-1, -2)) * D ** -0.5
    allowed = pos[None, :] <= pos[:, None]
    if use_rope:  # create_chunked_causal_mask: same chunk of attention_chunk_size
        allowed &= (pos[None, :] // k["attn_chunk"]) == (pos[:, None] // k["attn_chunk"])
    probs = torch.softmax(w.masked_fill(~allowed, float("-inf")), dim=-1)
    h = h + linear(p, a + "o_proj", (probs @ v).transpose(1, 2).reshape(B, S, H * D), False)
    x = norm(h, p, pre + "post_attention_layernorm", k)
    f = pre + "feed_forward."
    if not is_moe_layer(k, i):
        return h + dense_mlp(p, f, x, k)
    t = x.reshape(B * S, -1)  # Llama4TextMoe
    logits = linear(p, f + "router", t, False)
    top, idx = torch.topk(logits, k["moe_top_k"], dim=1)
    scores = torch.sigmoid(torch.full_like(logits, float("-inf")).scatter(1, idx, top))  # [T, E], 0 unchosen
    out = dense_mlp(p, f + "shared_expert.", t, k)
    I = k["moe_hidden_dim"]
    for e in range(k["moe_experts"]):
        routed_in = t * scores[:, e:e + 1]
        gu = routed_in @ p[f + "experts.gate_up_proj"][e]
        gate, up = gu[:, :I], gu[:, I:]
        out = out + (up * (gate * torch.sigmoid(gate))) @ p[f + "experts.down_proj"][e]
    return h + out.view(B, S, -1)


def forward(p, k, tokens):
    B, S = tokens.shape
    H, Hkv, D = k["n_heads"], k["n_kv_heads"], k["head_dim"]
    cos_g, sin_g = rope_cos_sin(k, S)
    cos_l, sin_l = rope_cos_sin(k, S, local=True) if k["rope_local_theta"] > 0 else (cos_g, sin_g)
    pos = torch.arange(S)
    hb = k["attn_proj_bias"]
    h = p["model.embed_tokens.weight"][tokens] * k["embed_scale"]
    if k["family"] == "llama4":
        inv, _ = inv_freq(k)
        ang = torch.arange(S, dtype=torch.float32)[:, None] * inv[None, :]
        freqs_cis = torch.polar(torch.ones_like(ang), ang).to(torch.complex128)
    for i in range(k["n_layers"]):
        pre = f"model.layers.{i}."
        if k["family"] == "llama4":
            h = llama4_layer(p, pre, h, k, i, freqs_cis)
            continue
        place = k["norm_placement"]  # pre: Llama / Qwen3; post: OLMo 2; sandwich: Gemma 2 / 3
        x = h if place == "post" else norm(h, p, pre + "input_layernorm", k)
        if k["kv_lora_rank"]:
            allowed = pos[None, :] <= pos[:, None]
            h = h + mla(p, pre + "self_attn.", x, k, cos_g, sin_g, allowed)
            m = moe(p, pre + "mlp.", norm(h, p, pre + "post_attention_layernorm", k).reshape(B * S, -1), k).view(B, S, -1) \
                if is_moe_layer(k, i) else dense_mlp(p, pre + "mlp.", norm(h, p, pre + "post_attention_layernorm", k), k)
            h = h + m
            continue
        q = linear(p, pre + "self_attn.q_proj", x, hb)
        kk = linear(p, pre + "self_attn.k_proj", x, hb)
        if k["qk_norm"] and k["qk_norm_scope"] == "projection":  # OLMo 2: over all heads at once
            q, kk = norm(q, p, pre + "self_attn.q_norm", k), norm(kk, p, pre + "self_attn.k_norm", k)
        q, kk = q.view(B, S, H, D), kk.view(B, S, Hkv, D)
        v = linear(p, pre + "self_attn.v_proj", x, hb).view(B, S, Hkv, D).transpose(1, 2)
        if k["qk_norm"] and k["qk_norm_scope"] == "head":
            q, kk = norm(q, p, pre + "self_attn.q_norm", k), norm(kk, p, pre + "self_attn.k_norm", k)
        cos, sin = (cos_l, sin_l) if k["layer_window"][i] > 0 else (cos_g, sin_g)
        q, kk = rotate(q.transpose(1, 2), cos, sin), rotate(kk.transpose(1, 2), cos, sin)
        kk, v = kk.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        w = (q @ kk.transpose(-1, -2)) * (k["query_pre_attn_scalar"] or D) ** -0.5  # [B, H, S, S]
        allowed = pos[None, :] <= pos[:, None]
        if k["layer_window"][i] > 0:
            allowed &= (pos[:, None] - pos[None, :]) < k["layer_window"][i]
        w = w.masked_fill(~allowed, float("-inf"))
        if k["attn_sinks"]:  # a sink logit per head joins every softmax, then is dropped
            sinks = p[pre + "self_attn.sinks"].reshape(1, H, 1, 1).expand(B, H, S, 1)
            probs = torch.softmax(torch.cat([w, sinks], dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(w, dim=-1)
        a = (probs @ v).transpose(1, 2).reshape(B, S, H * D)
        o = linear(p, pre + "self_attn.o_proj", a, hb)
        h = h + (o if place == "pre" else norm(o, p, pre + "post_attention_layernorm", k))
        x = {"pre": lambda: norm(h, p, pre + "post_attention_layernorm", k), "post": lambda: h,
             "sandwich": lambda: norm(h, p, pre + "pre_feedforward_layernorm", k)}[place]()
        if is_moe_layer(k, i):
            m = moe(p, pre + moe_module(k), x.reshape(B * S, -1), k).view(B, S, -1)
        else:
            m = dense_mlp(p, pre + "mlp.", x, k)
        h = h + (m if place == "pre" else norm(m, p, pre + "post_feedforward_layernorm", k))
    h = norm(h, p, "model.norm", k)
    logits = h @ (p["model.embed_tokens.weight"] if k["tie_embeddings"] else p["lm_head.weight"]).T
    cap = k["final_logit_softcap"]
    return cap * torch.tanh(logits / cap) if cap > 0 else logits


def make_params(k, gen):
    d, f, V, I, E = k["dim"], k["hidden_dim"], k["vocab_size"], k["moe_hidden_dim"], k["moe_experts"]
    H, Hkv, D = k["n_heads"], k["n_kv_heads"], k["head_dim"]
    hb, ln = k["attn_proj_bias"], k["norm_type"] == "layernorm"
    shapes = {"model.embed_tokens.weight": (V, d)}

    def add_norm(name, n):
        shapes[name + ".weight"] = (n,)
        if ln:
            shapes[name + ".bias"] = (n,)

    def add_mlp(pre, hidden):
        shapes.update({pre + "gate_proj.weight": (hidden, d), pre + "up_proj.weight": (hidden, d),
                       pre + "down_proj.weight": (d, hidden)})

    for i in range(k["n_layers"]):
        pre = f"model.layers.{i}."
        if k["kv_lora_rank"]:  # MLA, HF's order
            a = pre + "self_attn."
            dq, R = k["qk_nope_head_dim"] + k["qk_rope_head_dim"], k["kv_lora_rank"]
            if k["q_lora_rank"]:
                shapes[a + "q_a_proj.weight"] = (k["q_lora_rank"], d)
                add_norm(a + "q_a_layernorm", k["q_lora_rank"])
                shapes[a + "q_b_proj.weight"] = (H * dq, k["q_lora_rank"])
            else:
                shapes[a + "q_proj.weight"] = (H * dq, d)
            shapes[a + "kv_a_proj_with_mqa.weight"] = (R + k["qk_rope_head_dim"], d)
            add_norm(a + "kv_a_layernorm", R)
            shapes[a + "kv_b_proj.weight"] = (H * (k["qk_nope_head_dim"] + k["v_head_dim"]), R)
            shapes[a + "o_proj.weight"] = (d, H * k["v_head_dim"])
        else:
            for n, rows in (("q_proj", H * D), ("k_proj", Hkv * D), ("v_proj", Hkv * D)):
                shapes[pre + f"self_attn.{n}.weight"] = (rows, d)
                if hb:
                    shapes[pre + f"self_attn.{n}.bias"] = (rows,)
            shapes[pre + "self_attn.o_proj.weight"] = (d, H * D)
            if hb:
                shapes[pre + "self_attn.o_proj.bias"] = (d,)
        if k["qk_norm"]:
            whole = k["qk_norm_scope"] == "projection"
            add_norm(pre + "self_attn.q_norm", H * D if whole else D)
            add_norm(pre + "self_attn.k_norm", Hkv * D if whole else D)
        if k["attn_sinks"]:
            shapes[pre + "self_attn.sinks"] = (H,)
        if k["family"] == "llama4":
            f = pre + "feed_forward."
            if is_moe_layer(k, i):
                shapes[f + "router.weight"] = (E, d)
                shapes[f + "experts.gate_up_proj"] = (E, d, 2 * I)
                shapes[f + "experts.down_proj"] = (E, I, d)
                add_mlp(f + "shared_expert.", I)
            else:
                add_mlp(f, k["hidden_dim"])
        elif is_moe_layer(k, i):
            m = pre + moe_module(k)
            fused = k["family"] == "gpt_oss"
            shapes[m + ("router" if fused else "gate") + ".weight"] = (E, d)
            if k["moe_router_bias"]:
                shapes[m + ("router" if fused else "gate") + ".bias"] = (E,)
            if k["family"] in ("qwen3_moe", "deepseek_v3"):
                for e in range(E):
                    add_mlp(m + f"experts.{e}.", I)
            elif k["family"] == "mixtral":
                for e in range(E):
                    shapes.update({m + f"experts.{e}.w1.weight": (I, d), m + f"experts.{e}.w3.weight": (I, d),
                                   m + f"experts.{e}.w2.weight": (d, I)})
            else:
                eb = k["moe_expert_bias"]
                if fused:
                    shapes[m + "experts.gate_up_proj"] = (E, d, 2 * I)
                    if eb:
                        shapes[m + "experts.gate_up_proj_bias"] = (E, 2 * I)
                else:
                    for n in ("gate_proj", "up_proj"):
                        shapes[m + f"experts.{n}"] = (E, d, I)
                        if eb:
                            shapes[m + f"experts.{n}_bias"] = (E, I)
                shapes[m + "experts.down_proj"] = (E, I, d)
                if eb:
                    shapes[m + "experts.down_proj_bias"] = (E, d)
            if k["moe_shared_expert"]:
                if k["family"] == "deepseek_v3":
                    add_mlp(m + "shared_experts.", I * k["moe_shared_width"])
                else:
                    add_mlp(m + "shared_expert.", I)
        else:
            add_mlp(pre + "mlp.", f)
        if k["norm_placement"] != "post":
            add_norm(pre + "input_layernorm", d)
        add_norm(pre + "post_attention_layernorm", d)
        if k["norm_placement"] == "sandwich":
            add_norm(pre + "pre_feedforward_layernorm", d)
        if k["norm_placement"] != "pre":
            add_norm(pre + "post_feedforward_layernorm", d)
    add_norm("model.norm", d)
    if not k["tie_embeddings"]:
        shapes["lm_head.weight"] = (V, d)
    p = random_params(shapes, gen)
    if k["norm_unit_offset"]:  # weights around 0 under (1 + weight): every norm scales by ~1, as in the other variants
        p = {n: t - 1.0 if n.endswith("norm.weight") else t for n, t in p.items()}
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(4321)
    k = knobs_of(a.variant)
    p = make_params(k, gen)
    B, S = 2, 8
    tokens = torch.randint(0, k["vocab_size"], (a.steps, B, S + 1), generator=gen)
    hp = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)

    # DeepSeek-V3's selection biases (model state, not trained here): drawn so that some push a score below 0
    bufs = {}
    if k["route_bias"] > 0:
        for i in range(k["n_layers"]):
            if is_moe_layer(k, i):
                bufs[f"model.layers.{i}.mlp.gate.e_score_correction_bias"] = \
                    (k["route_bias"] * torch.randn(k["moe_experts"], generator=gen)).to(torch.float32).to(torch.float64)

    def loss_of(params, cfg, batch):
        logits = forward({**params, **bufs}, k, batch[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))

    make_golden(a.out, hf_config(k), p, tokens, loss_of, hp, bufs)


if __name__ == "__main__":
    main()
