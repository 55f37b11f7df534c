#!/usr/bin/env python3
"""safetensors in and out, against an independent implementation (scripts/safetensors_ref.py).

Out: titan-train's export (export_format both) -> model.safetensors holds exactly the HDF5 export's values,
     a valid header (contiguous, aligned) and config.json with torch_dtype; a small shard limit gives
     model-0000i-of-0000n.safetensors + model.safetensors.index.json; bf16 / f16 exports hold the
     round-to-nearest-even values numpy computes.
In:  files written by the reference (F32, BF16, F16, sharded) evaluate in titan-eval to the loss of the same
     values from HDF5 / F32, bit for bit; checkpoint.initial_load_path takes a safetensors folder.
Bad: a truncated file, a missing tensor, a missing config.json are errors naming them; a flipped bit in an
     export (safetensors or HDF5) fails its checksum, naming the file and the tensor (titan's checksums ride in
     the safetensors metadata and the HDF5 attributes; checked here against numpy's computation).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import ENV, ROOT, Checks, ensure_data, losses, workdir  # noqa: E402,F401
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import safetensors_ref as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from titan_checksum import checksum  # noqa: E402

check = Checks()




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    work = workdir(a.build, "safetensors_test")
    ensure_data(a.build)
    train, evaluate = os.path.join(a.build, "titan-train"), os.path.join(a.build, "titan-eval")
    common = ["--config", "configs/qwen3_debug.yaml", "--training.steps", "3", "--training.seq_len", "64",
              "--training.local_batch_size", "2", "--job.print_args", "false", "--validation.enabled", "false",
              "--checkpoint.enable", "false", "--metrics.log_freq", "1", "--model.n_layers", "2"]

    def run(args, ok=True):
        p = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
        if ok and p.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed:\n{p.stdout}{p.stderr}")
        return p

    def eval_loss(ckpt):
        p = run([evaluate, "--checkpoint", ckpt, "--tokens", "data/kjv_val.h5", "--seq-len", "64", "--batch-size",
                 "4", "--max-batches", "4", "--json"])
        return json.loads(p.stdout.strip().splitlines()[-1])["loss"]

    # ---- out
    out = os.path.join(work, "run")
    run([train] + common + ["--job.dump_folder", out, "--checkpoint.export_at_end", "true",
                            "--checkpoint.export_format", "both"])
    exp = os.path.join(out, "export")
    h5 = h5py.File(os.path.join(exp, "model.h5"), "r")
    ref = {k: h5[k][:] for k in h5.keys()}
    got = st.read(exp)
    check(sorted(got) == sorted(ref) and all(np.array_equal(got[k], ref[k]) for k in ref),
          f"model.safetensors holds the HDF5 export's {len(ref)} tensors bit for bit")
    cfg = json.load(open(os.path.join(exp, "config.json")))
    check(cfg.get("torch_dtype") == "float32" and cfg.get("model_type") == "qwen3" and
          cfg == json.loads(h5.attrs["config"]), "config.json: HF config, torch_dtype float32, equal to model.h5's")
    total = sum(v.nbytes for v in ref.values())
    sharded = os.path.join(work, "sharded")
    run([train] + common + ["--job.dump_folder", sharded, "--checkpoint.export_at_end", "true",
                            "--checkpoint.export_max_shard_mb", "1"])
    files = sorted(os.listdir(os.path.join(sharded, "export")))
    shards = [f for f in files if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)]
    idx = json.load(open(os.path.join(sharded, "export", "model.safetensors.index.json")))
    got = st.read(os.path.join(sharded, "export"))
    check(len(shards) >= 2 and "model.h5" not in files and idx["metadata"]["total_size"] == total and
          all(np.array_equal(got[k], ref[k]) for k in ref),
          f"export_max_shard_mb 1: {len(shards)} shards + index ({total} bytes), same values")
    for dtype, name in (("bfloat16", "BF16"), ("float16", "F16")):
        d = os.path.join(work, "run_" + name)
        run([train] + common + ["--job.dump_folder", d, "--checkpoint.export_at_end", "true",
                                "--checkpoint.export_dtype", dtype])
        raw = st.read_raw(os.path.join(d, "export"))
        got = st.read(os.path.join(d, "export"))
        c = json.load(open(os.path.join(d, "export", "config.json")))
        check(all(v[0] == name for v in raw.values()) and c["torch_dtype"] == dtype and
              all(np.array_equal(got[k], st.round_to(ref[k], name)) for k in ref),
              f"{dtype} export: {name} tensors equal numpy's round-to-nearest-even, torch_dtype {dtype}")

    # ---- in
    base = eval_loss(os.path.join(exp, "model.h5"))
    check(eval_loss(exp) == base, f"titan-eval on the export folder (safetensors) = on model.h5: {base:.8f}")
    for name in ("F32", "BF16", "F16"):
        d = os.path.join(work, "in_" + name)
        os.makedirs(d)
        shutil.copy(os.path.join(exp, "config.json"), d)
        st.write(os.path.join(d, "model.safetensors"), ref, name, {"format": "pt"})
        r = os.path.join(work, "in_" + name + "_rounded")  # the same values as F32
        os.makedirs(r)
        shutil.copy(os.path.join(exp, "config.json"), r)
        st.write(os.path.join(r, "model.safetensors"), {k: st.round_to(v, name) for k, v in ref.items()}, "F32")
        l1, l2 = eval_loss(os.path.join(d, "model.safetensors")), eval_loss(r)
        check(l1 == l2 and (name != "F32" or l1 == base),
              f"reference-written {name} file evaluates as its values in F32: {l1:.8f} == {l2:.8f}")
    d = os.path.join(work, "in_sharded")  # two shards and an index written by the reference
    os.makedirs(d)
    shutil.copy(os.path.join(exp, "config.json"), d)
    names = sorted(ref)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    wm = {}
    for f, ks in halves.items():
        st.write(os.path.join(d, f), {k: ref[k] for k in ks}, "BF16")
        wm.update({k: f for k in ks})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    check(eval_loss(d) == eval_loss(os.path.join(work, "in_BF16_rounded")), "reference-written sharded BF16 + index")
    starts = {}
    for kind, path in (("h5", os.path.join(exp, "model.h5")), ("safetensors", exp)):
        p = run([train] + common + ["--job.dump_folder", os.path.join(work, "init_" + kind), "--training.steps", "1",
                                    "--checkpoint.initial_load_path", path])
        starts[kind] = re.search(r"step:  1  loss: +([\d.]+)", p.stdout).group(1)
    check(starts["h5"] == starts["safetensors"], f"initial_load_path: a safetensors folder starts as model.h5 does "
          f"(step 1 loss {starts['h5']})")

    # ---- bad input
    t = os.path.join(work, "trunc")
    shutil.copytree(exp, t)
    os.truncate(os.path.join(t, "model.safetensors"), os.path.getsize(os.path.join(t, "model.safetensors")) - 100)
    p = run([evaluate, "--checkpoint", t, "--tokens", "data/kjv_val.h5", "--seq-len", "64", "--batch-size", "4"], ok=False)
    check(p.returncode != 0 and "model.safetensors" in p.stderr and "truncated" in p.stderr,
          "a truncated file is an error naming it: " + p.stderr.strip().splitlines()[-1][:150])
    with open(os.path.join(exp, "model.safetensors"), "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    meta = json.loads(header["__metadata__"]["titan_checksums"])
    check(all(int(meta[k], 16) == checksum(ref[k]) for k in ref) and
          all(int(v, 16) == checksum(ref[k]) for k, v in
              (l.split() for l in h5.attrs["checksums"].strip().splitlines())),
          "the checksums in the safetensors metadata and the HDF5 attribute equal numpy's computation")
    for name, fname in (("safetensors", "model.safetensors"), ("hdf5", "model.h5")):
        f = os.path.join(work, "flip_" + name)
        shutil.copytree(exp, f)
        if name == "hdf5":
            off = h5py.File(os.path.join(f, fname), "r")["model.norm.weight"].id.get_offset()
            shutil.move(os.path.join(f, "model.safetensors"), os.path.join(f, "moved.bin"))
        else:
            hdr = int.from_bytes(open(os.path.join(f, fname), "rb").read(8), "little")
            begin = json.loads(open(os.path.join(f, fname), "rb").read(8 + hdr)[8:])["model.norm.weight"]["data_offsets"][0]
            off = 8 + hdr + begin
        with open(os.path.join(f, fname), "r+b") as fh:
            fh.seek(off + 4 * 7 + 3)
            b = fh.read(1)[0]
            fh.seek(off + 4 * 7 + 3)
            fh.write(bytes([b ^ 0x10]))
        p = run([evaluate, "--checkpoint", f, "--tokens", "data/kjv_val.h5", "--seq-len", "64", "--batch-size", "4"],
                ok=False)
        check(p.returncode != 0 and fname in p.stderr and "'model.norm.weight' fails its checksum" in p.stderr,
              f"a flipped bit in the {name} export: error naming the file and tensor")
    m = os.path.join(work, "missing")
    os.makedirs(m)
    shutil.copy(os.path.join(exp, "config.json"), m)
    st.write(os.path.join(m, "model.safetensors"), {k: v for k, v in ref.items() if k != "model.norm.weight"})
    p = run([evaluate, "--checkpoint", m, "--tokens", "data/kjv_val.h5", "--seq-len", "64", "--batch-size", "4"], ok=False)
    check(p.returncode != 0 and "model.norm.weight" in p.stderr, "a missing tensor is an error naming it")
    os.remove(os.path.join(m, "config.json"))
    p = run([evaluate, "--checkpoint", m, "--tokens", "data/kjv_val.h5", "--seq-len", "64", "--batch-size", "4"], ok=False)
    check(p.returncode != 0 and "config.json" in p.stderr, "weights without config.json: the error says so")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
