#!/usr/bin/python3
"""Writer-side encoders for the quantized checkpoint formats of
shared/docs/quant-formats.md: GPTQ (section 1), AWQ GEMM (section 2), AMD
Quark MXFP4 / FP8 (section 3-4).

Only tools/gptoss_ckpt.py uses this module.  The reference
(tools/gptoss_ref.py) must NOT import it: its decoders are written separately
from the doc, so a misreading here shows up as a writer/reference mismatch
instead of being silently shared.  For the same reason the algorithms differ
on purpose where both sides need the same operation (e.g. the e4m3 rounding
here works on frexp/rint, the reference's on a sorted value table; the GPTQ
packer expands bit planes, the reference's unpacker shifts word pairs).

Every quantizer takes a weight in nn.Linear orientation W [N, K] (N = out,
K = in) as float64 and returns numpy arrays ready for write_safetensors.

Needs only numpy (run with /usr/bin/python3).
"""

import numpy as np

# ---------------------------------------------------------------------------
# bit packing


def pack_bitstream(q, bits, axis):
    """Pack unsigned codes q (ints in [0, 2^bits)) along `axis` into int32
    words as one little-endian bitstream (doc 1.2): value j occupies stream
    bits [bits*j, bits*j + bits), stream bit b is bit b%32 of word b//32.  So
    4/2/8-bit values never straddle words, and 3-bit values 10 and 21 of every
    32 do.  The count along `axis` times bits must be a multiple of 32."""
    q = np.moveaxis(np.asarray(q, dtype=np.uint64), axis, 0)
    n, rest = q.shape[0], q.shape[1:]
    if (n * bits) % 32:
        raise ValueError(f"{n} values of {bits} bits do not fill whole int32 words")
    if np.any(q >> np.uint64(bits)):
        raise ValueError(f"code out of range for {bits} bits")
    shifts = np.arange(bits, dtype=np.uint64).reshape((1, bits) + (1,) * len(rest))
    planes = (q[:, None] >> shifts) & np.uint64(1)          # [n, bits, ...] bit b of value j
    stream = planes.reshape((n * bits // 32, 32) + rest)     # consecutive stream bits, 32 per word
    weight = (np.uint64(1) << np.arange(32, dtype=np.uint64)).reshape((1, 32) + (1,) * len(rest))
    words = (stream * weight).sum(axis=1).astype(np.uint32).view(np.int32)
    return np.moveaxis(words, 0, axis)


# AutoAWQ GEMM: nibble i of a word holds logical column 8c + AWQ_PACK_ORDER[i]
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def pack_awq(q):
    """q [R, C] codes 0..15 -> int32 [R, C/8], packed along the last axis in
    AutoAWQ's interleaved nibble order (doc 2.2)."""
    q = np.asarray(q, dtype=np.uint32)
    r, c = q.shape
    if c % 8:
        raise ValueError(f"AWQ packs 8 columns per word; {c} columns")
    if np.any(q > 15):
        raise ValueError("AWQ code out of range")
    g = q.reshape(r, c // 8, 8)
    words = np.zeros((r, c // 8), dtype=np.uint32)
    for i, col in enumerate(AWQ_PACK_ORDER):
        words |= g[:, :, col] << np.uint32(4 * i)
    return words.view(np.int32)


# ---------------------------------------------------------------------------
# GPTQ (doc 1.2)


def group_range(g, sym):
    """(xmin, xmax) of each group (the last axis of g) as GPTQ's quantizer
    (AutoGPTQ / GPTQModel find_params) takes them: widened to include 0,
    made symmetric when sym, and (-1, 1) for an all-zero group."""
    xmin = np.minimum(g.min(axis=-1), 0.0)
    xmax = np.maximum(g.max(axis=-1), 0.0)
    if sym:
        xmax = np.maximum(np.abs(xmin), xmax)
        xmin = np.where(xmin < 0, -xmax, xmin)
    both0 = (xmin == 0) & (xmax == 0)
    return np.where(both0, -1.0, xmin), np.where(both0, 1.0, xmax)


def gptq_quantize(w, bits, group_size, sym, desc_act, static_groups, fmt, rng):
    """Round-to-nearest GPTQ of w [N, K] -> dict(qweight, qzeros, scales,
    g_idx, raised) with the producers' tensor layouts.

    Scale/zero follow GPTQModel's Quantizer.find_params per output row and
    group; the scale is stored as float16 and the codes are computed with that
    rounded scale, so dequantization reproduces the intended grid.  fmt "gptq"
    (v1) stores zero-1 and cannot hold a zero of 0: such zeros are raised to 1
    first (`raised` counts them).  With desc_act and no static groups the
    groups are formed over columns permuted by a random "Hessian diagonal"
    (descending), giving a non-monotone g_idx; qweight rows stay in natural K
    order."""
    w = np.asarray(w, dtype=np.float64)
    n, k = w.shape
    maxq = (1 << bits) - 1
    gs = k if group_size == -1 else group_size
    groups = -(-k // gs)
    if desc_act and not static_groups:
        hdiag = rng.uniform(0.05, 1.0, k)
        perm = np.argsort(-hdiag, kind="stable")
        g_idx = np.empty(k, dtype=np.int64)
        g_idx[perm] = np.arange(k) // gs
    else:
        # also desc_act + static_groups: groups were fixed on natural columns
        g_idx = np.arange(k) // gs
    q = np.empty((k, n), dtype=np.int64)
    scales = np.empty((groups, n), dtype=np.float16)
    zeros = np.empty((groups, n), dtype=np.int64)
    raised = 0
    for g in range(groups):
        cols = np.nonzero(g_idx == g)[0]
        wg = w[:, cols]
        xmin, xmax = group_range(wg, sym)
        scale = (xmax - xmin) / maxq
        if sym:
            zero = np.full(n, (maxq + 1) // 2, dtype=np.int64)
        else:
            zero = np.round(-xmin / scale).astype(np.int64)   # np.round: half to even, like torch
        if fmt == "gptq":
            raised += int(np.count_nonzero(zero == 0))
            zero = np.maximum(zero, 1)
        s16 = scale.astype(np.float16)
        if np.any(s16 <= 0) or not np.all(np.isfinite(s16)):
            raise ValueError("GPTQ scale not representable in float16")
        s = s16.astype(np.float64)
        codes = np.clip(np.round(wg / s[:, None] + zero[:, None]), 0, maxq).astype(np.int64)
        q[cols, :] = codes.T
        scales[g] = s16
        zeros[g] = zero
    stored = zeros - 1 if fmt == "gptq" else zeros
    return dict(qweight=pack_bitstream(q, bits, axis=0),
                qzeros=pack_bitstream(stored, bits, axis=1),
                scales=scales, g_idx=g_idx.astype(np.int32), raised=raised)


# ---------------------------------------------------------------------------
# AWQ GEMM (doc 2.2)


def awq_quantize(w, group_size, zero_point):
    """AutoAWQ round-to-nearest of w [N, K] -> dict(qweight [K, N/8],
    qzeros [K/gs, N/8], scales [K/gs, N] f16).

    zero_point: scale = max(max-min, 1e-5)/15, zero = clamp(-round(min/s), 0,
    15), q = clamp(round(w/s) + zero, 0, 15).  Without zero point: symmetric
    scale amax/7 and codes round(w/s) in [-8, 7], stored offset by 8 with
    qzeros all 8 (GPTQModel's AWQ export; AutoAWQ-GEMM always carries qzeros).
    Both use the float16-rounded scale, the one a loader will read."""
    w = np.asarray(w, dtype=np.float64)
    n, k = w.shape
    if k % group_size or n % 8:
        raise ValueError(f"AWQ needs in % group_size == 0 and out % 8 == 0 (got [{n}, {k}], gs {group_size})")
    wg = w.reshape(n, k // group_size, group_size)
    if zero_point:
        mx, mn = wg.max(axis=-1), wg.min(axis=-1)
        s = (np.maximum(mx - mn, 1e-5) / 15).astype(np.float16).astype(np.float64)
        zero = np.clip(-np.round(mn / s), 0, 15)
        q = np.clip(np.round(wg / s[..., None]) + zero[..., None], 0, 15)
    else:
        amax = np.maximum(np.abs(wg).max(axis=-1), 1e-5)
        s = (amax / 7).astype(np.float16).astype(np.float64)
        zero = np.full(s.shape, 8.0)
        q = np.clip(np.round(wg / s[..., None]), -8, 7) + 8
    q = q.reshape(n, k).astype(np.int64)
    return dict(qweight=pack_awq(q.T), qzeros=pack_awq(zero.T.astype(np.int64)),
                scales=s.T.astype(np.float16))


# ---------------------------------------------------------------------------
# MXFP4 for Quark (doc 3.3): uint8 [N, K/2] (low nibble = even element),
# e8m0 scales uint8 [N, K/32]

_E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_E2M1_MID = (_E2M1_GRID[:-1] + _E2M1_GRID[1:]) / 2    # 0.25 0.75 1.25 1.75 2.5 3.5 5


def e2m1_codes(x):
    """float64 -> 4-bit e2m1 codes (bit 3 = sign): nearest grid magnitude,
    saturating at 6; an exact midpoint goes to the even code (mantissa bit 0).
    Negative values that round to zero get code 8 (-0)."""
    a = np.abs(x)
    code = np.searchsorted(_E2M1_MID, a, side="left")     # midpoint itself -> lower code
    at_mid = (code < 7) & (a == _E2M1_MID[np.minimum(code, 6)])
    code = np.where(at_mid & (code % 2 == 1), code + 1, code)
    return (code | np.where(x < 0, 8, 0)).astype(np.uint8)


def quark_fp4_quantize(w):
    """w [N, K] (K % 32 == 0) -> (weight u8 [N, K/2], weight_scale u8 [N, K/32]).

    OCP "floor" scale: e = floor(log2(amax)) - 2 (emax of e2m1), clamped to
    [-127, 127]; an all-zero group gets e = 0 (byte 127); 255 is never
    written.  Elements round to nearest even on the e2m1 grid, saturating at
    +-6 (amax/2^e lies in [4, 8), so the largest ones may saturate)."""
    w = np.asarray(w, dtype=np.float64)
    n, k = w.shape
    if k % 32:
        raise ValueError(f"MXFP4 needs in_features % 32 == 0 (got {k})")
    g = w.reshape(n, k // 32, 32)
    amax = np.abs(g).max(axis=-1)
    _, ex = np.frexp(amax)                 # amax = m * 2^ex, m in [0.5, 1): floor(log2) = ex - 1
    e = np.where(amax > 0, ex - 1 - 2, 0)
    e = np.clip(e, -127, 127)
    codes = e2m1_codes(g / np.ldexp(1.0, e)[..., None]).reshape(n, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.astype(np.uint8), (e + 127).astype(np.uint8)


# ---------------------------------------------------------------------------
# FP8 E4M3FN (doc 4)


def e4m3_codes(x):
    """float64 -> e4m3fn bytes, round to nearest even, saturating at 448.

    The value is rounded to an integer multiple of its quantum (2^(e-3) for a
    normal binade 2^e, 2^-9 for subnormals); rint's ties-to-even on that
    integer is ties-to-even on the mantissa.  Then the bits are assembled."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    _, ex = np.frexp(a)
    qexp = np.where(ex - 1 >= -6, ex - 1 - 3, -9)
    v = np.ldexp(np.rint(np.ldexp(a, -qexp)), qexp)       # rounded magnitude
    normal = v >= 2.0 ** -6
    m, ev = np.frexp(v)                                   # v = m * 2^ev, m in [0.5, 1)
    e_field = np.where(normal, ev - 1 + 7, 0)
    m_field = np.where(normal, np.rint((2 * m - 1) * 8), np.rint(np.ldexp(v, 9)))
    code = (e_field.astype(np.int64) << 3) | m_field.astype(np.int64)
    if np.any(code > 0x7E):
        raise AssertionError("e4m3 encoder produced a NaN code")
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def quark_fp8_quantize(w, per_channel):
    """w [N, K] -> (weight e4m3 bytes [N, K], weight_scale float32 [] or [N]).

    scale = amax/448 (float32), per tensor or per output row; codes are the
    RNE e4m3 of w / scale with the float32 scale."""
    w = np.asarray(w, dtype=np.float64)
    amax = np.abs(w).max(axis=1) if per_channel else np.abs(w).max()
    scale = np.asarray(np.where(amax > 0, amax / 448.0, 1.0), dtype=np.float32)
    s = scale.astype(np.float64)
    codes = e4m3_codes(w / (s[:, None] if per_channel else s))
    return codes, scale


# ---------------------------------------------------------------------------
# Quark tensor specs (doc 3.1)

QUARK_FP4_WEIGHT = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "ch_axis": -1,
                    "is_dynamic": False, "scale_format": "e8m0", "scale_type": "float",
                    # the writer uses the plain OCP rule floor(log2(amax)) - 2
                    "scale_calculation_mode": "floor", "round_method": "half_even",
                    "symmetric": None, "mx_element_dtype": None,
                    "observer_cls": "PerBlockMXObserver"}
QUARK_FP8_INPUT_STATIC = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "ch_axis": None,
                          "group_size": None, "is_dynamic": False, "symmetric": True,
                          "round_method": "half_even", "scale_type": "float",
                          "observer_cls": "PerTensorMinMaxObserver"}
QUARK_FP8_INPUT_DYNAMIC = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": True}
QUARK_FP4_INPUT_DYNAMIC = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                           "is_dynamic": True, "scale_format": "e8m0"}


def quark_fp8_weight(per_channel):
    return {"dtype": "fp8_e4m3", "qscheme": "per_channel" if per_channel else "per_tensor",
            "ch_axis": 0 if per_channel else None, "group_size": None, "is_dynamic": False,
            "symmetric": True, "round_method": "half_even", "scale_type": "float",
            "observer_cls": "PerChannelMinMaxObserver" if per_channel else "PerTensorMinMaxObserver"}


def quark_layer_spec(weight, inp):
    return {"weight": weight, "input_tensors": inp, "output_tensors": None, "bias": None}


QUARK_EXPORT = {"kv_cache_group": [], "min_kv_scale": 0.0, "pack_method": "reorder",
                "weight_format": "real_quantized", "weight_merge_groups": None}
