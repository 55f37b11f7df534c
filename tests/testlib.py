"""What the Python contract tests share: the repository root, an MPI-friendly environment, numbered checks
that print ok/FAIL and decide the exit status, the job's losses from metrics.jsonl, and the corpus."""
import json
import os
import shutil
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE")


class Checks:
    def __init__(self):
        self.fails = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            self.fails.append(what)

    def exit_status(self):
        print(f"{len(self.fails)} failures")
        return 1 if self.fails else 0


def workdir(build, name):
    """A fresh folder for one test under the build folder."""
    work = os.path.join(build, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return work


def ensure_data(build):
    """The KJV corpus and its token files (scripts/prepare_data.sh), made once."""
    if not os.path.exists(os.path.join(ROOT, "data", "kjv_train.h5")):
        subprocess.run([os.path.join(ROOT, "scripts", "prepare_data.sh"), build], check=True, cwd=ROOT)


def losses(folder):
    """step -> loss from a job's metrics.jsonl (the last row of a step wins)."""
    out = {}
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r:
                out[r["step"]] = r["loss"]
    return out
