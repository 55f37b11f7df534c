#!/usr/bin/env python3
"""titan across hosts on shaped links, measured and simulated in one run (root: scripts/cluster.sh).

    ./scripts/bench_hosts.py [--build build] [--out outputs/bench_hosts] [--spec DIR] [--steps 8]
                             [--links 10gbit@100us,1gbit@1ms] [--hosts 2,4]

For each link rate and host count (4 ranks in all: 2 hosts x 2 ranks, 4 hosts x 1), flat FSDP 4 and HSDP
(shard within a host, replicate across hosts) on the debug Qwen3: the measured step (median step-to-step time
in metrics.jsonl past the first steps) and exposed communication, and the simulated ones (the report the run
prints with simulation.system set to a spec of the cluster). The cluster's spec is derived, before any run,
from titan-calibrate's spec of this machine (--spec, or calibrated now): every namespace host a chip holding
1/H of this machine (its peak, vector rate, memory bandwidth and size: the hosts share its cores), the hosts
on one switch whose link is the shaped rate (tc counts frames: 1448 payload bytes of every 1514, efficiency
0.956) with the calibrated exchange latency plus the shaped one-way delay (RATE@DELAY; cluster.sh --delay: netem,
or titan-netdelay where the kernel has none). Nothing is adjusted after seeing the runs.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

from closed_loop import ENV, ROOT, calibrate, sim_figures
from closed_loop import run as sh

CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
RANKS = 4


def scaled_chip(spec_dir, hosts, out_dir):
    """this-machine.yaml with 1/hosts of the machine: the chip of one namespace host."""
    text = open(os.path.join(spec_dir, "this-machine.yaml")).read()

    def scale(key, t):
        return re.sub(rf"^({key}:\s*)([0-9.eE+-]+)", lambda m: m.group(1) + f"{float(m.group(2)) / hosts:.6g}", t,
                      flags=re.M)
    for key in ("peak_tflops", "fp32_tflops", "vector_tflops", "hbm_tbps", "hbm_gib", "local_comm_gbps"):
        text = scale(key, text)
    text = re.sub(r"^name:.*$", f"name: cluster-host-{hosts}", text, flags=re.M)
    text = f"# derived by scripts/bench_hosts.py: 1/{hosts} of this machine (the namespace hosts share its cores)\n" + text
    path = os.path.join(out_dir, f"cluster-host-{hosts}.yaml")
    open(path, "w").write(text)
    return path


def delay_us(delay):
    """'100us' | '1ms' | '' -> microseconds"""
    if not delay:
        return 0.0
    m = re.fullmatch(r"([0-9.]+)(us|ms|s)", delay)
    if not m:
        sys.exit(f"bench_hosts.py: a delay such as 100us or 1ms, got '{delay}'")
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]


def cluster_system(spec_dir, hosts, rate_gbit, delay, out_dir):
    chip = scaled_chip(spec_dir, hosts, out_dir)
    latency = float(re.search(r"^local_comm_latency_us:\s*([0-9.]+)",
                              open(os.path.join(spec_dir, "this-machine.yaml")).read(), re.M).group(1))
    latency += delay_us(delay)  # the shaped one-way delay on top of the exchange's own
    tag = f"{rate_gbit:g}gbit" + (f"-{delay}" if delay else "")
    path = os.path.join(out_dir, f"cluster-{hosts}x-{tag}.yaml")
    open(path, "w").write(
        f"# {hosts} namespace hosts (scripts/cluster.sh) on one switch, each link shaped to {rate_gbit:g} Gbit/s"
        f"{', ' + delay + ' one-way delay' if delay else ''}\n"
        f"name: cluster-{hosts}x-{tag}\nchip: {os.path.basename(chip)}\nchips: {hosts}\nlevels:\n"
        f"  - name: link\n    topology: switch\n    units: {hosts}\n    bandwidth_gbps: {rate_gbit / 8:g}\n"
        f"    latency_us: {latency}\n    efficiency: 0.956\n")
    return path


def run_layout(build, system, rpc, folder, flags, steps):
    shutil.rmtree(folder, ignore_errors=True)
    cmd = [CLUSTER, "mpirun", "-x", "OMP_NUM_THREADS=1", "-x", "OMP_WAIT_POLICY", "-np", str(RANKS),
           os.path.join(build, "titan-train"), "--config", "configs/qwen3_debug.yaml", "--job.dump_folder", folder,
           "--training.steps", str(steps), "--validation.enabled", "false", "--checkpoint.enable", "false",
           "--metrics.log_freq", "1", "--job.print_args", "false", "--lr_scheduler.warmup_steps", "2",
           "--metrics.link_probe_mib", "0", "--simulation.system", system, "--simulation.ranks_per_chip", str(rpc),
           *flags]
    sim, sim_exposed = sim_figures(sh(cmd, timeout=900))
    rows = [json.loads(l) for l in open(os.path.join(folder, "metrics.jsonl")) if '"tps"' in l]
    t = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows, rows[1:])][2:]
    exposed = [r["comm_exposed_s"] for r in rows[3:]]
    return statistics.median(t), statistics.median(exposed), sim, sim_exposed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="outputs/bench_hosts")
    ap.add_argument("--spec", help="a folder titan-calibrate wrote (default: calibrate now, under --out)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--links", default="10gbit@100us,1gbit@1ms",
                    help="comma-separated RATE[@DELAY]: the tc rate and the added one-way delay of every host's link")
    ap.add_argument("--hosts", default="2,4")
    a = ap.parse_args()
    build = os.path.abspath(os.path.join(ROOT, a.build))
    out = os.path.abspath(os.path.join(ROOT, a.out))
    ENV["TITAN_NETDELAY"] = os.path.join(build, "titan-netdelay")  # cluster.sh --delay where the kernel has no netem
    os.makedirs(out, exist_ok=True)
    if subprocess.run([CLUSTER, "check"], env=ENV).returncode != 0:
        sys.exit("bench_hosts.py: no cluster can be made here (scripts/cluster.sh check)")
    spec = os.path.abspath(a.spec) if a.spec else os.path.join(out, "spec")
    if not a.spec:
        print(f"titan-calibrate (mpirun -np 2) -> {spec}")
        calibrate(build, spec, 10)
    print(f"{'link':>13s} {'hosts':>5s} {'layout':22s} {'measured':>9s} {'simulated':>9s} {'sim/meas':>8s}   "
          f"{'exposed: measured':>17s} {'simulated':>9s}")
    for link in a.links.split(","):
        rate, _, delay = link.partition("@")
        gbit = float(rate.replace("gbit", "")) if rate.endswith("gbit") else float(rate.replace("mbit", "")) / 1e3
        for hosts in (int(h) for h in a.hosts.split(",")):
            per = RANKS // hosts
            system = cluster_system(spec, hosts, gbit, delay, out)
            sh([CLUSTER, "down"])
            sh([CLUSTER, "up", str(hosts), "--slots", str(per), "--rate", rate] + (["--delay", delay] if delay else []))
            try:
                for name, flags in (("FSDP 4", ["--parallelism.data_parallel_shard_degree", "4"]),
                                    (f"HSDP {hosts} x {per}", ["--parallelism.data_parallel_replicate_degree",
                                                               str(hosts), "--parallelism.data_parallel_shard_degree",
                                                               str(per)])):
                    t, e, st, se = run_layout(build, system, per,
                                              os.path.join(out, f"{rate}_{delay or 0}_{hosts}_{name[:4]}"), flags, a.steps)
                    print(f"{link:>13s} {hosts:5d} {name:22s} {t:8.3f}s {st:8.3f}s {st / t:8.2f}   {e:16.3f}s "
                          f"{se:8.3f}s", flush=True)
            finally:
                sh([CLUSTER, "down"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
