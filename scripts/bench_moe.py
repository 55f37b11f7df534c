#!/usr/bin/env python3
"""gpt-oss debug model (configs/gpt_oss_debug.yaml): titan vs PyTorch tokens/s
(same batch, same threads, float32), and the share of titan's step time in
MoE dispatch/combine at ep = 2, measured in one run.

  /usr/bin/python3 scripts/bench_moe.py [--steps 8]

The PyTorch side is scripts/gpt_oss_reference.py's model in float32 with
HF's training-path experts (every expert on every token, weighted by the
scattered router scores), i.e. what transformers runs in training.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE")
QUIET = ["--job.dump_folder", "outputs/bench_moe", "--job.print_args", "false", "--validation.enabled", "false", "--checkpoint.enable", "false",
         "--metrics.log_freq", "1", "--metrics.save_jsonl", "false"]


def titan(np_, threads, extra, steps):
    cmd = [os.path.join(ROOT, "build", "titan-train"), "--config", "configs/gpt_oss_debug.yaml",
           "--training.steps", str(steps)] + QUIET + extra
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}", "-x",
               "OMP_WAIT_POLICY", "-np", str(np_)] + cmd
    p = subprocess.run(cmd, cwd=ROOT, env=dict(ENV, OMP_NUM_THREADS=str(threads)), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stdout[-3000:] + p.stderr[-3000:])
    return p.stdout


def torch_tps(steps, threads):
    import torch
    import gpt_oss_reference as ref
    torch.set_num_threads(threads)
    torch.set_default_dtype(torch.float32)
    tables = ref.yarn_cos_sin
    ref.yarn_cos_sin = lambda c, n: tuple(t.float() for t in tables(c, n))  # the reference builds float64 tables
    cfg = dict(vocab_size=256, hidden_size=128, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, num_local_experts=8, num_experts_per_tok=2, sliding_window=64,
               rope_theta=150000.0, rms_norm_eps=1e-5, swiglu_limit=7.0,
               rope_scaling=dict(factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                 original_max_position_embeddings=4096),
               layer_types=["sliding_attention", "full_attention"] * 2)
    g = torch.Generator().manual_seed(0)
    d, f, E, V, H, Hkv, D = 128, 128, 8, 256, 4, 2, 32
    shapes = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,), "lm_head.weight": (V, d)}
    for i in range(4):
        pre = f"model.layers.{i}."
        for n, (o, inp) in {"q_proj": (H * D, d), "k_proj": (Hkv * D, d), "v_proj": (Hkv * D, d),
                            "o_proj": (d, H * D)}.items():
            shapes[pre + f"self_attn.{n}.weight"] = (o, inp)
            shapes[pre + f"self_attn.{n}.bias"] = (o,)
        shapes.update({pre + "self_attn.sinks": (H,), pre + "mlp.router.weight": (E, d), pre + "mlp.router.bias": (E,),
                       pre + "mlp.experts.gate_up_proj": (E, d, 2 * f), pre + "mlp.experts.gate_up_proj_bias": (E, 2 * f),
                       pre + "mlp.experts.down_proj": (E, f, d), pre + "mlp.experts.down_proj_bias": (E, d),
                       pre + "input_layernorm.weight": (d,), pre + "post_attention_layernorm.weight": (d,)})
    p = {k: (0.02 * torch.randn(s, generator=g)).requires_grad_(True) for k, s in shapes.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=1e-3, foreach=False)
    B, S = 8, 256
    tokens = torch.randint(0, V, (steps, B, S + 1), generator=g)
    times = []
    for s in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        ref.loss_of(p, cfg, tokens[s]).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    steady = times[2:]
    return B * S * len(steady) / sum(steady)


def steady_tps(out):
    rows = [(int(s), float(t.replace(",", ""))) for s, t in re.findall(r"step: +(\d+) .*?tps: ([\d,]+)", out)]
    v = [t for s, t in rows if s > 2]
    return len(v) / sum(1 / t for t in v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    t = steady_tps(titan(1, a.threads, [], a.steps))
    p = torch_tps(a.steps, a.threads)
    print(f"gpt-oss debug (dim 128, 4 layers, 8 experts top-2, seq 256, batch 8), {a.threads} threads, float32")
    print(f"   titan   {t:8.0f} tokens/s")
    print(f"   pytorch {p:8.0f} tokens/s (HF training-path dense experts)")
    print(f"   ratio titan/pytorch: {t / p:.2f}x")
    out = titan(2, 1, ["--parallelism.expert_parallel_degree", "2", "--profiling.enable_profiling", "true",
                       "--profiling.profile_step", "3"], a.steps)
    step_ms = float(re.search(r"profile of one step: ([\d.]+) s", out).group(1)) * 1e3
    moe = 0.0
    for name, ms in re.findall(r"- +(\w+) +\d+ +([\d.]+) ", out):
        if name in ("all_to_all", "index_select", "index_add", "scatter_add", "gather"):
            moe += float(ms)
    print(f"   ep = 2 (2 ranks x 1 thread): dispatch/combine (all-to-all-v exchanges, row gathers and weighted "
          f"sums) {moe:.1f} ms of a {step_ms:.0f} ms step = {100 * moe / step_ms:.1f}%")


if __name__ == "__main__":
    main()
