#!/usr/bin/env python3
"""A minimal, independent safetensors reader and writer (numpy only), the
reference titan's safetensors export and import are tested against.

The format (https://github.com/huggingface/safetensors): 8 bytes little-endian
header size N, a JSON header of N bytes mapping each tensor name to its dtype,
shape and [begin, end) byte offsets into the data that follows (plus an
optional "__metadata__" map of strings), then the raw little-endian bytes.
Sharded checkpoints add model.safetensors.index.json with a weight_map.

  read(path)            -> {name: float32 ndarray}   (file, index.json, or folder)
  read_raw(path)        -> {name: (dtype str, shape, raw bytes)}
  write(path, tensors, dtype="F32")   tensors: {name: ndarray}; dtype F32 | BF16 | F16
  round_to(a, dtype)    -> the float32 values a BF16/F16 file holds for a
"""
import json
import os
import struct

import numpy as np


def _files(path):
    if os.path.isdir(path):
        idx = os.path.join(path, "model.safetensors.index.json")
        path = idx if os.path.exists(idx) else os.path.join(path, "model.safetensors")
    if path.endswith(".json"):
        wm = json.load(open(path))["weight_map"]
        return [os.path.join(os.path.dirname(path), f) for f in sorted(set(wm.values()))], wm
    return [path], None


def read_raw(path):
    files, wm = _files(path)
    out = {}
    for f in files:
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
            data = fh.read()
        spans = []
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            spans.append((b, e))
            out[name] = (t["dtype"], tuple(t["shape"]), data[b:e])
            if wm is not None:
                assert wm[name] == os.path.basename(f), f"{name}: index says {wm[name]}, found in {f}"
        spans.sort()  # the data must be covered exactly, without holes or overlaps
        pos = 0
        for b, e in spans:
            assert b == pos, f"{f}: data gap/overlap at byte {pos} (next tensor at {b})"
            pos = e
        assert pos == len(data), f"{f}: {len(data) - pos} bytes after the last tensor"
        assert (8 + n) % 8 == 0, f"{f}: data not 8-byte aligned"
    return out


def _to_f32(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape).copy()
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32).reshape(shape)
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    raise ValueError(dtype)


def read(path):
    return {k: _to_f32(*v) for k, v in read_raw(path).items()}


def _bf16_bits(a):  # round to nearest even
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def round_to(a, dtype):
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.copy()
    if dtype == "F16":
        return a.astype("<f2").astype(np.float32)
    return (_bf16_bits(a).astype(np.uint32) << 16).view(np.float32).reshape(a.shape)


def write(path, tensors, dtype="F32", metadata=None):
    header, blobs, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        a = np.asarray(a, dtype=np.float32)
        raw = (a.astype("<f4") if dtype == "F32" else a.astype("<f2") if dtype == "F16" else _bf16_bits(a)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
