#!/usr/bin/env python3
"""The simulator's closed loop on this machine: titan-calibrate writes a spec of it from microbenchmarks alone,
then titan's own training runs are measured and simulated on that spec, layout by layout, in one run.

    ./scripts/closed_loop.py [--build build] [--out outputs/closed_loop] [--quick] [--spec DIR] [--bar 0.10]

For each layout: the measured step (median of the step-to-step times in metrics.jsonl after the first steps)
and rank 0's exposed communication (metrics.jsonl's comm_exposed_s: its waits on communication), the simulated
step and exposed communication (the report a real run with simulation.system prints; under pipeline
parallelism stage 0's exposed communication and bubble, what rank 0's receives wait for), and simulated /
measured (for the exposed communication where it is 5% of the step or more). Nothing is adjusted after seeing
the runs: the spec is titan-calibrate's as written (an MoE layout's step is planned with the routing its run
made, its expert-load line per MoE layer: the workload's input, not a hardware figure). A layout of N > 1 ranks
is simulated on the spec titan-calibrate measured as N ranks share the machine (this-machine-xN-host.yaml: every
rank's kernels measured at once), a 1-rank layout on the all-core one (this-machine-host.yaml). --quick: 1 rank and 2-rank FSDP (the CI test,
tests/simulator/closed_loop_test.py); --only TEXT: the layouts whose name holds TEXT. Exit status 1 if a step's
ratio is outside 1 +- --bar.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE")
# each rank's threads: OMP_NUM_THREADS as the caller's environment sets it (-x passes it on)
MPI = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "-x", "OMP_WAIT_POLICY=PASSIVE"]
QWEN = "configs/qwen3_debug.yaml"
MOE = "configs/qwen3_moe_debug.yaml"

# (name, ranks, config, flags): two model sizes, 1 and 2 ranks, every plan, accumulation and the AC modes
LAYOUTS = [
    ("qwen3 debug, 1 rank", 1, QWEN, []),
    ("qwen3 debug x 2 layers, 1 rank", 1, QWEN, ["--model.n_layers", "8"]),
    ("qwen3 debug, FSDP 2", 2, QWEN, []),
    ("qwen3 debug, HSDP 2 x 1", 2, QWEN, ["--parallelism.data_parallel_replicate_degree", "2",
                                           "--parallelism.data_parallel_shard_degree", "1"]),
    ("qwen3 debug, TP 2 + SP", 2, QWEN, ["--parallelism.tensor_parallel_degree", "2",
                                          "--parallelism.enable_sequence_parallel", "true"]),
    ("qwen3 debug, TP 2 + SP, async", 2, QWEN, ["--parallelism.tensor_parallel_degree", "2",
                                                 "--parallelism.enable_async_tensor_parallel", "true"]),
    ("qwen3 debug, PP 2 GPipe", 2, QWEN, ["--parallelism.pipeline_parallel_degree", "2",
                                           "--parallelism.pipeline_parallel_schedule", "GPipe",
                                           "--parallelism.pipeline_parallel_microbatch_size", "2"]),
    ("qwen3 debug, PP 2 1F1B", 2, QWEN, ["--parallelism.pipeline_parallel_degree", "2",
                                          "--parallelism.pipeline_parallel_microbatch_size", "2"]),
    ("qwen3 debug, PP 2 interleaved", 2, QWEN, ["--parallelism.pipeline_parallel_degree", "2",
                                                 "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
                                                 "--parallelism.pipeline_parallel_layers_per_stage", "1",
                                                 "--parallelism.pipeline_parallel_microbatch_size", "2"]),
    ("qwen3-moe debug, EP 2", 2, MOE, ["--parallelism.expert_parallel_degree", "2"]),
    ("qwen3-moe debug, EP 2, hierarchical", 2, MOE, ["--parallelism.expert_parallel_degree", "2",
                                                     "--parallelism.expert_parallel_comm_backend", "hierarchical"]),
    ("qwen3 debug, FSDP 2, accumulation 2", 2, QWEN, ["--training.global_batch_size", "32"]),
    ("qwen3 debug, FSDP 2, full AC", 2, QWEN, ["--activation_checkpoint.mode", "full"]),
    ("qwen3 debug, 1 rank, selective AC", 1, QWEN, ["--activation_checkpoint.mode", "selective",
                                                     "--activation_checkpoint.selective_ac_option", "2"]),
]
QUICK = ["qwen3 debug, 1 rank", "qwen3 debug, FSDP 2"]


def run(cmd, env=None, **kw):
    p = subprocess.run(cmd, cwd=ROOT, env=env or ENV, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout + p.stderr


def calibrate(build, spec_dir, budget):
    out = run(MPI + ["-np", "2", os.path.join(build, "titan-calibrate"), "--out", spec_dir, "--budget", str(budget)],
              env=dict(ENV, OMP_NUM_THREADS="1"))  # titan-calibrate sets its own thread counts
    for line in out.splitlines():
        if "calibrate: peak" in line or "exchange latency" in line:
            print("  " + line.split(" - ", 1)[-1])
    return os.path.join(spec_dir, "this-machine-host.yaml")


def sim_figures(text):
    """The simulated step and rank 0's simulated wait on communication from a run's simulation report: its exposed
    communication, and under pipeline parallelism stage 0's exposed communication and bubble (rank 0 is stage 0;
    its measured comm_exposed_s counts every wait of its thread, the receives that wait for the other stage
    included)."""
    step = float(re.search(r"sim step: ([0-9.]+) s", text).group(1))
    stage0 = re.search(r"per stage \(compute / exposed communication / bubble / end / memory\): "
                       r"\[0\] [0-9.]+ / ([0-9.]+) / ([0-9.]+) /", text)
    if stage0:
        return step, float(stage0.group(1)) + float(stage0.group(2))
    m = re.search(r"exposed communication ([0-9.]+) s", text)
    return step, float(m.group(1)) if m else 0.0


def measure(build, system, folder, ranks, config, flags, steps):
    shutil.rmtree(folder, ignore_errors=True)
    cmd = [os.path.join(build, "titan-train"), "--config", config, "--job.dump_folder", folder,
           "--training.steps", str(steps), "--validation.enabled", "false", "--checkpoint.enable", "false",
           "--metrics.log_freq", "1", "--job.print_args", "false", "--lr_scheduler.warmup_steps", "2",
           "--simulation.system", system, "--simulation.ranks_per_chip", str(ranks), *flags]
    # the cores shared out, as titan-calibrate measured the machine (all of them; cores / N for each of N ranks)
    env_threads = {"OMP_NUM_THREADS": str(max(1, os.cpu_count() // ranks))}
    out = subprocess.run((MPI + ["-np", str(ranks)] if ranks > 1 else []) + cmd, cwd=ROOT,
                         env=dict(ENV, **env_threads), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    text = out.stdout + out.stderr
    sim_step, sim_exposed = sim_figures(text)
    rows = [json.loads(l) for l in open(os.path.join(folder, "metrics.jsonl")) if '"tps"' in l]
    t = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows, rows[1:])][2:]  # past the first steps
    exposed = [r["comm_exposed_s"] for r in rows[3:]]
    # MoE: the routing the run made is the workload's, not the spec's: each timed step planned with its own
    # routing, layer by layer (a step waits for the busiest rank of each layer in that step; the run's summed
    # routing evens that out), the median of those plans against the median measured step
    loads = [(r["step"], r["expert_load"]) for r in rows[3:] if "expert_load" in r]
    if loads:
        plans = []
        for i, h in loads:
            plan = subprocess.run(cmd + ["--simulation.enabled", "true", "--simulation.world_size", str(ranks),
                                         "--simulation.moe_routing_histogram", h,
                                         "--job.dump_folder", f"{folder}_plan{i}"], cwd=ROOT, env=ENV,
                                  capture_output=True, text=True)
            ptext = plan.stdout + plan.stderr
            if plan.returncode != 0:
                sys.exit(f"failed: planning {folder} with step {i}'s routing\n{ptext[-3000:]}")
            plans.append(sim_figures(ptext))
            shutil.rmtree(f"{folder}_plan{i}", ignore_errors=True)
        sim_step = statistics.median(p[0] for p in plans)
        sim_exposed = statistics.median(p[1] for p in plans)
    return statistics.median(t), statistics.median(exposed) if exposed else 0.0, sim_step, sim_exposed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="outputs/closed_loop")
    ap.add_argument("--spec", help="a folder titan-calibrate wrote (default: calibrate now, under --out)")
    ap.add_argument("--quick", action="store_true", help="1 rank and 2-rank FSDP only")
    ap.add_argument("--only", default="", help="the layouts whose name holds this text")
    ap.add_argument("--one-spec", action="store_true",
                    help="every layout on the all-core spec (a rank priced at its 1/N share; the method before the "
                         "shared spec, for comparison)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--budget", type=float, default=20, help="titan-calibrate --budget")
    ap.add_argument("--bar", type=float, default=0.10, help="allowed |simulated / measured - 1| of the step")
    a = ap.parse_args()
    build = os.path.abspath(os.path.join(ROOT, a.build))
    out = os.path.abspath(os.path.join(ROOT, a.out))
    os.makedirs(out, exist_ok=True)
    subprocess.run([os.path.join(ROOT, "scripts", "prepare_data.sh"), build], check=True, cwd=ROOT,
                   capture_output=True)
    spec = os.path.abspath(a.spec) if a.spec else os.path.join(out, "spec")
    if not a.spec:
        print(f"titan-calibrate (mpirun -np 2, --budget {a.budget:g}) -> {out}/spec")
        calibrate(build, spec, a.budget)

    def system(ranks):  # the spec measured as this many ranks share the machine (titan-calibrate's -xN pair)
        shared = os.path.join(spec, f"this-machine-x{ranks}-host.yaml")
        return (shared if ranks > 1 and os.path.exists(shared) and not a.one_spec
                else os.path.join(spec, "this-machine-host.yaml"))
    layouts = [l for l in LAYOUTS if (not a.quick or l[0] in QUICK) and a.only in l[0]]
    print(f"{'layout':40s} {'measured':>9s} {'simulated':>9s} {'sim/meas':>8s}   "
          f"{'exposed comm: measured':>22s} {'simulated':>9s} {'sim/meas':>8s}")
    bad = 0
    for i, (name, ranks, config, flags) in enumerate(layouts):
        t, e, st, se = measure(build, system(ranks), os.path.join(out, f"run{i}"), ranks, config, flags, a.steps)
        ok = abs(st / t - 1) <= a.bar
        bad += not ok
        # the exposed ratio where the wait is a real share of the step (5%), not timing noise of a few ms
        er = f"{se / e:8.2f}" if e >= 0.05 * t else f"{'-':>8s}"
        print(f"{name:40s} {t:8.3f}s {st:8.3f}s {st / t:8.3f}   {e:21.3f}s {se:8.3f}s {er}  {'ok' if ok else 'OUT'}",
              flush=True)
    print(f"{len(layouts) - bad} of {len(layouts)} layouts' steps within +-{100 * a.bar:.0f}%")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
