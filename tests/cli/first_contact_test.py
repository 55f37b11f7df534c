#!/usr/bin/env python3
"""A newcomer's first contact, from a folder far from the source tree, with the installed tools (PATH):

- `titan-train --config qwen3_debug --training.steps N` trains (the corpus found beside the source tree or the
  install, the log saying where); MFU of every step line <= 100%; the export holds tokenizer.json;
- a missing dataset names the key, the folders searched and how to make it, and leaves no job folder behind;
- `--model.flavor` with a shape that disagrees in the same place is refused; an unknown flavor lists the known;
- a simulated step over the chip's memory exits non-zero (simulation.allow_oom true: 0); a simulation saves
  config.yaml and prints the job it priced (`sim job:`), the published figure of a validation config;
- a layout error under mpirun prints once, with the fix, and no MPI_ABORT banner (as a vocabulary too small
  for the data);
- `--help` shows each key's meaning and default; the config dump is off by default (config.yaml named);
- `titan-tokenize --decode` round-trips a KJV sample (byte-level and the installed Qwen3 tokenizer);
- scripts/compare_runs.py compares two runs (the config difference, a PNG).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import ENV, ROOT, Checks, ensure_data  # noqa: E402

ENV = dict(ENV, OMP_NUM_THREADS="1")
checks = Checks()


def check(cond, what, detail=""):
    """One check; the output that explains a failure is printed only then."""
    checks(cond, what + ("" if cond or not detail else "\n" + detail[-1200:]))


def run(cmd, cwd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=ENV, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    ensure_data(a.build)
    train = shutil.which("titan-train")
    tokenize = shutil.which("titan-tokenize")
    if not train or not tokenize:
        check(False, "titan-train and titan-tokenize on PATH (cmake --install build; scripts/test.sh runs it)")
        return checks.exit_status()
    with tempfile.TemporaryDirectory() as cwd:
        # the quickstart, as typed, from an unrelated folder
        rc, out = run([train, "--config", "qwen3_debug", "--training.steps", "6", "--metrics.log_freq", "1",
                       "--validation.freq", "3"], cwd)
        job = os.path.join(cwd, "outputs", "qwen3_debug")
        check(rc == 0, f"titan-train --config qwen3_debug trains from another folder (rc {rc})", out)
        check("data: training.dataset_path 'data/kjv_train.h5' found at" in out, "the log says where the data was found")
        check("effective config" not in out and "config: ./outputs/qwen3_debug/config.yaml" in out and
              os.path.exists(os.path.join(job, "config.yaml")), "no config dump by default; config.yaml named and saved")
        rows = [json.loads(l) for l in open(os.path.join(job, "metrics.jsonl"))] if rc == 0 else []
        mfus = [r["mfu"] for r in rows if "mfu" in r]
        check(len(mfus) == 6 and all(0 < m <= 100 for m in mfus),
              f"MFU of every step <= 100% against the measured peak ({mfus})")
        check("MFU against" in out and "measured on 1 thread" in out, "the log says the peak was measured, on how many threads")
        tok_json = os.path.join(job, "export", "tokenizer.json")
        check(os.path.exists(tok_json) and len(json.load(open(tok_json))["model"]["vocab"]) == 256,
              "the export folder holds tokenizer.json (byte-level: 256 tokens)")
        check("architectures Qwen3ForCausalLM" in out, "the export's HF class is logged")

        # an ablation, and the comparison of the two runs
        rc, out = run([train, "--config", "qwen3_debug", "--training.steps", "6", "--metrics.log_freq", "1",
                       "--validation.freq", "3", "--model.qk_norm", "false", "--job.dump_folder", "outputs/no_qk"], cwd)
        check(rc == 0 and "beyond qwen3's preset: qk_norm false" in out and "LlamaForCausalLM (not qwen3's own" in out,
              "the building line names the knobs an ablation changed; the export says its class changed")
        png = os.path.join(cwd, "cmp.png")
        p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "compare_runs.py"), job,
                            os.path.join(cwd, "outputs", "no_qk"), "--out", png], capture_output=True, text=True)
        check(p.returncode == 0 and "model.qk_norm: true | false" in p.stdout and os.path.getsize(png) > 10000,
              "compare_runs.py: the config difference and a PNG", p.stdout + p.stderr)

        # a missing dataset: the key, the folders, the fix; no job folder left behind
        rc, out = run([train, "--config", "qwen3_debug", "--training.dataset_path", "nowhere/corpus.h5",
                       "--job.dump_folder", "outputs/missing"], cwd)
        check(rc != 0 and "training.dataset_path = 'nowhere/corpus.h5': no such file in ." in out and
              "titan-tokenize --input" in out and not os.path.exists(os.path.join(cwd, "outputs", "missing")),
              "a missing dataset names the key, the folders and the fix, and leaves no folder", out)

        # model.flavor: selects, or is refused
        rc, out = run([train, "--config", "qwen3_debug", "--model.flavor", "0.6b", "--model.dim", "256"], cwd)
        check(rc != 0 and "model.flavor 0.6b (--model.flavor) has model.dim = 1024, but --model.dim gives 256" in out,
              "--model.flavor with a disagreeing shape is refused", out)
        rc, out = run([train, "--config", "qwen3_32b", "--model.flavor", "0.6b"], cwd)
        check(rc == 0 and "qwen3 0.6b, 596,049,920 parameters (440,467,456 non-embedding)" in out,
              "--model.flavor 0.6b on the 32B config plans Qwen3-0.6B (Qwen's 0.6B, 0.44B non-embedding)", out)
        check("sim published: 11,099 tok/s" in out and "not compared" in out,
              "the 32B's published figure is not compared with another model's step")
        rc, out = run([train, "--config", "qwen3_32b", "--model.flavor", "0.5b"], cwd)
        check(rc != 0 and "its flavors: debug, bench, 0.6b" in out, "an unknown flavor lists the known ones")

        # simulations: the job they priced, config.yaml, the published figure, OOM
        rc, out = run([train, "--config", "qwen3_32b", "--job.dump_folder", "outputs/sim32"], cwd)
        check(rc == 0 and "sim job: qwen3 32b, 32,762,123,264 parameters" in out and "65,536 tokens per step" in out
              and "activation checkpointing full" in out and "bfloat16" in out,
              "a simulation prints the job it priced (parameters, tokens per step, AC, dtypes)")
        check(os.path.exists(os.path.join(cwd, "outputs", "sim32", "config.yaml")), "a simulation saves config.yaml")
        check(re.search(r"sim published: 11,099 tok/s \(SemiAnalysis[^)]*\)[^;]*; simulated [0-9,]+: [+-][0-9.]+%", out)
              is not None, "a validation config prints the published figure it reproduces and the error")
        rc, out = run([train, "--config", "qwen3_32b", "--training.local_batch_size", "64"], cwd)
        check(rc != 0 and "does not fit in trainium2's memory" in out and "simulation.allow_oom" in out,
              "a simulated OOM exits non-zero, naming simulation.allow_oom")
        rc, _ = run([train, "--config", "qwen3_32b", "--training.local_batch_size", "64", "--simulation.allow_oom",
                     "true"], cwd)
        check(rc == 0, "simulation.allow_oom true plans it anyway (exit 0)")

        # a layout error under mpirun: once, with the fix, a clean exit
        rc, out = run(["mpirun", "--oversubscribe", "-np", "3", train, "--config", "qwen3_debug",
                       "--parallelism.tensor_parallel_degree", "2"], cwd)
        check(rc != 0 and out.count("[titan] error") == 1 and "launch with `mpirun -np 4`" in out and
              "MPI_ABORT" not in out and "fatal" not in out,
              "a layout error prints once, with the fix, and no MPI_ABORT banner", out)
        rc, out = run(["mpirun", "--oversubscribe", "-np", "2", train, "--config", "qwen3_debug",
                       "--parallelism.data_parallel_shard_degree", "4"], cwd)
        check(rc != 0 and out.count("[titan] error") == 1 and "data_parallel_shard_degree: -1" in out,
              "dp_shard over the world: once, suggesting -1")
        rc, out = run(["mpirun", "--oversubscribe", "-np", "4", train, "--config", "qwen3_debug",
                       "--parallelism.tensor_parallel_degree", "4", "--model.n_heads", "6", "--training.steps", "1"], cwd)
        check(rc != 0 and out.count("[titan] error") == 1 and
              "model.n_heads (6) must be divisible by parallelism.tensor_parallel_degree (4); degrees that divide it: "
              "1, 2, 3, 6" in out and "MPI_ABORT" not in out,
              "a head count the tp degree does not divide: once, naming the degrees that do", out)

        rc, out = run(["mpirun", "--oversubscribe", "-np", "2", train, "--config", "qwen3_debug", "--model.vocab_size",
                       "100", "--job.dump_folder", "outputs/vocab"], cwd)
        check(rc != 0 and out.count("[titan] error") == 1 and "model.vocab_size = 100 is smaller than the vocabulary" in out
              and not os.path.exists(os.path.join(cwd, "outputs", "vocab")),
              "a vocabulary the model cannot hold: once, before the job folder exists", out)

        # --help: meanings and defaults
        rc, out = run([train, "--help"], cwd)
        check(rc == 0 and re.search(r"--training.steps .*optimizer steps.*\[an integer; default 200\]", out) is not None
              and re.search(r"--model.norm_type .*\[rmsnorm \| layernorm; default \"rmsnorm\"\]", out) is not None,
              "--help: each key's meaning, what it takes and its default")

        # titan-tokenize --decode round-trips a KJV sample, byte-level and with the installed Qwen3 tokenizer
        sample = os.path.join(cwd, "kjv_sample.txt")
        with open(os.path.join(ROOT, "data", "kjv.txt"), "rb") as f:
            open(sample, "wb").write(f.read(50000))
        for tok in ([], ["--tokenizer", "qwen3"]):
            h5 = os.path.join(cwd, f"sample{len(tok)}.h5")
            back = os.path.join(cwd, f"back{len(tok)}.txt")
            r1, o1 = run([tokenize, "--input", sample, "--output", h5] + tok, cwd)
            r2, o2 = run([tokenize, "--decode", h5, "--output", back], cwd)
            same = r1 == 0 and r2 == 0 and open(back, "rb").read() == open(sample, "rb").read()
            check(same, f"titan-tokenize --decode round-trips the KJV sample ({tok[-1] if tok else 'byte'})", o1 + o2)
    return checks.exit_status()


if __name__ == "__main__":
    sys.exit(main())
