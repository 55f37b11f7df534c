#!/usr/bin/env python3
"""Checkpoints that were damaged after they were written are never trusted.

- the checksums titan stores equal an independent computation here (numpy), dataset by dataset;
- a flipped bit in the newest checkpoint: resume skips it (naming the file and tensor) and continues from the
  previous one, with the losses of the uninterrupted run bit for bit; also under mpirun (2-way FSDP);
- a truncated newest checkpoint: skipped the same way;
- a non-finite value (with a matching checksum): refused, naming the tensor;
- every checkpoint damaged: the job refuses to start from scratch over them;
- a full disk (a small tmpfs): the checkpoint write fails naming the file, no partial file is left, the older
  checkpoint stays intact and resumable; config.yaml likewise; a resume leaves no duplicate rows in
  metrics.jsonl; a stale .tmp from a killed write is removed at start;
- token ids outside the model's vocabulary: refused before step 1, naming the file and the offset.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from titan_checksum import checksum  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import ENV, ROOT, Checks, ensure_data, losses, workdir  # noqa: E402,F401
check = Checks()






def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    work = workdir(a.build, "faults_test")
    ensure_data(a.build)
    train = os.path.join(a.build, "titan-train")
    common = ["--config", "configs/qwen3_debug.yaml", "--training.seq_len", "64", "--training.local_batch_size", "2",
              "--model.n_layers", "1", "--job.print_args", "false", "--validation.enabled", "false",
              "--metrics.log_freq", "1", "--checkpoint.enable", "true", "--checkpoint.interval", "2",
              "--checkpoint.keep_latest_k", "10", "--checkpoint.export_at_end", "false",
              "--lr_scheduler.warmup_steps", "2"]

    def run(folder, steps, np_=1, ok=True, extra=()):
        cmd = [train] + common + ["--job.dump_folder", folder, "--training.steps", str(steps), *extra]
        if np_ > 1:
            cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1", "-np", str(np_)] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
        if ok and p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
        return p

    def flip_bit(path, dataset, element=3, bit=27):
        with h5py.File(path, "r") as f:
            off = f[dataset].id.get_offset()
        with open(path, "r+b") as fh:
            fh.seek(off + 4 * element + bit // 8)
            b = fh.read(1)[0]
            fh.seek(off + 4 * element + bit // 8)
            fh.write(bytes([b ^ (1 << (bit % 8))]))

    ref = os.path.join(work, "ref")
    run(ref, 8)
    want = losses(ref)
    ck6 = os.path.join(ref, "checkpoint", "step-6.h5")
    with h5py.File(ck6, "r") as f:
        stored = dict(line.split() for line in f.attrs["checksums"].strip().splitlines())
        same = all(checksum(f[k][...]) == int(v, 16) for k, v in stored.items())
    check(same and len(stored) > 10, f"the {len(stored)} stored checksums equal numpy's computation of the formula")

    refs = {1: want}
    run(os.path.join(work, "ref2"), 8, 2)
    refs[2] = losses(os.path.join(work, "ref2"))
    for np_ in (1, 2):
        d = os.path.join(work, f"flip{np_}")
        run(d, 6, np_)
        flip_bit(os.path.join(d, "checkpoint", "step-6.h5"), "model/model.norm.weight")
        p = run(d, 8, np_)
        got = losses(d)
        check("skipping checkpoint" in p.stdout and "step-6.h5: tensor 'model/model.norm.weight' fails its checksum"
              in p.stdout and "resumed from" in p.stdout and "step-4.h5 at step 4" in p.stdout,
              f"{np_} rank(s): a flipped bit in step-6.h5 is named and skipped; resumed from step 4")
        check(all(got[s] == refs[np_][s] for s in range(5, 9)), f"{np_} rank(s): steps 5-8 equal the uninterrupted run's "
              "losses bit for bit")
    d = os.path.join(work, "trunc")
    run(d, 6)
    p6 = os.path.join(d, "checkpoint", "step-6.h5")
    os.truncate(p6, os.path.getsize(p6) // 2)
    p = run(d, 8)
    check("skipping checkpoint" in p.stdout and "step-4.h5 at step 4" in p.stdout and
          all(losses(d)[s] == want[s] for s in range(5, 9)), "a truncated newest checkpoint: skipped, resumed from 4")
    d = os.path.join(work, "nan")
    run(d, 4)
    p4 = os.path.join(d, "checkpoint", "step-4.h5")
    name = "optim/exp_avg_sq/model.layers.0.mlp.up_proj.weight"
    with h5py.File(p4, "r+") as f:
        x = f[name][...]
        x.reshape(-1)[5] = np.nan
        f[name][...] = x
        lines = [f"{k} {checksum(x) if k == name else int(v, 16):x}" for k, v in
                 (l.split() for l in f.attrs["checksums"].strip().splitlines())]
        f.attrs["checksums"] = "\n".join(lines) + "\n"
    p = run(d, 6)
    check(f"tensor '{name}' holds a non-finite value" in p.stdout and "step-2.h5 at step 2" in p.stdout,
          "a non-finite value with a matching checksum is refused, naming the tensor")
    d = os.path.join(work, "legacy")  # written before checksums: resumed, values checked finite
    run(d, 4)
    with h5py.File(os.path.join(d, "checkpoint", "step-4.h5"), "r+") as f:
        del f.attrs["checksums"]
    p = run(d, 6)
    check("step-4.h5 at step 4 (written before checksums: values checked finite only" in p.stdout,
          "a checkpoint from before checksums resumes, checked for finiteness")
    d = os.path.join(work, "allbad")
    run(d, 4)
    for s in (2, 4):
        flip_bit(os.path.join(d, "checkpoint", f"step-{s}.h5"), "model/model.norm.weight")
    before = {f: os.path.getmtime(os.path.join(d, "checkpoint", f)) for f in os.listdir(os.path.join(d, "checkpoint"))}
    p = run(d, 6, ok=False)
    after = {f: os.path.getmtime(os.path.join(d, "checkpoint", f)) for f in os.listdir(os.path.join(d, "checkpoint"))}
    check(p.returncode != 0 and "none of the 2 checkpoints" in p.stderr and before == after,
          "every checkpoint damaged: refused, nothing overwritten")
    rows = [json.loads(l)["step"] for l in open(os.path.join(work, "flip1", "metrics.jsonl")) if '"loss"' in l]
    check(rows == list(range(1, 9)), f"metrics.jsonl after a resume: each step once ({rows})")

    # a full disk: a small tmpfs (ENOSPC), mounted for the test (root, as CI runs)
    fs_dir = os.path.join(work, "fullfs")
    os.makedirs(fs_dir)
    src = os.path.join(work, "full_src")
    run(src, 4)
    need = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(src) for f in fs)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={need + (6 << 20)}", "tmpfs", fs_dir],
                             capture_output=True, text=True)
    check(mounted.returncode == 0, "a small tmpfs mounts for the full-disk test: " + mounted.stderr.strip())
    if mounted.returncode == 0:
        try:
            d = os.path.join(fs_dir, "job")
            shutil.copytree(src, d)
            open(os.path.join(d, "checkpoint", "step-6.h5.tmp"), "w").write("partial write of a killed job")
            p = run(d, 8, ok=False)
            cks = sorted(os.listdir(os.path.join(d, "checkpoint")))
            check("removing" in p.stdout and "step-6.h5.tmp" in p.stdout, "a stale .tmp from a killed write is "
                  "removed at start")
            check(p.returncode != 0 and "step-6.h5" in p.stderr and "failed" in p.stderr and
                  cks == ["step-2.h5", "step-4.h5"], "disk full during a checkpoint: error naming the file, no partial "
                  "file left: " + p.stderr.strip().splitlines()[-1][:200])
            shutil.rmtree(os.path.join(work, "full_after"), ignore_errors=True)
            shutil.copytree(d, os.path.join(work, "full_after"))
            p = run(os.path.join(work, "full_after"), 8)
            check("step-4.h5 at step 4 (checksums verified" in p.stdout, "the older checkpoint is intact and resumes")
            shutil.rmtree(d)
            with open(os.path.join(fs_dir, "filler"), "wb") as f:  # fill the disk to the last byte
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            p = run(os.path.join(fs_dir, "cfg"), 2, ok=False)
            check(p.returncode != 0 and "config.yaml" in p.stderr and "No space left" in p.stderr,
                  "disk full writing config.yaml: an error naming it, not an empty file")
        finally:
            subprocess.run(["umount", fs_dir])

    # token ids the model cannot embed
    bad = os.path.join(work, "oov.h5")
    with h5py.File(os.path.join(ROOT, "data", "kjv_train.h5"), "r") as f:
        t = f["tokens"][:200000].astype(np.uint32)
    t[123456] = 300
    with h5py.File(bad, "w") as f:
        f["tokens"] = t
        f.attrs["vocab_size"] = 256
        f.attrs["tokenizer"] = "test"
    p = run(os.path.join(work, "oov"), 2, ok=False, extra=["--training.dataset_path", bad])
    check(p.returncode != 0 and "token id 300 at offset 123456 of '" + bad in p.stderr and "step:" not in p.stdout,
          "an out-of-vocabulary id is refused before step 1, naming file and offset")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
