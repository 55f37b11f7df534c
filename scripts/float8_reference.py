"""FP8 numerics reference for titan's float8 training (tests/golden/float8.h5).

An independent numpy model of the OCP 8-bit formats and of torchao's float8 / MX scaling, written from the
specifications rather than from titan's code: the formats as tables of their 256 code points, a value cast by
searching the table for the nearest finite value (ties to the code with an even last bit), after torchao's
saturating clamp. titan's float8 tests (tests/test_float8.cpp) compare bit for bit.

  float8_e4m3fn: bias 7, 3 mantissa bits, S.1111.111 is NaN, no infinity, max 448
  float8_e5m2:   bias 15, 2 mantissa bits, IEEE-like (exponent 31: inf / NaN), max 57344

Scales as torchao computes them (torchao/float8/float8_utils.py, prototype/mx_formats/mx_tensor.py):
  tensorwise / axiswise: amax in float32; scale = float32(max / max(float64(amax), 1e-12)); rowwise recipes
  round it down to a power of two; cast = saturate(x * scale) in float32; the GEMM multiplies cast / scale.
  MX (32-element blocks along the contraction axis): floor: e = floor(log2 amax) - emax (e4m3: 8), clamped to
  [-127, 128]; rceil: e = ceil(log2(amax * float32(1 / max))); cast = saturate(x * 2^-e); the GEMM multiplies
  cast * 2^e.

Run with Debian's python3 (numpy, h5py): /usr/bin/python3 scripts/float8_reference.py --out tests/golden/float8.h5
"""
import argparse

import h5py
import numpy as np

F32 = np.float32

FORMATS = {
    "e4m3": dict(mbits=3, bias=7, ieee=False),
    "e5m2": dict(mbits=2, bias=15, ieee=True),
}


def code_values(fmt):
    """The value of each of the 256 codes (NaN where the code is NaN, +-inf for e5m2's infinities)."""
    m, bias, ieee = FORMATS[fmt]["mbits"], FORMATS[fmt]["bias"], FORMATS[fmt]["ieee"]
    vals = np.zeros(256)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c & 0x7F) >> m
        f = c & ((1 << m) - 1)
        emax_field = (1 << (7 - m)) - 1
        if ieee and e == emax_field:
            vals[c] = s * np.inf if f == 0 else np.nan
        elif not ieee and e == emax_field and f == (1 << m) - 1:
            vals[c] = np.nan
        elif e == 0:
            vals[c] = s * f * 2.0 ** (1 - bias - m)
        else:
            vals[c] = s * (1 + f / 2.0 ** m) * 2.0 ** (e - bias)
    return vals


TABLES = {f: code_values(f) for f in FORMATS}


def fmt_max(fmt):
    v = TABLES[fmt]
    return float(np.max(v[np.isfinite(v)]))


def encode(x, fmt):
    """float32 array -> uint8 codes: clamp to +-max (torchao's saturation), nearest finite code, ties to the even
    code (neighbouring magnitudes have neighbouring codes); a value rounding to zero keeps its sign."""
    vals = TABLES[fmt]
    codes = np.array([c for c in range(256) if np.isfinite(vals[c]) and c != 0x80])  # -0 comes from the sign
    cv = vals[codes]
    mx = fmt_max(fmt)
    out = np.zeros(x.size, dtype=np.uint8)
    for i, v in enumerate(x.astype(np.float64).ravel()):
        neg = bool(np.signbit(v))
        if np.isnan(v):
            out[i] = 0x7F | (0x80 if neg else 0)
            continue
        v = min(max(v, -mx), mx)
        d = np.abs(cv - v)
        cands = codes[d == np.min(d)]
        if len(cands) > 1:
            cands = [c for c in cands if c % 2 == 0]
        assert len(cands) == 1, (v, cands)
        c = int(cands[0])
        out[i] = (0x80 if neg else 0) if vals[c] == 0 else c
    return out.reshape(x.shape)


def decode(codes, fmt):
    return TABLES[fmt][codes.astype(np.int64)].astype(F32)


# ---- scales -------------------------------------------------------------------------------------------
def amax_to_scale(amax, fmt, pow2):
    s = F32(fmt_max(fmt) / max(float(amax), 1e-12))
    if pow2 and np.isfinite(s) and s > 0:
        s = F32(2.0 ** np.floor(np.log2(np.float64(s))))  # exact in float64 for a float32 s
    return s


def mx_exponent(amax, fmt, mode):
    """biased e8m0 exponent of a block with this float32 amax."""
    amax = F32(amax)
    if not np.isfinite(amax):
        return 255
    emax = 8 if fmt == "e4m3" else 15
    if mode == "floor":
        field = (int(amax.view(np.uint32)) >> 23) & 0xFF
        return int(np.clip(field - 127 - emax, -127, 128)) + 127
    descale = F32(amax * F32(1.0 / fmt_max(fmt)))
    b = int(descale.view(np.uint32))
    field, mant = (b >> 23) & 0xFF, b & 0x7FFFFF
    up = mant > 0x400000 if field == 0 else mant != 0
    return min(field + int(up), 255)


def round_trip(x, fmt, scaling, pow2, axis):
    """x float32 [R, C] -> (scales, the float32 values the GEMM multiplies); axis: the contraction axis."""
    rows = x if axis == 1 else x.T.copy()
    out = np.zeros_like(rows)
    if scaling == "tensorwise":
        s = amax_to_scale(np.max(np.abs(rows)), fmt, pow2)
        out = decode(encode(F32(rows * s), fmt), fmt) / s
        scales = np.array([s], dtype=F32)
    elif scaling == "axiswise":
        scales = np.zeros(rows.shape[0], dtype=F32)
        for r in range(rows.shape[0]):
            s = amax_to_scale(np.max(np.abs(rows[r])), fmt, pow2)
            scales[r] = s
            out[r] = decode(encode(F32(rows[r] * s), fmt), fmt) / s
    else:
        mode = scaling[3:]
        nb = rows.shape[1] // 32
        scales = np.zeros((rows.shape[0], nb), dtype=F32)
        for r in range(rows.shape[0]):
            for b in range(nb):
                blk = rows[r, 32 * b:32 * (b + 1)]
                e = mx_exponent(np.max(np.abs(blk)), fmt, mode)
                val, inv = F32(2.0 ** (e - 127)), F32(2.0 ** (127 - e))
                scales[r, b] = val
                out[r, 32 * b:32 * (b + 1)] = decode(encode(F32(blk * inv), fmt), fmt) * val
        if axis == 0:
            scales = scales.T.copy()
    return scales, (out if axis == 1 else out.T.copy())


RECIPES = {  # (input, weight, grad_output, input_for_gw, weight_for_gi, grad_output_for_gw): (fmt, scaling, pow2) or None
    "tensorwise": [("e4m3", "tensorwise", False), ("e4m3", "tensorwise", False), ("e5m2", "tensorwise", False)] * 2,
    "rowwise": [("e4m3", "axiswise", True)] * 6,
    "rowwise_with_gw_hp": [("e4m3", "axiswise", True)] * 3 + [None, ("e4m3", "tensorwise", True), None],
    "mxfp8": [("e4m3", "mx_floor", False)] * 6,
    "mxfp8_rceil": [("e4m3", "mx_rceil", False)] * 6,
}
# reorder to (input, weight, grad_output, input_for_gw, weight_for_gi, grad_output_for_gw)
RECIPES["tensorwise"] = [RECIPES["tensorwise"][i] for i in (0, 1, 2, 0, 1, 2)]


def q(x, cast, axis):
    return x if cast is None else round_trip(x, cast[0], cast[1], cast[2], axis)[1]


def linear_reference(x, w, dy, recipe):
    """y, dx, dw of the float8 linear (float8.h), the GEMMs in float64 over the round-tripped operands."""
    c = RECIPES[recipe]
    f = np.float64
    y = q(x, c[0], 1).astype(f) @ q(w, c[1], 1).astype(f).T
    dx = q(dy, c[2], 1).astype(f) @ q(w, c[4], 0).astype(f)
    dw = q(dy, c[5], 0).astype(f).T @ q(x, c[3], 0).astype(f)
    return y, dx, dw


GROUPED = {  # torchao's grouped GEMMs for MoE experts: _Float8GroupedMM (rowwise), _MXFP8GroupedMM (floor / rceil)
    "rowwise": ("e4m3", "axiswise", True),
    "mxfp8": ("e4m3", "mx_floor", False),
    "mxfp8_rceil": ("e4m3", "mx_rceil", False),
}


def q_rows(a, c):
    """a's cast with scales (or MX blocks) along its rows; MX: the rows zero-padded to whole blocks of 32 first,
    as torchao pads each expert's token group to 32, and the padding dropped after."""
    if not c[1].startswith("mx") or a.shape[0] % 32 == 0:
        return q(a, c, 0)
    p = np.zeros(((a.shape[0] + 31) // 32 * 32, a.shape[1]), dtype=F32)
    p[:a.shape[0]] = a
    return q(p, c, 0)[:a.shape[0]]


def grouped_reference(x, w, dy, counts, recipe):
    """y, dx, dw of the float8 grouped linear (torchao's _Float8GroupedMM: e4m3, power-of-two rowwise scales;
    _MXFP8GroupedMM: e4m3 in 32-blocks along the same axes): x [M, K] with rows grouped by expert (counts[e]
    consecutive rows), w [E, K, N], dy [M, N]; per expert e
      y_e  = q(x_e, per row along K) @ q(w_e, per column along K)
      dx_e = q(dy_e, per row along N) @ q(w_e, per row along N)^T
      dw_e = q(x_e, per column over e's rows)^T @ q(dy_e, per column over e's rows)
    the GEMMs in float64 over the round-tripped operands."""
    c = GROUPED[recipe]
    f = np.float64
    y = np.zeros((x.shape[0], w.shape[2]))
    dx = np.zeros(x.shape)
    dw = np.zeros(w.shape)
    xq, dyq = q(x, c, 1), q(dy, c, 1)  # per token: the same whatever the groups
    off = 0
    for e, n in enumerate(counts):
        rows = slice(off, off + n)
        off += n
        if n == 0:
            continue
        y[rows] = xq[rows].astype(f) @ q(w[e], c, 0).astype(f)
        dx[rows] = dyq[rows].astype(f) @ q(w[e], c, 1).astype(f).T
        dw[e] = q_rows(x[rows], c).astype(f).T @ q_rows(dy[rows], c).astype(f)
    return y, dx, dw


def cast_inputs(rng):
    """float32 values covering each format: every code's value, the midpoints between neighbours (ties) and the
    float32 values next to them, subnormals, zeros, overflow, infinities, NaN, random magnitudes."""
    vals = []
    for fmt in FORMATS:
        t = TABLES[fmt]
        fin = np.sort(np.unique(t[np.isfinite(t)]))
        mids = (fin[1:] + fin[:-1]) / 2
        for m in mids.astype(F32):
            vals += [m, np.nextafter(m, F32(np.inf)), np.nextafter(m, F32(-np.inf))]
        vals += list(fin.astype(F32))
    vals += [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 449.0, 464.0, 465.0, 57344.0, 61440.0, 61441.0,
             1e-30, -1e-30, 2.0 ** -10, 2.0 ** -17, 3 * 2.0 ** -11, 2.0 ** -149]
    vals += list((rng.standard_normal(2000) * np.exp(rng.uniform(-20, 14, 2000))).astype(F32))
    return np.array(vals, dtype=F32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="../tests/golden/float8.h5")
    a = ap.parse_args()
    rng = np.random.default_rng(8)
    with h5py.File(a.out, "w") as f:
        v = cast_inputs(rng)
        f.create_dataset("cast/inputs", data=v)
        for fmt in FORMATS:
            f.create_dataset(f"cast/{fmt}", data=encode(v, fmt).astype(np.int64))
            f.create_dataset(f"cast/{fmt}_values", data=TABLES[fmt].astype(F32))  # each code's value (NaN: NaN)
        # scales and round trips on a [64, 96] matrix with rows of very different magnitudes, a zero row, a row
        # of float32 subnormals, one of huge values
        x = (rng.standard_normal((64, 96)) * np.exp(rng.uniform(-8, 8, (64, 1)))).astype(F32)
        x[3] = 0
        x[5] = (rng.standard_normal(96) * 1e-39).astype(F32)
        x[7] = (rng.standard_normal(96) * 1e36).astype(F32)
        f.create_dataset("scale/x", data=x)
        for fmt in FORMATS:
            for scaling in ("tensorwise", "axiswise", "mx_floor", "mx_rceil"):
                for pow2 in ((False, True) if scaling in ("tensorwise", "axiswise") else (False,)):
                    for axis in (0, 1):
                        s, r = round_trip(x, fmt, scaling, pow2, axis)
                        k = f"scale/{fmt}/{scaling}/{int(pow2)}/{axis}"
                        f.create_dataset(k + "/scales", data=s)
                        f.create_dataset(k + "/round_trip", data=r)
        # the float8 linear: x [M, K], w [N, K], dy [M, N] (multiples of 32 for MX)
        M, K, N = 64, 96, 32
        lx = rng.standard_normal((M, K)).astype(F32)
        lw = (0.1 * rng.standard_normal((N, K))).astype(F32)
        ldy = (1e-3 * rng.standard_normal((M, N))).astype(F32)
        f.create_dataset("linear/x", data=lx)
        f.create_dataset("linear/w", data=lw)
        f.create_dataset("linear/dy", data=ldy)
        for recipe in RECIPES:
            y, dx, dw = linear_reference(lx, lw, ldy, recipe)
            f.create_dataset(f"linear/{recipe}/y", data=y)
            f.create_dataset(f"linear/{recipe}/dx", data=dx)
            f.create_dataset(f"linear/{recipe}/dw", data=dw)
        # the float8 grouped linear (MoE experts, rowwise): uneven groups, an empty one, an expert of large values,
        # one of tiny weights. A power-of-two scale changes an FP8 rounding only where it makes a value subnormal,
        # so each contraction index gets magnitudes spanning e^12 (> 2^15, e4m3's normal range) in one operand and
        # the inverse in the other: their products stay alike, and a scale taken along the wrong axis (or over the
        # wrong rows) flushes terms that matter
        M, K, N, counts = 64, 64, 32, [20, 0, 33, 11]  # K, N whole MX blocks; the groups not
        mk, mn, mt = (np.exp(rng.uniform(-6, 6, n)) for n in (K, N, M))  # per k, per n, per token
        gx = (rng.standard_normal((M, K)) * mk[None, :] * mt[:, None]).astype(F32)
        gx[20:53] *= F32(300.0)
        gw = (0.1 * rng.standard_normal((len(counts), K, N)) / mk[None, :, None] / mn[None, None, :]).astype(F32)
        gw[3] *= F32(1e-3)
        gdy = (1e-3 * rng.standard_normal((M, N)) * mn[None, :] / mt[:, None]).astype(F32)
        for name, arr in (("x", gx), ("w", gw), ("dy", gdy), ("counts", np.array(counts, dtype=np.int64))):
            f.create_dataset(f"grouped/{name}", data=arr)
        for recipe in GROUPED:
            for name, arr in zip(("y", "dx", "dw"), grouped_reference(gx, gw, gdy, counts, recipe)):
                f.create_dataset(f"grouped/{recipe}/{name}", data=arr)
    print(f"wrote {a.out}: {len(v)} cast inputs x 2 formats, 24 scale cases, {len(RECIPES)} linear recipes, the grouped linear")


if __name__ == "__main__":
    main()
