#!/usr/bin/env python3
"""titan-tokenize on real corpora against the HF reference ids (tests/golden/qwen3_tokenizer_ids.json,
written by scripts/tokenizer_reference.mjs from transformers.js's port of HF tokenizers).

- the whole KJV Bible (data/kjv.txt, from scripts/prepare_data.sh) as one document, on 1 and 2 threads
  (the 2-thread run cuts the document into chunks and re-synchronizes them): ids' count and sha256 equal HF's;
- documents from JSONL, JSONL.gz and a folder: each encoded whole, the end-of-text id between them,
  /doc_starts at each document's first token; the validation split cut at a document start;
- bad input: an empty corpus, a malformed JSONL line, a missing field, a missing path (errors name them).
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import ENV, ROOT, Checks, ensure_data, losses, workdir  # noqa: E402,F401


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    tool = os.path.join(a.build, "titan-tokenize")
    work = workdir(a.build, "tokenizer_test")
    tok = os.path.join(work, "tokenizer.json")
    with open(tok, "wb") as f:
        subprocess.run(["xz", "-dc", os.path.join(ROOT, "tests/golden/qwen3_tokenizer.json.xz")], stdout=f, check=True)
    golden = json.load(open(os.path.join(ROOT, "tests/golden/qwen3_tokenizer_ids.json")))
    eot = golden["eot_id"]
    check = Checks()

    def run(args, threads=2, ok=True):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        p = subprocess.run([tool, "--tokenizer", tok] + args, capture_output=True, text=True, env=env)
        if ok and p.returncode != 0:
            raise SystemExit(f"titan-tokenize {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
        return p

    def read(path):
        f = h5py.File(path, "r")
        return f["tokens"][:].astype("<u4"), f["doc_starts"][:], int(f.attrs["separator_id"])

    # 1. a real text as one document
    kjv = os.path.join(ROOT, "data", "kjv.txt")
    ensure_data(a.build)
    c = golden["corpus"]
    check(os.path.getsize(kjv) == c["bytes"],
          f"data/kjv.txt has the reference's {c['bytes']} bytes (else the corpus changed: regenerate the goldens)")
    for threads in (1, 2):
        out = os.path.join(work, f"kjv{threads}.h5")
        p = run(["--input", kjv, "--output", out], threads)
        ids, starts, sep = read(out)
        check(len(ids) == c["tokens"] and hashlib.sha256(ids.tobytes()).hexdigest() == c["sha256_u32le"],
              f"KJV ({c['bytes']} bytes, one document) on {threads} thread(s): {len(ids)} ids equal HF's "
              f"{c['tokens']} (sha256)")
        check(list(starts) == [0] and sep == eot, "one document, separator id recorded")
        rate = [l for l in p.stdout.splitlines() if "MB/s" in l and "encoded" in l]
        print("     " + (rate[0].split(" - ", 1)[1] if rate else "(no rate line)"))

    # 2. documents: JSONL, JSONL.gz, folders
    docs = [x for x in golden["cases"] if x["text"]]
    want = []
    want_starts = []
    for i, d in enumerate(docs):
        if i:
            want.append(eot)
        want_starts.append(len(want))
        want += d["ids"]
    jl = os.path.join(work, "docs.jsonl")
    with open(jl, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d["text"]}) + "\n")
            if i == 3:
                f.write("\n")  # blank lines between records are skipped
    with open(jl, "rb") as f, gzip.open(jl + ".gz", "wb") as g:
        g.write(f.read())
    folder = os.path.join(work, "folder")
    os.makedirs(os.path.join(folder, "sub"))
    for i, d in enumerate(docs):  # names sort in document order; half of them one level down
        sub = "sub" if i % 2 else ""
        with open(os.path.join(folder, sub, f"doc{i:03d}.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(d["text"])
    for name, inp in (("jsonl", jl), ("jsonl.gz", jl + ".gz")):
        out = os.path.join(work, name + ".h5")
        run(["--input", inp, "--output", out])
        ids, starts, _ = read(out)
        check(ids.tolist() == want and starts.tolist() == want_starts,
              f"{name}: {len(docs)} documents each encoded whole, <|endoftext|> between, doc_starts")
    out = os.path.join(work, "folder.h5")
    run(["--input", folder, "--output", out])
    ids, starts, _ = read(out)
    # a folder is walked in path order: doc000.txt, doc002.txt, ..., then sub/doc001.txt, ...
    order = sorted(range(len(docs)), key=lambda i: os.path.join("sub" if i % 2 else "", f"doc{i:03d}.txt"))
    fw = []
    for k, i in enumerate(order):
        fw += ([eot] if k else []) + docs[i]["ids"]
    check(ids.tolist() == fw and len(starts) == len(docs), "folder of text files: one document per file, path order")
    out = os.path.join(work, "nosep.h5")
    run(["--input", jl, "--output", out, "--separator", "none"])
    ids, _, sep = read(out)
    check(ids.tolist() == [t for d in docs for t in d["ids"]] and sep == -1, "--separator none")
    tr, va = os.path.join(work, "tr.h5"), os.path.join(work, "va.h5")
    run(["--input", jl, "--output", tr, "--val-output", va, "--val-fraction", "0.3"])
    t1, s1, _ = read(tr)
    t2, s2, _ = read(va)
    check(t1.tolist() + t2.tolist() == want and len(t1) in want_starts and s2[0] == 0 and
          len(s1) + len(s2) == len(docs), f"validation split at a document start (token {len(t1)} of {len(want)})")

    # 3. bad input
    empty = os.path.join(work, "empty.txt")
    open(empty, "w").close()
    p = run(["--input", empty, "--output", os.path.join(work, "e.h5")], ok=False)
    check(p.returncode != 0 and "holds no text" in p.stderr and not os.path.exists(os.path.join(work, "e.h5")),
          "an empty input is refused and writes nothing: " + p.stderr.strip()[:120])
    bad = os.path.join(work, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"text": "fine"}\n{"text": broken\n')
    p = run(["--input", bad, "--output", os.path.join(work, "b.h5")], ok=False)
    check(p.returncode != 0 and "bad.jsonl:2: not valid JSON" in p.stderr, "malformed JSONL names file:line")
    nofield = os.path.join(work, "nofield.jsonl")
    with open(nofield, "w") as f:
        f.write('{"content": "x", "id": 1}\n')
    p = run(["--input", nofield, "--output", os.path.join(work, "n.h5")], ok=False)
    check(p.returncode != 0 and "no string field 'text'" in p.stderr and "content, id" in p.stderr,
          "a missing text field names the field and the keys present")
    p = run(["--input", os.path.join(work, "nope.txt"), "--output", os.path.join(work, "x.h5")], ok=False)
    check(p.returncode != 0, "a missing input is an error")
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main())
