#!/usr/bin/env python3
"""Issue 4's and issue 10's measurements, in one run (ratios, not absolute
times, matter: this machine has slow spells).

  /usr/bin/python3 scripts/bench_parallel.py [--steps 8]

1. Per-rank memory of parameters + gradients + AdamW state under FSDP with
   1, 2 and 4 ranks (debug model): should be about 1/N of the single rank.
2. Throughput of 2 ranks x 1 thread (FSDP) vs 1 rank x 2 threads on the
   benchmark model, and the share of step time spent waiting on
   communication (exposed) next to the time the transfers took (busy):
   with prefetch, exposed is well below busy. Measured back to back, --repeats
   times (alternating), each pair's ratio printed.
3. Collectives per step, as the profiler prints them (FSDP over 2 ranks,
   benchmark model): per FSDP unit one all-gather in forward, one more in
   backward when it was resharded, one reduce-scatter.
4. Peak activation memory under TP 2 and TP 4 with loss parallel (logits split
   over the vocabulary) against the logits gathered, at a 32k vocabulary.
5. Pipeline parallel: 2 stages x 1 thread (1F1B over the batch's micro-batches)
   vs 1 rank x 2 threads on the benchmark model, back to back; the 1F1B bubble
   bounds it at m / (m + 1) for m micro-batches of even stages, were two
   threads exactly twice one (they are less, so the ratio can exceed it).

  --only N runs section N alone.
"""
import argparse
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE")
TRAIN = os.path.join(ROOT, "build", "titan-train")
QUIET = ["--job.dump_folder", "outputs/bench_parallel", "--job.print_args", "false", "--validation.enabled", "false", "--checkpoint.enable", "false",
         "--checkpoint.export_at_end", "false", "--metrics.log_freq", "1", "--metrics.save_jsonl", "false"]


def launch(np_, threads, args):
    cmd = [TRAIN] + args + QUIET
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}", "-x",
               "OMP_WAIT_POLICY", "-np", str(np_)] + cmd
    env = dict(ENV, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stdout[-3000:] + p.stderr[-3000:])
    return p.stdout


def memory(out):
    m = re.search(r"parameters ([\d.]+), gradients ([\d.]+), optimizer ([\d.]+)", out)
    return [float(x) for x in m.groups()]


def steady(out, skip=2):
    rows = re.findall(r"step: +(\d+) .*?tps: ([\d,]+)(?:.*comm: (\d+)% exposed \((\d+)% busy\))?", out)
    rows = [r for r in rows if int(r[0]) > skip]
    tps = [float(r[1].replace(",", "")) for r in rows]
    harm = len(tps) / sum(1.0 / t for t in tps)
    exposed = [float(r[2]) for r in rows if r[2]]
    busy = [float(r[3]) for r in rows if r[3]]
    avg = lambda v: sum(v) / len(v) if v else 0.0
    return harm, avg(exposed), avg(busy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", type=int, default=0, help="run section N alone")
    a = ap.parse_args()
    if a.only == 5:
        return pipeline(a)
    debug = ["--config", "configs/qwen3_debug.yaml", "--training.steps", "3", "--training.seq_len", "128"]
    print("1. FSDP memory per rank (debug model, MiB): parameters + gradients + AdamW state")
    base = None
    for n in (1, 2, 4):
        p, g, o = memory(launch(n, 1, debug + ["--training.local_batch_size", str(8 // n)]))
        tot = p + g + o
        base = base or tot
        print(f"   {n} rank(s): params {p:7.2f}  grads {g:7.2f}  optimizer {o:7.2f}  total {tot:7.2f}"
              f"  = 1/{base / tot:.2f} of one rank (ideal 1/{n})")
    bench = ["--config", "configs/qwen3_bench.yaml", "--training.steps", str(a.steps)]
    print("\n2. throughput, benchmark model (dim 512, 8 layers, seq 512, global batch 4)")
    ratios = []
    for i in range(a.repeats):
        one = steady(launch(1, 2, bench))
        two = steady(launch(2, 1, bench + ["--training.local_batch_size", "2"]))
        total_two = two[0] * 2
        ratios.append(total_two / one[0])
        print(f"   run {i + 1}: 1 rank x 2 threads {one[0]:8.0f} tokens/s, 2 ranks x 1 thread {total_two:8.0f} tokens/s "
              f"(FSDP) -> ratio {ratios[-1]:.3f}; 2 ranks: communication busy {two[2]:.0f}% of step time, exposed "
              f"(waited for) {two[1]:.0f}%")
    ratios.sort()
    print(f"   ratio (2x1 / 1x2): median {ratios[len(ratios) // 2]:.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f})")

    print("\n3. collectives per step (FSDP over 2 ranks, benchmark model, profiled step 3)")
    out = launch(2, 1, bench + ["--training.local_batch_size", "2", "--training.steps", "3",
                                "--profiling.enable_profiling", "true", "--profiling.profile_step", "3"])
    for line in out.splitlines():
        if "collectives per step" in line or re.search(r"- +(all_gather|reduce_scatter|all_reduce) +x", line):
            print("   " + line.split(" - ", 1)[1])

    print("\n4. peak activation memory on rank 0 (MiB), vocab 32768, debug model, batch 4 x seq 256")
    lp = ["--config", "configs/qwen3_debug.yaml", "--training.steps", "2", "--model.vocab_size", "32768",
          "--training.local_batch_size", "4"]
    for tp in (1, 2, 4):
        row = []
        for gathered in (("false",) if tp == 1 else ("true", "false")):
            out = launch(tp, 1, lp + ["--parallelism.tensor_parallel_degree", str(tp),
                                      "--parallelism.disable_loss_parallel", gathered])
            row.append(float(re.search(r"activations ([\d.]+)", out).group(1)))
        if tp == 1:
            print(f"   TP 1: {row[0]:8.1f}")
        else:
            print(f"   TP {tp}: logits gathered {row[0]:8.1f} -> loss parallel {row[1]:8.1f} ({row[0] / row[1]:.2f}x less)")

    print()
    pipeline(a)


def pipeline(a):
    bench = ["--config", "configs/qwen3_bench.yaml", "--training.steps", str(a.steps)]
    print("5. pipeline parallel, benchmark model (8 layers, global batch 4): 2 stages x 1 thread vs 1 rank x 2 threads")
    for mbs in (1, 2):
        m = 4 // mbs
        ratios = []
        for i in range(a.repeats):
            one = steady(launch(1, 2, bench))
            two = steady(launch(2, 1, bench + ["--parallelism.pipeline_parallel_degree", "2",
                                               "--parallelism.pipeline_parallel_microbatch_size", str(mbs)]))
            ratios.append(two[0] * 2 / one[0])  # tps is per rank (TorchTitan's): the job's is 2x
            print(f"   {m} micro-batches of {mbs}, run {i + 1}: 1 x 2 {one[0]:8.0f} tokens/s, PP 2 {two[0] * 2:8.0f} "
                  f"tokens/s -> ratio {ratios[-1]:.3f} (the 1F1B bubble's bound, were 2 threads twice one: {m / (m + 1):.3f})")
        ratios.sort()
        print(f"   {m} micro-batches: median ratio {ratios[len(ratios) // 2]:.3f}")


if __name__ == "__main__":
    main()
