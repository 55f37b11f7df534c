#!/usr/bin/env python3
"""Jobs that cannot lose or mix up each other's work.

- preemption: SIGTERM during training finishes the step, writes a checkpoint at it and exits 143 with a
  message; rerunning the same command resumes there and the losses equal the uninterrupted run's bit for bit;
  under mpirun a signal to one rank stops every rank at the same step; a second signal exits at once;
- a job lock: a second job on a folder in use is refused within seconds, naming the holder's host and pid;
- resuming with a changed model/optimizer config is refused listing the changed keys (optimizer.lr), unless
  checkpoint.resume_with_changed_config allows it;
- the collective watchdog: SIGSTOP one rank of a 2-rank job with comm.train_timeout_seconds 3 -> the job ends
  within seconds with a message naming the collective, its group, its sequence number and the rank that has
  not arrived.
"""
import argparse
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import ENV, ROOT, Checks, ensure_data, losses, workdir  # noqa: E402,F401
ENV = dict(ENV, OMP_NUM_THREADS="1")
check = Checks()






def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    work = workdir(a.build, "job_safety_test")
    ensure_data(a.build)
    train = os.path.join(a.build, "titan-train")
    common = ["--config", "configs/qwen3_debug.yaml", "--training.seq_len", "128", "--training.local_batch_size", "2",
              "--model.n_layers", "2", "--job.print_args", "false", "--validation.enabled", "false",
              "--metrics.log_freq", "1", "--checkpoint.enable", "true", "--checkpoint.interval", "1000",
              "--checkpoint.export_at_end", "false", "--lr_scheduler.warmup_steps", "2", "--training.steps", "14"]
    mpi = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1", "-np", "2"]

    def start(folder, np_=1, extra=()):
        cmd = [train] + common + ["--job.dump_folder", folder, *extra]
        return subprocess.Popen(mpi + cmd if np_ > 1 else cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def wait_for_step(p, n):
        seen = []
        for line in p.stdout:
            seen.append(line)
            if f"step:  {n} " in line or f"step: {n} " in line:
                return seen
        return seen

    def wait_for_stderr(p, text, timeout):
        """Reads p's stderr until a line holds `text` (or `timeout` seconds pass); returns what was read."""
        got, t_end = b"", time.time() + timeout
        while text.encode() not in got and time.time() < t_end:
            ready, _, _ = select.select([p.stderr], [], [], max(0.0, t_end - time.time()))
            if not ready:
                break
            chunk = os.read(p.stderr.fileno(), 4096)
            if not chunk:
                break
            got += chunk
        return got.decode(errors="replace")

    def run(folder, np_=1, extra=()):
        p = start(folder, np_, extra)
        out, err = p.communicate(timeout=600)
        return p.returncode, out, err

    refs = {}
    for np_ in (1, 2):
        d = os.path.join(work, f"ref{np_}")
        rc, out, err = run(d, np_)
        assert rc == 0, out + err
        refs[np_] = losses(d)

    for np_ in (1, 2):
        d = os.path.join(work, f"term{np_}")
        p = start(d, np_)
        wait_for_step(p, 3)
        if np_ == 1:
            p.send_signal(signal.SIGTERM)
        else:  # one rank only: the ranks agree through the all-reduced flag
            ranks = subprocess.run(["pgrep", "-f", f"titan-train .*{d}"], capture_output=True, text=True).stdout.split()
            ranks = [r for r in ranks if int(r) != p.pid]
            os.kill(int(ranks[-1]), signal.SIGTERM)
        t0 = time.time()
        out, err = p.communicate(timeout=120)
        cks = sorted(os.listdir(os.path.join(d, "checkpoint")))
        stopped = [l for l in out.splitlines() if "stopped by signal 15" in l]
        check(p.returncode in (143, 15, -15) or (np_ > 1 and p.returncode != 0 and stopped),
              f"{np_} rank(s): SIGTERM exits as terminated (rc {p.returncode}) within {time.time() - t0:.1f} s")
        check(len(cks) == 1 and stopped and f"after step {cks[0][5:-3]}:" in stopped[0],
              f"{np_} rank(s): a checkpoint at the step it stopped after ({cks}) and the message")
        rc, out, err = run(d, np_)
        got = losses(d)
        step = int(cks[0][5:-3])
        check(rc == 0 and f"at step {step}" in out and all(got[s] == refs[np_][s] for s in range(step + 1, 15)),
              f"{np_} rank(s): the rerun resumes at step {step}; steps {step + 1}-14 equal the uninterrupted run's")

    d = os.path.join(work, "twice")
    p = start(d, extra=["--training.seq_len", "512", "--training.local_batch_size", "8"])  # ~1 s steps
    wait_for_step(p, 2)
    p.send_signal(signal.SIGTERM)
    # The second signal only after the first was handled (the handler says so on stderr): two signals sent
    # before the process runs its handler merge into one, and a fixed sleep is not enough on a loaded
    # machine (an ASan run once merged them after 50 ms).
    heard = wait_for_stderr(p, "signal received", 60)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    ck = os.path.join(d, "checkpoint")
    check(p.returncode in (143, -15) and "signal received" in heard and "stopped by signal" not in out and
          (not os.path.exists(ck) or not os.listdir(ck)),
          f"a second signal exits at once, without finishing the step (rc {p.returncode})")

    d = os.path.join(work, "locked")
    first = start(d)
    wait_for_step(first, 1)
    # held stopped while the second job tries the folder: its 14 small steps can otherwise end (and free the folder)
    # before the second job starts (a fresh-clone CI run once saw the second job run to completion)
    os.kill(first.pid, signal.SIGSTOP)
    t0 = time.time()
    rc, out, err = run(d)
    os.kill(first.pid, signal.SIGCONT)
    check(rc != 0 and "is in use by another titan job" in err and f"pid {first.pid}" in err and time.time() - t0 < 30,
          f"a second job on a folder in use is refused in {time.time() - t0:.1f} s, naming the holder: "
          + ((err.strip().splitlines() or ["(nothing on stderr, rc %d)" % rc])[-1][:160]))
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
    rc, out, err = run(d, extra=["--optimizer.lr", "1e-3"])
    check(rc != 0 and "optimizer.lr: 0.002 -> 0.001" in err, "resume with a changed lr is refused, listing optimizer.lr")
    rc, out, err = run(d, extra=["--optimizer.lr", "1e-3", "--checkpoint.resume_with_changed_config", "true"])
    check(rc == 0 and "resuming with a changed config" in out, "... and allowed by checkpoint.resume_with_changed_config")
    d = os.path.join(work, "hung")
    p = start(d, 2, extra=["--training.steps", "100000", "--checkpoint.enable", "false",
                           "--comm.train_timeout_seconds", "3"])
    wait_for_step(p, 3)
    ranks = [r for r in subprocess.run(["pgrep", "-f", f"titan-train .*{d}"], capture_output=True,
                                       text=True).stdout.split() if int(r) != p.pid]
    os.kill(int(ranks[-1]), signal.SIGSTOP)
    t0 = time.time()
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        for r in ranks:
            os.kill(int(r), signal.SIGKILL)
        p.kill()
        out, err = p.communicate()
    line = next((l for l in err.splitlines() if "collective watchdog" in l), "")
    check(p.returncode not in (0, None) and time.time() - t0 < 60 and
          re.search(r"collective watchdog \(rank [01]\): [a-z_]+ #\d+ on group '[a-z_]+' has not completed after 3\.\d s "
                    r"\(comm.train_timeout_seconds = 3\); group ranks \[0,1\]; not arrived or unresponsive: rank 1 \("
                    r"(entered|finished) .*(no heartbeat for [0-9.]+ s: stopped, hung or dead|not arrived)\)", line),
          f"a hung rank: the job ends in {time.time() - t0:.1f} s with the watchdog's message: {line[:220]}")
    # the launcher ending a job whose collective is stuck (what mpirun does when it loses a host: SIGTERM to the
    # ranks it still reaches, then SIGKILL): the signalled rank says whom it waits for before it is killed, though
    # the watchdog's timeout (60 s) is far off
    d = os.path.join(work, "stuck_signal")
    p = start(d, 2, extra=["--training.steps", "100000", "--checkpoint.enable", "false",
                           "--comm.train_timeout_seconds", "60"])
    wait_for_step(p, 3)
    ranks = [r for r in subprocess.run(["pgrep", "-f", f"titan-train .*{d}"], capture_output=True,
                                       text=True).stdout.split() if int(r) != p.pid]
    os.kill(int(ranks[-1]), signal.SIGSTOP)
    time.sleep(2)
    os.kill(int(ranks[0]), signal.SIGTERM)
    time.sleep(3)
    for r in ranks:
        os.kill(int(r), signal.SIGKILL)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    line = next((l for l in err.splitlines() if "arrived while" in l), "")
    check(re.search(r"\[titan\] rank [01]: SIGTERM arrived while [a-z_]+ #\d+ on group '[a-z_]+' has waited [0-9.]+ s; "
                    r"group ranks \[0,1\]; not arrived or unresponsive: rank [01] \((entered|finished) .*"
                    r"no heartbeat for [0-9.]+ s: stopped, hung or dead\)", line) and "collective watchdog" not in err,
          f"SIGTERM while a collective is stuck: the rank names whom it waits for: {line[:220]}")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
