#!/usr/bin/env python3
"""Context parallel on this machine, measured in one run (ratios, no timed asserts).

  /usr/bin/python3 scripts/bench_context_parallel.py [--build build] [--mem-seqs 16384,32768] [--tps-seqs 8192,16384]

1. Peak memory per rank (titan's tracked tensors, rank 0, by category) for CP 1, 2, 4 at each --mem-seqs
   length (one step of configs/qwen3_debug.yaml, batch 1): activations about 1/cp plus the fixed part
   (parameters, gradients, optimizer state, sharded over dp_shard x cp).
2. Tokens/s of the whole job, CP 2 x 1 thread against 1 rank x 2 threads (the same two cores), at each
   --tps-seqs length, both K/V exchanges (allgather, alltoall = the ring), with the exchange's exposed time
   (steps 2-3 of 3), and the share of the step rank 0 waited on communication (the exchange, the FSDP
   collectives over dp_shard x cp and the step's scalar all-reduces).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE")
CATS = ("parameters", "gradients", "optimizer", "activations", "communication")


def run(build, ranks, threads, seq, steps, extra, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(build, "titan-train"), "--config", "configs/qwen3_debug.yaml", "--training.seq_len", str(seq),
           "--training.local_batch_size", "1", "--training.steps", str(steps), "--metrics.log_freq", "1",
           "--validation.enabled", "false", "--checkpoint.export_at_end", "false", "--job.print_args", "false",
           "--lr_scheduler.warmup_steps", "1", "--job.dump_folder", out] + extra
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}", "-x",
               "OMP_WAIT_POLICY", "-np", str(ranks)] + cmd
    env = dict(ENV, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    m = re.search(r"memory on rank 0 \(MiB, peak by category\): (.*); peak of all tracked tensors ([0-9.]+) MiB", p.stdout)
    mem = {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+)", m.group(1))}
    mem["total"] = float(m.group(2))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f]
    return mem, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--mem-seqs", default="16384,32768")
    ap.add_argument("--tps-seqs", default="8192,16384")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = os.path.join(build, "bench_cp")
    os.makedirs(work, exist_ok=True)

    print("1. peak memory per rank (MiB, rank 0), one step of qwen3_debug at batch 1")
    print(f"{'seq':>6} {'cp':>3} " + " ".join(f"{c:>13}" for c in CATS) + f" {'total':>8} {'act x cp / act(cp 1)':>21}")
    for seq in [int(s) for s in a.mem_seqs.split(",") if s]:
        base = None
        for cp in (1, 2, 4):
            extra = ["--parallelism.context_parallel_degree", str(cp)] if cp > 1 else []
            mem, _ = run(build, cp, 1 if cp > 1 else 2, seq, 1, extra, os.path.join(work, f"mem_{seq}_{cp}"))
            base = base or mem
            ratio = mem["activations"] * cp / base["activations"]
            print(f"{seq:>6} {cp:>3} " + " ".join(f"{mem[c]:>13.1f}" for c in CATS) + f" {mem['total']:>8.1f} {ratio:>21.3f}",
                  flush=True)

    print("\n2. tokens/s of the job (steps 2-3 of 3), the same 2 cores: CP 2 x 1 thread vs 1 rank x 2 threads")
    print(f"{'seq':>6} {'layout':>24} {'tokens/s':>10} {'vs 1 rank':>10} {'comm exposed':>17}")
    for seq in [int(s) for s in a.tps_seqs.split(",") if s]:
        _, rows = run(build, 1, 2, seq, 3, [], os.path.join(work, f"tps_{seq}_1"))
        one = sum(r["tps"] for r in rows[1:]) / len(rows[1:])
        print(f"{seq:>6} {'1 rank x 2 threads':>24} {one:>10.0f} {1.0:>10.2f} {'-':>17}", flush=True)
        for method in ("allgather", "alltoall"):
            _, rows = run(build, 2, 1, seq, 3, ["--parallelism.context_parallel_degree", "2",
                                                "--parallelism.context_parallel_rotate_method", method],
                          os.path.join(work, f"tps_{seq}_{method}"))
            tps = 2 * sum(r["tps"] for r in rows[1:]) / len(rows[1:])  # the log's tps is per rank
            step_s = sum(seq / (2 * r["tps"]) for r in rows[1:])  # batch 1: each step's time
            exposed = sum(r.get("comm_exposed_s", 0) for r in rows[1:]) / step_s
            print(f"{seq:>6} {'CP 2 x 1 thread ' + method:>24} {tps:>10.0f} {tps / one:>10.2f} "
                  f"{100 * exposed:>16.1f}%", flush=True)


if __name__ == "__main__":
    main()
