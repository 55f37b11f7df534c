#!/usr/bin/env python3
"""The tools explain themselves, and the headline command works as typed.

- every executable answers --help and --version (rc 0); titan-train without --config prints its usage (rc 2);
- `mpirun -np 2 titan-train --config qwen3_32b` from an unrelated folder: titan-train found on PATH (the
  install step of scripts/train.sh / test.sh), the bare config name found under configs/, the simulation run
  once (one report), and the log saying what -np means for a simulated job;
- an unknown config name lists the known ones.
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
from testlib import ENV, ROOT, Checks, ensure_data, losses, workdir  # noqa: E402,F401

TOOLS = ["titan-train", "titan-eval", "titan-tokenize", "titan-calibrate", "titan-bench", "titan-bench-linear"]
ENV = dict(ENV, OMP_NUM_THREADS="1")
check = Checks()




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--version", required=True)
    a = ap.parse_args()
    for t in TOOLS:
        exe = os.path.join(a.build, t)
        h = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
        v = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        check(h.returncode == 0 and ("Usage" in h.stdout or "usage" in h.stdout) and "--version" in h.stdout,
              f"{t} --help")
        check(v.returncode == 0 and v.stdout.strip() == f"{t} {a.version}", f"{t} --version: {v.stdout.strip()}")
    p = subprocess.run([os.path.join(a.build, "titan-train")], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "usage: titan-train --config" in p.stderr, "titan-train without --config: usage, rc 2")
    p = subprocess.run([os.path.join(a.build, "titan-train"), "--config", "qwen3_23b"], capture_output=True,
                       text=True, timeout=60, env=ENV)
    check(p.returncode != 0 and "known configs" in p.stderr and "qwen3_32b.yaml" in p.stderr,
          "an unknown config name lists the known ones")

    installed = shutil.which("titan-train")
    check(installed is not None, "titan-train is on PATH (cmake --install build; scripts/train.sh and test.sh run it)")
    if installed:
        v = subprocess.run([installed, "--version"], capture_output=True, text=True)
        check(v.stdout.strip() == f"titan-train {a.version}", f"the installed titan-train is this build ({installed})")
        with tempfile.TemporaryDirectory() as cwd:  # nowhere near the source tree
            p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", "titan-train", "--config", "qwen3_32b",
                                "--model.n_layers", "4", "--job.print_args", "false", "--job.dump_folder",
                                os.path.join(cwd, "out")], capture_output=True, text=True, cwd=cwd, env=ENV,
                               timeout=300)
            out = p.stdout + p.stderr
            check(p.returncode == 0, "mpirun -np 2 titan-train --config qwen3_32b runs as typed (from another folder)")
            check(len(re.findall(r"sim step: ", out)) == 1, "the simulation is reported once, not once per process")
            check("simulation: launched on 2 processes" in out and "-np does not change the result" in out,
                  "the log says what -np means for a simulated job")
    # per-rank profile traces merge without collisions: rank r is process r + 1 and names itself; rank 0 merges
    # them into one file that `titan-trace check` passes
    ensure_data(a.build)
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", os.path.join(a.build, "titan-train"), "--config",
                            "qwen3_debug", "--model.n_layers", "1", "--training.steps", "2", "--training.seq_len", "64",
                            "--validation.enabled", "false", "--checkpoint.enable", "false", "--job.print_args",
                            "false", "--profiling.enable_profiling", "true", "--profiling.profile_step", "2",
                            "--job.dump_folder", d], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
        pids = {}
        for r in (0, 1):
            f = os.path.join(d, f"profile_trace_rank{r}.json")
            if os.path.exists(f):
                ev = json.load(open(f))["traceEvents"]
                names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
                pids[r] = ({e["pid"] for e in ev if "pid" in e}, names)
        check(p.returncode == 0 and pids.get(0, (None,))[0] == {1} and pids.get(1, (None,))[0] == {2} and
              any(n.startswith("rank 1 ") for n in pids[1][1]),
              f"per-rank profile traces: rank r uses pid r + 1 and names itself 'rank r' ({pids})")
        merged = os.path.join(d, "profile_trace.json")
        ok = os.path.exists(merged)
        c = subprocess.run([os.path.join(a.build, "titan-trace"), "check", merged], capture_output=True, text=True)
        mp = {e["pid"] for e in json.load(open(merged))["traceEvents"]} if ok else set()
        simulated = {e["args"]["name"] for e in json.load(open(merged))["traceEvents"]
                     if e.get("name") == "process_name" and e["pid"] in (3, 4)} if ok else set()
        check(ok and c.returncode == 0 and mp == {1, 2, 3, 4} and
              simulated == {"rank 0 simulated (cpu-epyc-zen4-2c)", "rank 1 simulated (cpu-epyc-zen4-2c)"},
              f"rank 0 merged the ranks' measured traces (pids 1, 2) and their simulations on this machine's spec "
              f"(pids 3, 4: {simulated}) into profile_trace.json (pids {mp}); titan-trace check passes it: "
              f"{c.stdout.strip()} {c.stderr.strip()}")
        # the same collective on both ranks linked in the merged file: the straggler named in every member's slice
        linked = [e for e in json.load(open(merged))["traceEvents"]
                  if e.get("ph") == "X" and "straggler_rank" in e.get("args", {})] if ok else []
        m = re.search(r"collectives linked across ranks: (\d+)", p.stdout)
        check(m is not None and int(m.group(1)) > 0 and len(linked) == 2 * int(m.group(1)) and
              all(e["args"]["straggler_rank"] in (0, 1) for e in linked),
              f"rank 0's merge links each collective across both ranks and names its last arrival "
              f"({m.group(0) if m else 'no summary line'}; {len(linked)} member slices)")
        # every op of rank 0's per-op table is in its side-by-side table, with as many calls
        table = {}
        for m in re.finditer(r"^\S+ \S+ \S+ - {3}(\w+)\s+(\d+)\s+[0-9.]+\s+[0-9.]+%", p.stdout, re.M):
            table[m.group(1)] = int(m.group(2))
        side = {}
        tsv = os.path.join(d, "profile_vs_sim_rank0.tsv")
        for row in (open(tsv).read().splitlines()[1:] if os.path.exists(tsv) else []):
            f = row.split("\t")
            side[f[0]] = side.get(f[0], 0) + int(f[2])
        check(len(table) > 10 and {k: side.get(k) for k in table} == table and
              "measured vs simulated (cpu-epyc-zen4-2c in cpu-host" in p.stdout,
              f"every op of the profiled step's table ({len(table)} ops) is in profile_vs_sim_rank0.tsv with its calls "
              f"(missing or different: {sorted(k for k in table if side.get(k) != table[k])}) and the log names the "
              f"largest errors")
        # a wrong spec name fails before the first step, naming the key and the value as written
        p = subprocess.run([os.path.join(a.build, "titan-train"), "--config", "qwen3_debug", "--model.n_layers", "1",
                            "--training.steps", "2", "--profiling.enable_profiling", "true",
                            "--profiling.simulate_system", "cpu-hots", "--job.dump_folder", d],
                           capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
        out = p.stdout + p.stderr
        check(p.returncode != 0 and "profiling.simulate_system 'cpu-hots'" in out and "cpu-host" in out and
              "step:  1" not in out,
              f"a wrong profiling.simulate_system is refused before training, naming the key and the known systems "
              f"(rc {p.returncode}): {out.strip().splitlines()[-1] if out.strip() else ''}")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
