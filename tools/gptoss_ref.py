#!/usr/bin/python3
"""Independent float64 numpy reference of the GPT-OSS forward pass.

This is the ground truth the C daemon is checked against: it is written from
shared/docs/gpt-oss.md section 2 (model math) and 3 (checkpoint layouts), shares
no code with the C implementation or with the checkpoint generator, and
computes everything in float64 after decoding the stored weights exactly, so
any disagreement beyond fp32 rounding points at the C side.

Quantized checkpoints (issue 3; shared/docs/quant-formats.md): GPTQ v1/v2
(2/3/4/8 bit, g_idx), AWQ GEMM, AMD Quark (MXFP4 / FP8 weights, FP8 static or
dynamic and MXFP4 dynamic activations) and the unquantized llm-compressor
expert layout.  The format comes from config.json quantization_config (or a
standalone quantize_config.json / quant_config.json), the expert naming
family from the tensor names.  Weights are dequantized in float32 exactly as
the C code does (those products must match bit for bit), activations are
quantized at the input of each module whose spec asks for it, everything
else runs in float64.  The decoders here are written from the doc, apart
from the checkpoint writer's encoders (tools/quantfmt.py), so each checks
the other.

CLI (same contract as `moeserve generate` / `moeserve dequant`, so it can
stand in for the binary):

    /usr/bin/python3 tools/gptoss_ref.py [generate] --model DIR --tokens 1,2,3
        [--max-tokens N] [--logits-out FILE] [--threads N] [--ignore-eos]
    /usr/bin/python3 tools/gptoss_ref.py dequant --model DIR --module NAME --out FILE
    /usr/bin/python3 tools/gptoss_ref.py --self-test

Greedy decoding (argmax, ties -> lowest id) by full recompute at every step;
the generated ids are printed space-separated as the last line of stdout;
--logits-out writes the logits of every prompt position as little-endian
float32 [prompt_tokens x vocab].  --threads and --ignore-eos are accepted and
ignored (the reference never stops early).  `dequant` writes one module's
weight as little-endian float32 [rows x cols] and prints "rows cols" last;
module names: a dense prefix (model.layers.0.self_attn.q_proj, lm_head,
model.layers.0.mlp.router, model.embed_tokens) or a virtual expert
model.layers.L.mlp.experts.E.gate_up ([2I, H], rows interleaved: 2j = gate j,
2j+1 = up j) / model.layers.L.mlp.experts.E.down ([H, I]).

Needs only numpy (run with /usr/bin/python3).
"""

import argparse
import fnmatch
import json
import math
import os
import re
import sys

import numpy as np

# ---------------------------------------------------------------------------
# safetensors reading

# itemsize of each safetensors dtype we can decode
_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "U8": 1, "I8": 1,
             "I16": 2, "I32": 4, "I64": 8, "F8_E4M3": 1}
_NUMPY = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "U8": "u1", "I8": "i1",
          "I16": "<i2", "I32": "<i4", "I64": "<i8"}


class SafetensorsError(Exception):
    pass


class SafetensorsFile:
    """One .safetensors file, memory-mapped; tensors are decoded on demand."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        if size < 8:
            raise SafetensorsError(f"{path}: {size} bytes, too short for a header")
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n > size - 8:
                raise SafetensorsError(f"{path}: header length {n} exceeds file size {size}")
            try:
                header = json.loads(f.read(n).decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise SafetensorsError(f"{path}: bad JSON header: {e}") from None
        self.metadata = header.pop("__metadata__", None)
        self.data_start = 8 + n
        data_len = size - self.data_start
        self.entries = {}
        for name, info in header.items():
            dt, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
            if dt not in _ITEMSIZE:
                raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dt!r}")
            if (not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape)
                    or not isinstance(offs, list) or len(offs) != 2):
                raise SafetensorsError(f"{path}: tensor {name}: malformed entry {info}")
            b, e = offs
            want = int(np.prod(shape, dtype=np.int64)) * _ITEMSIZE[dt]
            if not (0 <= b <= e <= data_len) or e - b != want:
                raise SafetensorsError(
                    f"{path}: tensor {name}: offsets {offs} do not hold {shape} {dt} "
                    f"within {data_len} data bytes")
            self.entries[name] = (dt, tuple(shape), b, e)
        self._map = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else None

    def raw(self, name):
        dt, shape, b, e = self.entries[name]
        return dt, shape, self._map[self.data_start + b:self.data_start + e]


def decode(dt, shape, buf):
    """Bytes -> numpy array: floats exactly widened to float64, ints kept."""
    buf = np.ascontiguousarray(buf)
    if dt == "F8_E4M3":
        # kept as raw e4m3fn codes; decode_e4m3 turns them into values
        return buf.view(np.uint8).reshape(shape).copy()
    if dt == "BF16":
        # bf16 is the upper half of an IEEE float32
        bits = buf.view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(shape)
    arr = buf.view(_NUMPY[dt]).reshape(shape)
    if dt.startswith("F"):
        return arr.astype(np.float64)
    return arr.copy()


class Checkpoint:
    """All tensors of a model directory: model.safetensors, or the shards listed
    in model.safetensors.index.json (shard file names come only from its
    weight_map, as the real hub repos number them unpredictably)."""

    def __init__(self, model_dir):
        single = os.path.join(model_dir, "model.safetensors")
        index = os.path.join(model_dir, "model.safetensors.index.json")
        self.where = {}
        if os.path.exists(single):
            f = SafetensorsFile(single)
            self.where = {name: f for name in f.entries}
        elif os.path.exists(index):
            with open(index) as fh:
                weight_map = json.load(fh).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise SafetensorsError(f"{index}: no weight_map")
            files = {}
            for name, fname in weight_map.items():
                if fname not in files:
                    files[fname] = SafetensorsFile(os.path.join(model_dir, fname))
                if name not in files[fname].entries:
                    raise SafetensorsError(f"{index}: {name} is mapped to {fname}, which lacks it")
                self.where[name] = files[fname]
        else:
            raise SafetensorsError(f"{model_dir}: neither model.safetensors nor "
                                   "model.safetensors.index.json")

    def __contains__(self, name):
        return name in self.where

    def names(self):
        return self.where.keys()

    def dtype(self, name):
        return self.where[name].entries[name][0]

    def get(self, name, shape=None):
        if name not in self.where:
            raise SafetensorsError(f"missing tensor {name}")
        arr = decode(*self.where[name].raw(name))
        if shape is not None and arr.shape != tuple(shape):
            raise SafetensorsError(f"tensor {name}: shape {list(arr.shape)}, expected {list(shape)}")
        return arr


class ArrayCheckpoint:
    """In-memory float64 tensors with the Checkpoint interface: lets the
    checkpoint writer run the float model (calibration of static activation
    scales) without writing it first."""

    def __init__(self, tensors):
        self.tensors = {k: np.asarray(v, dtype=np.float64) for k, v in tensors.items()}

    def __contains__(self, name):
        return name in self.tensors

    def names(self):
        return self.tensors.keys()

    def dtype(self, name):
        return "F64"

    def get(self, name, shape=None):
        if name not in self.tensors:
            raise SafetensorsError(f"missing tensor {name}")
        arr = self.tensors[name]
        if shape is not None and arr.shape != tuple(shape):
            raise SafetensorsError(f"tensor {name}: shape {list(arr.shape)}, expected {list(shape)}")
        return arr


# ---------------------------------------------------------------------------
# MXFP4 (doc 3.2)

# e2m1 value of each nibble; bit 3 is the sign, so index 8 is -0.0
FP4_LUT = np.array([+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
                    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


def dequant_mxfp4(blocks, scales, k):
    """blocks [..., G, 16] u8 + scales [..., G] u8 -> [..., k] float64.

    Element 32g+2j is the low nibble of byte j of block g, 32g+2j+1 the high
    nibble; a group is worth lut * 2^(scale-127).  Groups beyond k (a last,
    zero-padded group when k % 32 != 0) are dropped."""
    if blocks.shape[-1] != 16 or blocks.shape[:-1] != scales.shape:
        raise SafetensorsError(f"mxfp4 blocks {list(blocks.shape)} / scales {list(scales.shape)} mismatch")
    g = blocks.shape[-2]
    if g != -(-k // 32):
        raise SafetensorsError(f"mxfp4: {g} groups of 32 cannot hold exactly {k} elements")
    vals = np.empty(blocks.shape[:-1] + (32,), dtype=np.float64)
    vals[..., 0::2] = FP4_LUT[blocks & 0x0F]
    vals[..., 1::2] = FP4_LUT[blocks >> 4]
    vals *= np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    return vals.reshape(blocks.shape[:-2] + (g * 32,))[..., :k]


# ---------------------------------------------------------------------------
# quantized-format decoders (shared/docs/quant-formats.md), written from the
# doc and kept apart from tools/quantfmt.py (the writer's encoders)

FP4_LUT32 = FP4_LUT.astype(np.float32)


def _e4m3_table():
    """Value of every e4m3fn byte (doc 4): S EEEE MMM, bias 7; E = 0 is
    subnormal M * 2^-9; 0x7F / 0xFF are NaN; no infinities."""
    vals = np.empty(256, dtype=np.float64)
    for c in range(256):
        e, m = (c >> 3) & 0xF, c & 7
        if e == 15 and m == 7:
            v = math.nan
        elif e == 0:
            v = m * 2.0 ** -9
        else:
            v = (1 + m / 8) * 2.0 ** (e - 7)
        vals[c] = -v if c & 0x80 else v
    return vals


E4M3_VALUES = _e4m3_table()
E4M3_F32 = E4M3_VALUES.astype(np.float32)
# codes 0x00..0x7E are the 127 non-negative finite values, ascending
_E4M3_POS = E4M3_VALUES[:0x7F]
_E4M3_MID = (_E4M3_POS[:-1] + _E4M3_POS[1:]) / 2


def e4m3_rne(x):
    """Round float64 x to the nearest e4m3fn value (returned as float64),
    ties to the even code (mantissa LSB 0).  Magnitudes past 448 give 448 --
    callers clamp first anyway, as every activation quantizer does (doc 4:
    a bare cast would turn |x| >= 464 into NaN)."""
    a = np.abs(x)
    # i = number of midpoints below a: a lies in (mid[i-1], mid[i]], so code i
    # is nearest unless a sits exactly on mid[i], a tie between codes i, i+1
    i = np.searchsorted(_E4M3_MID, a, side="left")
    tie = (i < len(_E4M3_MID)) & (a == _E4M3_MID[np.minimum(i, len(_E4M3_MID) - 1)])
    i = np.where(tie & (i % 2 == 1), i + 1, i)
    return np.copysign(_E4M3_POS[i], x)


def e2m1_rne(x):
    """Round float64 x to the nearest e2m1 value (+-{0, .5, 1, 1.5, 2, 3, 4,
    6}), saturating at 6, ties to the even code.  The grid has step 0.5 on
    [0, 2], 1 on [2, 4] and 2 on [4, 6], and inside each span the even codes
    are exactly the even multiples of the step, so rint (ties to even) on
    a/step is ties-to-even-code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
    3.5->4, 5->4."""
    a = np.abs(x)
    r = np.where(a < 2, np.rint(a * 2) / 2, np.where(a < 4, np.rint(a), np.rint(a / 2) * 2))
    return np.copysign(np.minimum(r, 6.0), x)


def unpack_bitstream(words, bits, count):
    """GPTQ packing (doc 1.2): int32 words [W, C] hold, per column, one
    little-endian bitstream along axis 0; value j starts at stream bit
    o = bits*j, i.e. bit o%32 of word o//32, and when o%32 + bits > 32 (3-bit
    values 10 and 21 of every 32) its high bits continue at bit 0 of the next
    word.  -> unsigned values [count, C] (int64).  Words are read as uint32:
    an arithmetic shift of int32 would smear the sign bit (doc 7.5)."""
    u = np.ascontiguousarray(words).view(np.uint32).astype(np.uint64)
    if count * bits > u.shape[0] * 32:
        raise SafetensorsError(f"{u.shape[0]} words cannot hold {count} {bits}-bit values")
    off = np.arange(count, dtype=np.uint64) * np.uint64(bits)
    w0 = (off // np.uint64(32)).astype(np.int64)
    sh = (off % np.uint64(32))[:, None]
    w1 = np.minimum(w0 + 1, u.shape[0] - 1)
    # low word shifted down, next word shifted up past the low word's part
    pair = (u[w0] >> sh) | (u[w1] << (np.uint64(32) - sh))
    straddles = (sh + np.uint64(bits)) > np.uint64(32)
    val = np.where(straddles, pair, u[w0] >> sh) & np.uint64((1 << bits) - 1)
    return val.astype(np.int64)


# AWQ GEMM (doc 2.2): logical column 8c + j lives in nibble AWQ_NIBBLE_OF[j]
AWQ_NIBBLE_OF = (0, 4, 1, 5, 2, 6, 3, 7)


def unpack_awq(words):
    """AWQ words [R, C/8] -> codes [R, C] (int64), unsigned nibble extract."""
    u = np.ascontiguousarray(words).view(np.uint32)
    r, c8 = u.shape
    out = np.empty((r, c8, 8), dtype=np.int64)
    for j, nib in enumerate(AWQ_NIBBLE_OF):
        out[:, :, j] = (u >> np.uint32(4 * nib)) & np.uint32(0xF)
    return out.reshape(r, c8 * 8)


def dequant_intq(q, z, scales, group_of_k):
    """W[n, k] = f32(scale[g(k), n]) * f32(q[k, n] - z[g(k), n]) as float32
    [N, K] -- the exact float32 product the C code computes.  q [K, N] and z
    [G, N] are integers, scales [G, N] floats (float16 in the file)."""
    s32 = scales.astype(np.float32)[group_of_k]
    d32 = (q - z[group_of_k]).astype(np.float32)
    return np.ascontiguousarray((s32 * d32).T)


def dequant_fp4_rows(packed, scale_bytes, k):
    """Quark MXFP4 (doc 3.3): packed u8 [N, K/2] (low nibble = even element),
    e8m0 scales u8 [N, K/32] -> float32 [N, K] = e2m1[code] * 2^(b-127)."""
    n = packed.shape[0]
    if np.any(scale_bytes == 255):
        raise SafetensorsError("MXFP4 scale byte 255 (NaN)")
    codes = np.empty((n, k), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    # powers of two 2^-127 .. 2^127 are exact in float32 (2^-127 subnormal)
    pw = np.exp2(scale_bytes.astype(np.float64) - 127).astype(np.float32)
    return FP4_LUT32[codes] * np.repeat(pw, 32, axis=1)


def dequant_fp8_rows(codes, scale):
    """FP8 e4m3fn bytes [N, K] times a float32 weight_scale (scalar, or one
    per row) -> float32 [N, K], one float32 multiply per element."""
    if np.any((codes & 0x7F) == 0x7F):
        raise SafetensorsError("FP8 weight holds a NaN code (0x7F/0xFF)")
    s = np.asarray(scale, dtype=np.float32)
    return E4M3_F32[codes] * (s[:, None] if s.ndim == 1 else s)


_FP4_POS = FP4_LUT[:8]      # e2m1 magnitudes, ascending


def near_ties(r, v, grid, window, min_step=0.0):
    """Rounding ties an fp32 implementation may break the other way.  r: the
    scaled values, v: r rounded on the ascending magnitude `grid`.  Returns
    (mask, alt): elements whose distance to the midpoint between v and the
    grid neighbour on r's side is <= window (absolute, broadcastable) and
    whose step to that neighbour is >= min_step (absolute, broadcastable),
    and that neighbour (signed).  Exact ties are decided by float64 here but by
    the last bits of a float32 x/s (or x*(1/s), doc 4) in C."""
    a, va = np.abs(r), np.abs(v)
    i = np.searchsorted(grid, va)
    n = len(grid)
    alt = np.where(a > va, grid[np.minimum(i + 1, n - 1)], grid[np.maximum(i - 1, 0)])
    mask = (alt != va) & (np.abs(a - (va + alt) / 2) <= window) & (np.abs(alt - va) >= min_step)
    return mask, np.copysign(alt, r)


class TieProbe:
    """Finds activation roundings within window * (row max of |x/s|) of a
    rounding tie whose step to the other side is at least min_step * (row
    max); with flip=True they are rounded to the other side instead, which
    shows how much the result depends on how such ties break.  count: near
    ties seen; rows: per-row mask of the last call."""

    def __init__(self, window, flip=False, min_step=0.0):
        self.window, self.flip, self.min_step = window, flip, min_step
        self.count = 0
        self.rows = None

    def record(self, mask):
        self.count += int(np.count_nonzero(mask))
        self.rows = mask.reshape(mask.shape[0], -1).any(axis=1)


def mxfp4_quant_act(x, probe=None):
    """W4A4 dynamic activation quantization (our chosen semantics), per 32
    elements along K of each token (row): amax = max|x| of the group as
    float32; its bits + 0x200000 (rounds the mantissa at 1.75 up into the
    exponent), masked to the exponent field, give 2^E; e = E - 2 (emax of
    e2m1) clamped to [-127, 127]; x' = e2m1_rne(x / 2^e) * 2^e, saturating at
    +-6 * 2^e; an all-zero group stays zero.  Returns x' (float64)."""
    t, k = x.shape
    g = x.reshape(t, k // 32, 32)
    amax = np.abs(g).max(axis=-1).astype(np.float32)
    bits = amax.view(np.uint32).astype(np.int64)
    biased = ((bits + 0x200000) & 0x7F800000) >> 23
    e = np.clip(biased - 127 - 2, -127, 127)
    scale = np.exp2(e.astype(np.float64))[..., None]
    r = g / scale
    q = e2m1_rne(r)
    if probe is not None:
        # window relative to the row's max |x|, in each group's scaled units
        rowmax = np.abs(x).max(axis=-1)[:, None, None] / scale
        mask, alt = near_ties(r, q, _FP4_POS, probe.window * rowmax, probe.min_step * rowmax)
        probe.record(mask)
        if probe.flip:
            q = np.where(mask, alt, q)
    return np.where(amax[..., None] > 0, q * scale, 0.0).reshape(t, k)


class ActQuant:
    """Activation quantization at the input of one module; apply(x) returns
    (xq, post) with y = (xq @ W^T) * post + bias.
      fp8_static   q = e4m3_rne(clip(x / s, +-448)), post = s (the module's
                   own input_scale; each expert has its own)
      fp8_dynamic  per token (row): s_t = amax|x_t| / 448 (1 when amax is 0).
                   Our chosen semantics for Quark's dynamic "per_tensor":
                   per row, so a request's result does not depend on what
                   else is in its batch
      mxfp4_dynamic  W4A4: mxfp4_quant_act per 32-group of each row, post 1"""

    def __init__(self, kind, scale=None):
        self.kind = kind
        self.scale = scale

    def __eq__(self, other):
        return isinstance(other, ActQuant) and (self.kind, self.scale) == (other.kind, other.scale)

    def __repr__(self):
        return f"ActQuant({self.kind}{'' if self.scale is None else f', {self.scale!r}'})"

    def apply(self, x, probe=None):
        """probe: optional TieProbe (test support; None = plain semantics)."""
        if self.kind == "mxfp4_dynamic":
            return mxfp4_quant_act(x, probe), 1.0
        if self.kind == "fp8_static":
            s = self.scale
        elif self.kind == "fp8_dynamic":
            amax = np.max(np.abs(x), axis=-1, keepdims=True)
            s = np.where(amax > 0, amax / 448.0, 1.0)
        else:
            raise ValueError(f"unknown activation quantization {self.kind}")
        r = np.clip(x / s, -448.0, 448.0)
        q = e4m3_rne(r)
        if probe is not None:
            rowmax = np.abs(r).max(axis=-1, keepdims=True)
            mask, alt = near_ties(r, q, _E4M3_POS, probe.window * rowmax, probe.min_step * rowmax)
            probe.record(mask)
            if probe.flip:
                q = np.where(mask, alt, q)
        return q, s


# ---------------------------------------------------------------------------
# configuration (doc 1.1)

class Config:
    def __init__(self, c):
        def need(key):
            if key not in c:
                raise ValueError(f"config.json: missing {key}")
            return c[key]

        self.hidden = int(need("hidden_size"))
        self.n_layers = int(need("num_hidden_layers"))
        self.n_heads = int(need("num_attention_heads"))
        self.n_kv = int(c.get("num_key_value_heads", self.n_heads))
        self.head_dim = int(c["head_dim"]) if c.get("head_dim") is not None else self.hidden // self.n_heads
        self.inter = int(need("intermediate_size"))
        self.n_experts = int(c.get("num_local_experts", c.get("num_experts", 0)))
        k = c.get("num_experts_per_tok", c.get("experts_per_token"))
        if k is None:
            raise ValueError("config.json: missing num_experts_per_tok")
        self.top_k = int(k)
        self.vocab = int(need("vocab_size"))
        self.eps = float(c.get("rms_norm_eps", 1e-5))
        self.window = c.get("sliding_window")
        self.limit = float(c.get("swiglu_limit", 7.0))
        # the modeling code hard-codes alpha; a config's swiglu_alpha is not read there
        self.alpha = 1.702
        self.tie = bool(c.get("tie_word_embeddings", False))
        self.max_pos = int(c.get("max_position_embeddings", 131072))

        lt = c.get("layer_types")
        if lt is None:
            lt = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(self.n_layers)]
        if len(lt) != self.n_layers or any(t not in ("sliding_attention", "full_attention") for t in lt):
            raise ValueError(f"config.json: bad layer_types {lt}")
        self.sliding = [t == "sliding_attention" for t in lt]
        if any(self.sliding) and (self.window is None or int(self.window) < 1):
            raise ValueError("config.json: sliding layers but no sliding_window")

        if self.n_heads % self.n_kv or self.head_dim % 2 or not (1 <= self.top_k <= self.n_experts):
            raise ValueError("config.json: inconsistent head / expert counts")

        # v5 keeps everything (rope_theta too) in rope_parameters; v4 splits it
        rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
        self.rope_theta = float(rp.get("rope_theta", c.get("rope_theta", 150000.0)))
        self.rope_type = rp.get("rope_type", rp.get("type", "default"))
        if self.rope_type == "yarn":
            l0 = rp.get("original_max_position_embeddings") or self.max_pos
            factor = rp.get("factor")
            if factor is None:
                factor = self.max_pos / l0
            self.rope = dict(factor=float(factor), l0=float(l0),
                             beta_fast=float(rp.get("beta_fast", 32.0)),
                             beta_slow=float(rp.get("beta_slow", 1.0)),
                             truncate=bool(rp.get("truncate", True)),
                             attention_factor=rp.get("attention_factor"))
        elif self.rope_type != "default":
            raise ValueError(f"config.json: rope_type {self.rope_type!r} not supported")


# ---------------------------------------------------------------------------
# quantization config (doc 1.1, 2.1, 3.1)

class QuantConfig:
    """What quantization_config says, normalized.  method: None, "mxfp4",
    "gptq", "awq" or "quark".  Which Linear is quantized is read from the
    tensors present (GPTQ/AWQ: a .qweight; Quark: the .weight dtype), and for
    Quark checked against the spec the config resolves for that module."""

    def __init__(self, method=None, source=None, raw=None):
        self.method = method
        self.source = source
        self.raw = raw or {}

    @classmethod
    def load(cls, model_dir, cfg):
        q, source, default = cfg.get("quantization_config"), "config.json", None
        if q is None and model_dir is not None:
            # standalone files of AutoGPTQ / AutoAWQ, used only without a
            # quantization_config in config.json
            for fname, meth in (("quantize_config.json", "gptq"), ("quant_config.json", "awq")):
                path = os.path.join(model_dir, fname)
                if os.path.exists(path):
                    with open(path) as f:
                        q, source, default = json.load(f), fname, meth
                    break
        if q is None:
            return cls()
        if not isinstance(q, dict):
            raise ValueError(f"{source}: quantization config must be an object")
        method = q.get("quant_method", default)
        self = cls(method, source, q)
        if method == "mxfp4":
            pass
        elif method == "gptq":
            self._gptq(q)
        elif method == "awq":
            self._awq(q)
        elif method == "quark":
            self._quark(q)
        else:
            raise ValueError(f"{source}: quant_method {method!r} not supported")
        return self

    def _gptq(self, q):
        self.bits = int(q["bits"])
        if self.bits not in (2, 3, 4, 8):
            raise ValueError(f"{self.source}: gptq bits {self.bits}")
        self.group_size = int(q.get("group_size", -1))
        if q.get("is_marlin_format"):
            raise ValueError(f"{self.source}: marlin-repacked GPTQ not supported")
        # checkpoint_format may be missing: that means v1 "gptq" (doc 7.2);
        # GPTQModel writes the same value under "format" too
        fmt = q.get("checkpoint_format") or q.get("format") or "gptq"
        if fmt not in ("gptq", "gptq_v2"):
            raise ValueError(f"{self.source}: gptq checkpoint_format {fmt!r} not supported")
        self.gptq_v1 = fmt == "gptq"

    def _awq(self, q):
        self.bits = int(q.get("bits", q.get("w_bit", 4)))
        self.group_size = int(q.get("group_size", q.get("q_group_size", -1)))
        self.zero_point = bool(q.get("zero_point", True))
        version = str(q.get("version", "gemm")).lower()   # AutoAWQ lower-cases it
        if version != "gemm" or self.bits != 4 or self.group_size <= 0:
            raise ValueError(f"{self.source}: only 4-bit AWQ GEMM with a positive group size "
                             f"is supported (version {version!r}, bits {self.bits}, "
                             f"group {self.group_size})")

    def _quark(self, q):
        if q.get("layer_type_quant_config"):
            # keyed by torch module class names, which a checkpoint does not record
            raise ValueError(f"{self.source}: quark layer_type_quant_config is not supported")
        self.exclude = list(q.get("exclude") or [])
        self.layer_specs = dict(q.get("layer_quant_config") or {})
        self.global_spec = q.get("global_quant_config")

    def quark_spec(self, name):
        """Spec of module `name` (doc 3.1): exclude (exact name, "re:" regex
        or fnmatch glob), then layer_quant_config (fnmatch), then global.
        None = not quantized."""
        for pat in self.exclude:
            if pat.startswith("re:"):
                if re.fullmatch(pat[3:], name):
                    return None
            elif pat == name or fnmatch.fnmatchcase(name, pat):
                return None
        for pat, spec in self.layer_specs.items():
            if fnmatch.fnmatchcase(name, pat):
                return spec
        return self.global_spec


# ---------------------------------------------------------------------------
# weights of every format, as float [out, in] matrices

class Linear:
    """One Linear module: w [out, in] (float32 when dequantized, else the
    stored values), bias float64 or None, aq ActQuant or None."""

    def __init__(self, w, b, aq, kind):
        self.w, self.b, self.aq, self.kind = w, b, aq, kind


_EXPERT_VIRTUAL = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_up|down)")


class WeightSource:
    """Decodes the Linear modules of any supported format into the HF math
    layout the Model uses; also serves dequant_module()."""

    def __init__(self, ck, cfg, qc):
        self.ck, self.cfg, self.qc = ck, cfg, qc
        self._whole = {}

    def _get_whole(self, name, shape):
        # HF layouts store all experts in one tensor; decode it once
        if name not in self._whole:
            self._whole[name] = self.ck.get(name, shape)
        return self._whole[name]

    # -- one Linear ------------------------------------------------------

    def linear(self, prefix, n, k, need_bias):
        ck, qc = self.ck, self.qc
        spec = qc.quark_spec(prefix) if qc.method == "quark" else None
        if spec is not None and (spec.get("output_tensors") is not None or spec.get("bias") is not None):
            raise ValueError(f"{prefix}: quantized output_tensors / bias are not supported")
        wspec = spec.get("weight") if spec is not None else None
        if prefix + ".qweight" in ck:
            if qc.method == "gptq":
                w, kind = self._gptq(prefix, n, k), f"gptq{qc.bits}"
            elif qc.method == "awq":
                w, kind = self._awq(prefix, n, k), "awq4"
            else:
                raise ValueError(f"{prefix}.qweight in a checkpoint with quant_method {qc.method!r}")
        elif prefix + ".weight" in ck:
            dt = ck.dtype(prefix + ".weight")
            if dt == "U8":
                w, kind = self._fp4(prefix, n, k, wspec), "fp4"
            elif dt == "F8_E4M3":
                w, kind = self._fp8(prefix, n, k, wspec), "fp8"
            else:
                if wspec is not None:
                    raise ValueError(f"{prefix}: quark spec quantizes the weight "
                                     f"({wspec.get('dtype')}) but it is stored as {dt}")
                w, kind = ck.get(prefix + ".weight", (n, k)), dt.lower()
        else:
            raise SafetensorsError(f"missing tensor {prefix}.weight (or .qweight)")
        aq = self._act_quant(prefix, spec, k)
        b = ck.get(prefix + ".bias", (n,)) if prefix + ".bias" in ck else None
        if need_bias and b is None:
            raise SafetensorsError(f"missing tensor {prefix}.bias")
        return Linear(w, b, aq, kind)

    def _int_tensor(self, name, shape):
        if self.ck.dtype(name) != "I32":
            raise SafetensorsError(f"{name}: dtype {self.ck.dtype(name)}, expected I32")
        return self.ck.get(name, shape)

    def _gptq(self, prefix, n, k):
        qc = self.qc
        bits = qc.bits
        gs = k if qc.group_size <= 0 else qc.group_size
        groups = -(-k // gs)                       # a ragged last group is allowed (doc 7.4)
        if (k * bits) % 32 or (n * bits) % 32:
            raise SafetensorsError(f"{prefix}: [{n}, {k}] does not pack into {bits}-bit int32 words")
        qweight = self._int_tensor(prefix + ".qweight", (k * bits // 32, n))
        qzeros = self._int_tensor(prefix + ".qzeros", (groups, n * bits // 32))
        scales = self.ck.get(prefix + ".scales", (groups, n))
        if prefix + ".g_idx" in self.ck:
            g_idx = self._int_tensor(prefix + ".g_idx", (k,)).astype(np.int64)
            if g_idx.min() < 0 or g_idx.max() >= groups:
                raise SafetensorsError(f"{prefix}.g_idx: values outside [0, {groups})")
        else:
            g_idx = np.arange(k) // gs
        q = unpack_bitstream(qweight, bits, k)            # [K, N], packed along K
        z = unpack_bitstream(qzeros.T, bits, n).T          # [G, N], packed along N
        if qc.gptq_v1:
            z = z + 1      # v1 stores zero-1, per element after masking (doc 1.2)
        return dequant_intq(q, z, scales, g_idx)

    def _awq(self, prefix, n, k):
        gs = self.qc.group_size
        if k % gs or n % 8:
            raise SafetensorsError(f"{prefix}: AWQ needs in % {gs} == 0 and out % 8 == 0, got [{n}, {k}]")
        qweight = self._int_tensor(prefix + ".qweight", (k, n // 8))
        qzeros = self._int_tensor(prefix + ".qzeros", (k // gs, n // 8))
        scales = self.ck.get(prefix + ".scales", (k // gs, n))
        # no +1 for AWQ zeros, group of column k is k // gs (no g_idx)
        return dequant_intq(unpack_awq(qweight), unpack_awq(qzeros), scales, np.arange(k) // gs)

    def _fp4(self, prefix, n, k, wspec):
        if self.qc.method != "quark" or wspec is None or wspec.get("dtype") != "fp4":
            raise ValueError(f"{prefix}: U8 weight but the config does not make it quark fp4")
        if (wspec.get("qscheme"), wspec.get("group_size"), wspec.get("scale_format")) != \
                ("per_group", 32, "e8m0") or wspec.get("is_dynamic"):
            raise ValueError(f"{prefix}: only static per_group/32/e8m0 fp4 weights are supported")
        if k % 32:
            raise SafetensorsError(f"{prefix}: fp4 weight needs in_features % 32 == 0 (got {k})")
        packed = self.ck.get(prefix + ".weight", (n, k // 2))
        scale = self.ck.get(prefix + ".weight_scale", (n, k // 32))
        if self.ck.dtype(prefix + ".weight_scale") != "U8":
            raise SafetensorsError(f"{prefix}.weight_scale: expected U8 (e8m0)")
        return dequant_fp4_rows(packed, scale, k)

    def _fp8(self, prefix, n, k, wspec):
        if self.qc.method != "quark" or wspec is None or wspec.get("dtype") not in ("fp8_e4m3", "fp8_e4m3fn"):
            raise ValueError(f"{prefix}: F8_E4M3 weight but the config does not make it quark fp8_e4m3")
        qs = wspec.get("qscheme")
        codes = self.ck.get(prefix + ".weight", (n, k))
        raw = self.ck.get(prefix + ".weight_scale")
        if qs == "per_tensor" and raw.size == 1 and raw.ndim <= 1:
            scale = raw.reshape(())
        elif qs == "per_channel" and raw.shape in ((n,), (n, 1)):
            scale = raw.reshape(n)
        else:
            raise SafetensorsError(f"{prefix}.weight_scale: shape {list(raw.shape)} does not fit "
                                   f"a {qs} fp8 weight of [{n}, {k}]")
        return dequant_fp8_rows(codes, scale)

    def _act_quant(self, prefix, spec, k):
        it = spec.get("input_tensors") if spec is not None else None
        if it is None:
            return None
        dtype, qs, dyn = it.get("dtype"), it.get("qscheme"), bool(it.get("is_dynamic"))
        if dtype in ("fp8_e4m3", "fp8_e4m3fn") and qs == "per_tensor":
            if dyn:
                return ActQuant("fp8_dynamic")
            # a 0-d float per module (F32, BF16 or F16 accepted, doc 8)
            s = self.ck.get(prefix + ".input_scale")
            if s.size != 1 or s.ndim > 1:
                raise SafetensorsError(f"{prefix}.input_scale: shape {list(s.shape)}, expected []")
            s = float(s.reshape(()))
            if not (s > 0 and math.isfinite(s)):
                raise SafetensorsError(f"{prefix}.input_scale: {s} is not a positive finite scale")
            return ActQuant("fp8_static", s)
        mx = ("fp4", "per_group", 32, "e8m0", True)
        if (dtype, qs, it.get("group_size"), it.get("scale_format"), dyn) == mx:
            if k % 32:
                raise ValueError(f"{prefix}: mxfp4 activations need in_features % 32 == 0")
            return ActQuant("mxfp4_dynamic")
        raise ValueError(f"{prefix}: input_tensors spec {it} not supported")

    # -- experts ---------------------------------------------------------

    def expert_family(self, layer):
        """Expert naming family of a layer (doc 5), from the tensor names."""
        ex = f"model.layers.{layer}.mlp.experts."
        if ex + "gate_up_proj" in self.ck:
            return "hf"
        if ex + "gate_up_proj_blocks" in self.ck:
            return "hf-mxfp4"
        probes = [("llmc", ex + "experts.0.gate_proj."), ("defuser", ex + "0.gate_proj."),
                  ("gptqmodel-old", ex + "gate_up.0."), ("per-expert-fused", ex + "0.gate_up_proj.")]
        names = [n for n in self.ck.names() if n.startswith(ex)]
        for fam, stem in probes:
            if any(n.startswith(stem) for n in names):
                return fam
        raise SafetensorsError(f"layer {layer}: no known expert tensor layout "
                               f"(names seen: {sorted(names)[:6]})")

    def expert(self, layer, e, family=None):
        """-> (gate_up Linear [2I, H], rows interleaved: 2j = gate j, 2j+1 =
        up j; down Linear [H, I])."""
        cfg = self.cfg
        H, I, E = cfg.hidden, cfg.inter, cfg.n_experts
        if not 0 <= e < E:
            raise ValueError(f"expert {e} out of range [0, {E})")
        fam = family or self.expert_family(layer)
        ex = f"model.layers.{layer}.mlp.experts."
        ck_get = self._get_whole
        if fam == "hf":
            w = ck_get(ex + "gate_up_proj", (E, H, 2 * I))[e].T
            d = ck_get(ex + "down_proj", (E, I, H))[e].T
            return (Linear(w, ck_get(ex + "gate_up_proj_bias", (E, 2 * I))[e], None, "hf"),
                    Linear(d, ck_get(ex + "down_proj_bias", (E, H))[e], None, "hf"))
        if fam == "hf-mxfp4":
            gh, gi = -(-H // 32), -(-I // 32)
            w = dequant_mxfp4(ck_get(ex + "gate_up_proj_blocks", (E, 2 * I, gh, 16))[e],
                              ck_get(ex + "gate_up_proj_scales", (E, 2 * I, gh))[e], H)
            d = dequant_mxfp4(ck_get(ex + "down_proj_blocks", (E, H, gi, 16))[e],
                              ck_get(ex + "down_proj_scales", (E, H, gi))[e], I)
            return (Linear(w, ck_get(ex + "gate_up_proj_bias", (E, 2 * I))[e], None, "mxfp4"),
                    Linear(d, ck_get(ex + "down_proj_bias", (E, H))[e], None, "mxfp4"))
        if fam == "gptqmodel-old":
            return (self.linear(ex + f"gate_up.{e}", 2 * I, H, True),
                    self.linear(ex + f"down.{e}", H, I, True))
        if fam == "per-expert-fused":
            return (self.linear(ex + f"{e}.gate_up_proj", 2 * I, H, True),
                    self.linear(ex + f"{e}.down_proj", H, I, True))
        stem = ex + (f"experts.{e}." if fam == "llmc" else f"{e}.")
        g = self.linear(stem + "gate_proj", I, H, True)
        u = self.linear(stem + "up_proj", I, H, True)
        if g.aq != u.aq:
            raise ValueError(f"{stem}gate_proj / up_proj: different activation quantization "
                             "cannot feed one fused gate_up")
        if fam == "defuser":
            # Defuser's gate_proj / up_proj are the first / last HALF of the
            # interleaved fused matrix; stacking them rebuilds it (doc 5)
            w = np.concatenate([g.w, u.w], axis=0)
            b = np.concatenate([g.b, u.b])
        else:
            # llm-compressor's are the true gate and up: interleave them
            w = np.empty((2 * I, H), dtype=np.result_type(g.w, u.w))
            w[0::2], w[1::2] = g.w, u.w
            b = np.empty(2 * I)
            b[0::2], b[1::2] = g.b, u.b
        return (Linear(w, b, g.aq, g.kind),
                self.linear(stem + "down_proj", H, I, True))

    # -- dequant_module ----------------------------------------------------

    def module_weight(self, module):
        """float32 [rows, cols] of a dense module prefix or a virtual expert."""
        cfg = self.cfg
        m = _EXPERT_VIRTUAL.fullmatch(module)
        if m:
            layer, e, which = int(m.group(1)), int(m.group(2)), m.group(3)
            if layer >= cfg.n_layers:
                raise ValueError(f"{module}: layer out of range")
            gu, dn = self.expert(layer, e)
            return np.asarray((gu if which == "gate_up" else dn).w, dtype=np.float32)
        H, V, E = cfg.hidden, cfg.vocab, cfg.n_experts
        nq, nkv = cfg.n_heads * cfg.head_dim, cfg.n_kv * cfg.head_dim
        shapes = {"self_attn.q_proj": (nq, H), "self_attn.k_proj": (nkv, H),
                  "self_attn.v_proj": (nkv, H), "self_attn.o_proj": (H, nq),
                  "mlp.router": (E, H)}
        m = re.fullmatch(r"model\.layers\.(\d+)\.(self_attn\.[qkvo]_proj|mlp\.router)", module)
        if m and int(m.group(1)) < cfg.n_layers:
            n, k = shapes[m.group(2)]
        elif module == "lm_head" and not cfg.tie:
            n, k = V, H
        elif module in ("model.embed_tokens", "lm_head"):
            return np.asarray(self.ck.get("model.embed_tokens.weight", (V, H)), dtype=np.float32)
        else:
            raise ValueError(f"unknown module {module!r}")
        return np.asarray(self.linear(module, n, k, False).w, dtype=np.float32)


def _load_source(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg_dict = json.load(f)
    cfg = Config(cfg_dict)
    return WeightSource(Checkpoint(model_dir), cfg, QuantConfig.load(model_dir, cfg_dict))


def dequant_module(ckpt_dir, module):
    """The float32 [rows, cols] weight of one module as the C side must
    produce it bit for bit: dequantized formats as their float32 products,
    unquantized weights as float32 of the stored value.  Modules: a dense
    prefix (model.layers.0.self_attn.q_proj, lm_head, model.layers.0.mlp.router,
    model.embed_tokens) or a virtual expert model.layers.L.mlp.experts.E.gate_up
    ([2I, H], rows interleaved) / ...experts.E.down ([H, I])."""
    return _load_source(ckpt_dir).module_weight(module)


# ---------------------------------------------------------------------------
# RoPE (doc 2.3)

def yarn_inv_freq(dim, base, factor, l0, beta_fast, beta_slow, truncate, attention_factor=None):
    """Returns (inv_freq [dim/2], attention_scaling)."""
    pos_freq = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrap = 1.0 / pos_freq
    interp = 1.0 / (factor * pos_freq)

    def corr(n_rot):
        return dim * math.log(l0 / (n_rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    inv_freq = interp * ramp + extrap * (1.0 - ramp)
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, float(attention_factor)


def rope_tables(cfg, n_pos):
    d = cfg.head_dim
    if cfg.rope_type == "yarn":
        r = cfg.rope
        inv_freq, scale = yarn_inv_freq(d, cfg.rope_theta, r["factor"], r["l0"], r["beta_fast"],
                                        r["beta_slow"], r["truncate"], r["attention_factor"])
    else:
        inv_freq = 1.0 / cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
        scale = 1.0
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang) * scale, np.sin(ang) * scale


def kv_fp8_round(x):
    """fp8 KV (engine/fp8.h): per position and kv head (x's last axis), the
    fp32 values divided by 2^k, k the least integer with max|x| <= 448 * 2^k
    (0 for a head of zeros; kept in [-100, 100]), rounded to e4m3fn (ties
    to even), times 2^k again; a NaN in a head makes the whole head NaN."""
    x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
    nan = np.isnan(x32).any(axis=-1, keepdims=True)
    amax = np.nanmax(np.where(np.isnan(x32), 0.0, np.abs(x32)), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.ceil(np.log2(np.where(amax > 0, amax, 448.0) / 448.0))
    k = np.where(np.isfinite(k), k, 100.0)
    # log2 may land one off either way: settle k by exact comparisons
    k = np.where(448.0 * np.exp2(k) < amax, k + 1, k)
    k = np.where((amax > 0) & (448.0 * np.exp2(k - 1) >= amax), k - 1, k)
    k = np.clip(k, -100, 100)
    s = np.exp2(k)
    with np.errstate(invalid="ignore"):
        q = e4m3_rne(np.clip(np.nan_to_num(x32 / s, nan=0.0), -448.0, 448.0)) * s
    return np.where(nan, np.nan, q)


def kv_round(x, kv_dtype):
    """K or V as the engine's KV cache stores it (engine/kv-cache.h): f32
    as computed, bf16 = the fp32 value rounded to nearest even (NaN kept a
    NaN), fp8 as kv_fp8_round; read back widened."""
    if kv_dtype == "f32":
        return x
    if kv_dtype == "fp8":
        return kv_fp8_round(x)
    if kv_dtype != "bf16":
        raise ValueError(f"kv dtype {kv_dtype!r}: f32, bf16 or fp8")
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    r = np.where((u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000),
                 (u >> np.uint32(16)) | np.uint32(0x40), r).astype(np.uint32)
    return (r << np.uint32(16)).view(np.float32).astype(np.float64)


def apply_rope(x, cos, sin):
    """x [T, heads, d]; pairs are (i, i + d/2), not adjacent elements."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


# ---------------------------------------------------------------------------
# model

class Stats:
    """Diagnostics gathered during forward passes: how often the SwiGLU clamps
    fire (so tests know they exercise them) and how close the router and the
    greedy choice came to a tie (an fp32 implementation may legitimately pick
    the other side of a near-tie)."""

    def __init__(self):
        self.gate_clamped = 0
        self.up_clamped = 0
        self.elements = 0
        self.min_router_gap = math.inf
        self.min_greedy_margin = math.inf
        self.margins = []            # top-2 margin of each generated step

    def clamp_fraction(self):
        e = max(self.elements, 1)
        return {"gate": self.gate_clamped / e, "up": self.up_clamped / e}


def rms_norm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def sigmoid(z):
    # tanh form cannot overflow for large |z|
    return 0.5 * (1.0 + np.tanh(0.5 * z))


class Model:
    """The forward pass.  Model(model_dir) reads a checkpoint of any
    supported format; Model(config=dict, tensors={name: float array}) runs
    float weights in the HF layout (the checkpoint writer calibrates static
    activation scales that way).  observer, when set, is called as
    observer(module_name, input) before every Linear; expert modules are
    named model.layers.L.mlp.experts.E.gate_up / .down."""

    def __init__(self, model_dir=None, *, config=None, tensors=None):
        if model_dir is not None:
            with open(os.path.join(model_dir, "config.json")) as f:
                cfg_dict = json.load(f)
            ck = Checkpoint(model_dir)
            qc = QuantConfig.load(model_dir, cfg_dict)
        else:
            cfg_dict, ck, qc = config, ArrayCheckpoint(tensors), QuantConfig()
        self.cfg = cfg = Config(cfg_dict)
        self.quant = qc
        self.observer = None
        self.tie_probe = None    # TieProbe passed to every activation quantizer (tests)
        self.kv_dtype = "f32"    # how K and V are stored before attention reads them
        src = WeightSource(ck, cfg, qc)
        H, d, nH, nKV = cfg.hidden, cfg.head_dim, cfg.n_heads, cfg.n_kv
        E, V = cfg.n_experts, cfg.vocab
        f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731

        self.embed = ck.get("model.embed_tokens.weight", (V, H))
        self.norm = ck.get("model.norm.weight", (H,))
        if cfg.tie:
            self.lm_head, self.lm_aq = self.embed, None
        else:
            lm = src.linear("lm_head", V, H, False)
            self.lm_head, self.lm_aq = f64(lm.w), lm.aq
        aqs = [self.lm_aq]
        self.layers = []
        for l in range(cfg.n_layers):
            p = f"model.layers.{l}."
            g = lambda n, s: ck.get(p + n, s)  # noqa: E731
            lw = dict(ln1=g("input_layernorm.weight", (H,)),
                      sinks=g("self_attn.sinks", (nH,)),
                      ln2=g("post_attention_layernorm.weight", (H,)), aq={})
            for key, mod, n, k in (("q", "self_attn.q_proj", nH * d, H),
                                   ("k", "self_attn.k_proj", nKV * d, H),
                                   ("v", "self_attn.v_proj", nKV * d, H),
                                   ("o", "self_attn.o_proj", H, nH * d),
                                   ("r", "mlp.router", E, H)):
                lin = src.linear(p + mod, n, k, True)
                lw["w" + key], lw["b" + key], lw["aq"][key] = f64(lin.w), lin.b, lin.aq
            fam = src.expert_family(l)
            ex = [src.expert(l, e, fam) for e in range(E)]
            # the math below uses the HF parameter layout (doc 3.3): [in, out]
            lw["gu"] = np.stack([f64(gu.w).T for gu, _ in ex])
            lw["gub"] = np.stack([gu.b for gu, _ in ex])
            lw["dn"] = np.stack([f64(dn.w).T for _, dn in ex])
            lw["db"] = np.stack([dn.b for _, dn in ex])
            lw["aq"]["gu"] = [gu.aq for gu, _ in ex]
            lw["aq"]["dn"] = [dn.aq for _, dn in ex]
            lw["names"] = {"q": p + "self_attn.q_proj", "k": p + "self_attn.k_proj",
                           "v": p + "self_attn.v_proj", "o": p + "self_attn.o_proj",
                           "r": p + "mlp.router", "ex": p + "mlp.experts."}
            aqs += [lw["aq"][k] for k in "qkvor"] + lw["aq"]["gu"] + lw["aq"]["dn"]
            self.layers.append(lw)
        # True when some module quantizes its input activations
        self.act_quant = any(a is not None for a in aqs)

    def first_layer_tie_tokens(self, window):
        """Token ids whose first-layer attention inputs (a function of the
        token alone) hit a near tie (TieProbe) in activation quantization.
        With per-token dynamic scales these recur whenever the token does:
        the bf16 embedding and norm weights make ratios x_i / amax land
        exactly on rounding midpoints for some tokens."""
        lw = self.layers[0]
        x = rms_norm(self.embed, lw["ln1"], self.cfg.eps)
        hit = np.zeros(self.cfg.vocab, dtype=bool)
        for key in "qkv":
            if lw["aq"][key] is not None:
                probe = TieProbe(window)
                lw["aq"][key].apply(x, probe)
                hit |= probe.rows
        return np.nonzero(hit)[0].tolist()

    def linear(self, name, x, wt, b, aq):
        """x @ wt (+ b), wt = W^T [in, out]; with activation quantization
        y = (xq @ wt) * post + b."""
        if self.observer is not None:
            self.observer(name, x)
        if aq is None:
            y = x @ wt
        else:
            xq, post = aq.apply(x, self.tie_probe)
            y = (xq @ wt) * post
        return y if b is None else y + b

    def attention(self, lw, h, sliding, cos, sin):
        cfg = self.cfg
        T, d, nH, nKV = h.shape[0], cfg.head_dim, cfg.n_heads, cfg.n_kv
        nm, aq = lw["names"], lw["aq"]
        q = apply_rope(self.linear(nm["q"], h, lw["wq"].T, lw["bq"], aq["q"]).reshape(T, nH, d), cos, sin)
        k = apply_rope(self.linear(nm["k"], h, lw["wk"].T, lw["bk"], aq["k"]).reshape(T, nKV, d), cos, sin)
        v = self.linear(nm["v"], h, lw["wv"].T, lw["bv"], aq["v"]).reshape(T, nKV, d)
        k, v = kv_round(k, self.kv_dtype), kv_round(v, self.kv_dtype)
        # query head h reads kv head h // (nH/nKV): each kv head repeated consecutively
        k = np.repeat(k, nH // nKV, axis=1)
        v = np.repeat(v, nH // nKV, axis=1)
        s = np.einsum("ihd,jhd->hij", q, k) * d ** -0.5
        i = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        allowed = j <= i
        if sliding:
            allowed &= (i - j) < int(cfg.window)
        s = np.where(allowed[None], s, -np.inf)
        # the sink is one more softmax column (unscaled) whose mass is discarded
        sink = lw["sinks"][:, None, None]
        m = np.maximum(s.max(axis=-1, keepdims=True), sink)
        e = np.exp(s - m)
        p = e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - m))
        o = np.einsum("hij,jhd->ihd", p, v).reshape(T, nH * d)
        return self.linear(nm["o"], o, lw["wo"].T, lw["bo"], aq["o"])

    def moe(self, lw, h, stats):
        cfg = self.cfg
        k, lim = cfg.top_k, cfg.limit
        nm, aq = lw["names"], lw["aq"]
        r = self.linear(nm["r"], h, lw["wr"].T, lw["br"], aq["r"])
        # stable sort of the negated logits: largest first, ties to the lower index
        order = np.argsort(-r, axis=1, kind="stable")
        top = order[:, :k]
        vals = np.take_along_axis(r, top, axis=1)
        w = np.exp(vals - vals[:, :1])
        w /= w.sum(axis=1, keepdims=True)
        if stats is not None and k < cfg.n_experts:
            kth = vals[:, -1]
            nxt = np.take_along_axis(r, order[:, k:k + 1], axis=1)[:, 0]
            stats.min_router_gap = min(stats.min_router_gap, float(np.min(kth - nxt)))
        out = np.zeros_like(h)
        for e in range(cfg.n_experts):
            tok, slot = np.nonzero(top == e)
            if tok.size == 0:
                continue
            gu = self.linear(f"{nm['ex']}{e}.gate_up", h[tok], lw["gu"][e], lw["gub"][e], aq["gu"][e])
            gate, up = gu[:, 0::2], gu[:, 1::2]   # interleaved, not halves
            if stats is not None:
                stats.gate_clamped += int(np.count_nonzero(gate > lim))
                stats.up_clamped += int(np.count_nonzero(np.abs(up) > lim))
                stats.elements += gate.size
            gate = np.minimum(gate, lim)
            up = np.clip(up, -lim, lim)
            act = (up + 1.0) * (gate * sigmoid(cfg.alpha * gate))
            y = self.linear(f"{nm['ex']}{e}.down", act, lw["dn"][e], lw["db"][e], aq["dn"][e])
            out[tok] += w[tok, slot][:, None] * y
        return out

    def forward(self, ids, stats=None):
        """ids: sequence of token ids (positions 0..T-1) -> logits [T, V] float64."""
        cfg = self.cfg
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("need at least one token")
        if ids.min() < 0 or ids.max() >= cfg.vocab:
            raise ValueError(f"token id out of range [0, {cfg.vocab})")
        cos, sin = rope_tables(cfg, ids.size)
        x = self.embed[ids]
        for l, lw in enumerate(self.layers):
            x = x + self.attention(lw, rms_norm(x, lw["ln1"], cfg.eps), cfg.sliding[l], cos, sin)
            x = x + self.moe(lw, rms_norm(x, lw["ln2"], cfg.eps), stats)
        return self.linear("lm_head", rms_norm(x, self.norm, cfg.eps), self.lm_head.T, None, self.lm_aq)


def perplexity(model, id_lists):
    """exp of the mean -log p of every token after the first of each list,
    and that token count: each list scored alone from position 0 (the
    held-out scoring of tools/perplexity.py)."""
    total, n = 0.0, 0
    for ids in id_lists:
        lg = model.forward(ids)
        lg = lg - lg.max(axis=1, keepdims=True)
        lp = lg - np.log(np.exp(lg).sum(axis=1, keepdims=True))
        total -= float(lp[np.arange(len(ids) - 1), ids[1:]].sum())
        n += len(ids) - 1
    return math.exp(total / n), n


def greedy_margin(row):
    if row.size < 2:
        return math.inf
    top2 = np.partition(row, -2)[-2:]
    return float(top2[1] - top2[0])


def generate(model, prompt, max_tokens, stats=None):
    """Greedy decoding by full recompute (no KV cache on purpose: the reference
    must not share the cache logic under test).  Returns (generated ids,
    prompt logits [T, V] float64)."""
    ids = list(prompt)
    logits = model.forward(ids, stats)
    prompt_logits = logits
    out = []
    for step in range(max_tokens):
        if step:
            logits = model.forward(ids, stats)
        row = logits[-1]
        if stats is not None:
            stats.margins.append(greedy_margin(row))
            stats.min_greedy_margin = min(stats.min_greedy_margin, stats.margins[-1])
        nxt = int(np.argmax(row))   # first maximum = lowest id on ties
        out.append(nxt)
        ids.append(nxt)
    return out, prompt_logits


# ---------------------------------------------------------------------------
# self-test

def self_test():
    failures = []

    def check(what, got, want, rel=1e-6):
        ok = abs(got - want) <= rel * abs(want)
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {got!r} (want {want!r})")
        if not ok:
            failures.append(what)

    inv, scale = yarn_inv_freq(64, 150000.0, 32.0, 4096.0, 32.0, 1.0, truncate=False)
    for i, want in [(0, 1.0), (1, 0.68904430), (8, 0.050813280), (9, 0.031705696),
                    (12, 0.0067949593), (17, 1.2931869e-4), (18, 3.8308812e-5), (31, 3.0235114e-7)]:
        check(f"yarn inv_freq[{i}]", float(inv[i]), want)
    check("yarn attention_scaling", scale, 1.3465735902799727, rel=1e-12)
    # truncate=true snaps the ramp ends to 8 and 18, so dim 17 sits at 9/10 of the ramp
    inv_t, _ = yarn_inv_freq(64, 150000.0, 32.0, 4096.0, 32.0, 1.0, truncate=True)
    check("yarn truncate inv_freq[17]", float(inv_t[17]), 150000.0 ** (-34 / 64) * (0.9 / 32 + 0.1))

    blocks = np.zeros((1, 16), dtype=np.uint8)
    blocks[0, :2] = [0x21, 0xF8]
    vals = dequant_mxfp4(blocks, np.array([128], dtype=np.uint8), 32)
    want = [1.0, 2.0, -0.0, -12.0]
    ok = list(vals[:4]) == want and bool(np.signbit(vals[2])) and not np.any(vals[4:])
    print(f"{'ok  ' if ok else 'FAIL'} mxfp4 worked example: {list(vals[:4])} (want {want})")
    if not ok:
        failures.append("mxfp4")

    bf = decode("BF16", (3,), np.array([0x3F80, 0xC000, 0x3EAB], dtype="<u2").view(np.uint8))
    ok = list(bf) == [1.0, -2.0, float(np.float32(0.333984375))]
    print(f"{'ok  ' if ok else 'FAIL'} bf16 decode: {list(bf)}")
    if not ok:
        failures.append("bf16")

    def flag(what, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(what)

    def words(vals, bits):
        # the bitstream built with Python integers, a third encoding
        stream = sum(int(v) << (bits * j) for j, v in enumerate(vals))
        n = len(vals) * bits // 32
        return np.array([(stream >> (32 * i)) & 0xFFFFFFFF for i in range(n)],
                        dtype=np.uint32).view(np.int32)[:, None]

    # GPTQ 3-bit: value 10 occupies stream bits 30..32 and value 21 bits 63..65
    v = np.zeros(32, dtype=np.int64)
    v[10] = 0b111
    w = np.array([0xC0000000, 0x00000001, 0x00000000], dtype=np.uint32).view(np.int32)[:, None]
    got = unpack_bitstream(w, 3, 32)[:, 0]
    flag("gptq 3-bit value 10 straddles words 0/1", np.array_equal(got, v), f"{got[9:12].tolist()}")
    v = np.zeros(32, dtype=np.int64)
    v[21] = 0b101
    w = np.array([0, 0x80000000, 0x00000002], dtype=np.uint32).view(np.int32)[:, None]
    got = unpack_bitstream(w, 3, 32)[:, 0]
    flag("gptq 3-bit value 21 straddles words 1/2", np.array_equal(got, v), f"{got[20:23].tolist()}")
    v = np.arange(64) * 5 % 8
    flag("gptq 3-bit 64 values", np.array_equal(unpack_bitstream(words(v, 3), 3, 64)[:, 0], v))
    for bits in (2, 4, 8):
        v = np.arange(64) * 7 % (1 << bits)
        flag(f"gptq {bits}-bit bitstream",
             np.array_equal(unpack_bitstream(words(v, bits), bits, 64)[:, 0], v))
    flag("gptq 4-bit word 0x76543210 -> rows 0..7",
         unpack_bitstream(np.array([[0x76543210]], dtype=np.int32), 4, 8)[:, 0].tolist() == list(range(8)))

    # AWQ: columns 0..7 holding 0..7 pack to 0x75316420; the sign bit must not smear
    got = unpack_awq(np.array([[0x75316420]], dtype=np.uint32).view(np.int32))[0].tolist()
    flag("awq 0x75316420 -> columns 0..7", got == list(range(8)), f"{got}")
    got = unpack_awq(np.array([[0xF0000000]], dtype=np.uint32).view(np.int32))[0].tolist()
    flag("awq 0xF0000000 -> column 7 = 15", got == [0] * 7 + [15], f"{got}")

    # v1 zeros: stored + 1 per element after masking (0x77777777 -> 8; 0xF -> 16, no carry)
    zw = np.array([[0x77777777, 0x0000000F]], dtype=np.uint32).view(np.int32)  # [G=1, N/8=2]
    z = unpack_bitstream(zw.T, 4, 16).T + 1
    flag("gptq v1 zeros +1 per element", z[0].tolist() == [8] * 8 + [16] + [1] * 7, f"{z[0].tolist()}")
    q = np.full((8, 16), 8)
    scales = np.full((1, 16), 0.5)
    wq = dequant_intq(q, z, scales, np.zeros(8, dtype=np.int64))
    flag("gptq v1 sym dequant is 0 at code 8", wq.dtype == np.float32 and not np.any(wq[:8]) and
         np.all(wq[8] == -4.0) and np.all(wq[9:] == 3.5))

    # e4m3
    finite = np.isfinite(E4M3_VALUES)
    rt = e4m3_rne(E4M3_VALUES[finite])
    flag("e4m3 every finite value round-trips", np.array_equal(rt, E4M3_VALUES[finite]) and
         np.array_equal(np.signbit(rt), np.signbit(E4M3_VALUES[finite])))
    flag("e4m3 decode 0x7E/0x08/0x01/0x80",
         [E4M3_VALUES[c] for c in (0x7E, 0x08, 0x01)] == [448.0, 2.0 ** -6, 2.0 ** -9] and
         E4M3_VALUES[0x80] == 0 and np.signbit(E4M3_VALUES[0x80]) and np.isnan(E4M3_VALUES[0x7F]))
    mids = (_E4M3_POS[:-1] + _E4M3_POS[1:]) / 2
    even = np.where(np.arange(126) % 2 == 0, _E4M3_POS[:-1], _E4M3_POS[1:])
    flag("e4m3 midpoints go to the even code", np.array_equal(e4m3_rne(mids), even) and
         np.array_equal(e4m3_rne(-mids), -even))
    cases = [(432.0, 448.0), (2.0 ** -10, 0.0), (3 * 2.0 ** -10, 2.0 ** -8), (1.0625, 1.0),
             (1.1875, 1.25), (1.0625 + 1e-12, 1.125), (464.0, 448.0), (-300.0, -288.0)]
    got = [float(e4m3_rne(np.float64(a))) for a, _ in cases]
    flag("e4m3 hand cases (ties, 464 -> 448)", got == [b for _, b in cases], f"{got}")
    over = np.array([448.5, 450.0, 463.99, 500.0, -460.0])
    got = e4m3_rne(np.clip(over, -448, 448))
    flag("e4m3 (448, 464) and beyond clamp to 448", got.tolist() == [448.0] * 4 + [-448.0])
    h = np.array([[[100.25, 103.25, 107.25, -1.0], [0.0, 0.0, 0.0, 0.0],
                   [56.0, 1.5, -3.0, 0.1], [1.0, np.nan, 2.0, 3.0]]])
    r = kv_fp8_round(h)
    flag("fp8 KV: a scale per head (1/4: 103.25 -> 104; 56 fits 448/8 exactly)",
         r[0, 0].tolist() == [104.0, 104.0, 104.0, -1.0] and r[0, 1].tolist() == [0.0] * 4 and
         r[0, 2].tolist() == [56.0, 1.5, -3.0, 0.1015625] and np.isnan(r[0, 3]).all(), f"{r.tolist()}")
    x = np.array([[-900.0, 1.0, 2.0 ** -12]])
    xq, post = ActQuant("fp8_static", 2.0).apply(x)
    flag("fp8 static: clip then round", xq.tolist() == [[-448.0, 0.5, 0.0]] and post == 2.0, f"{xq.tolist()}")
    xq, post = ActQuant("fp8_dynamic").apply(np.array([[0.0, 0.0], [-7.0, 1.0]]))
    flag("fp8 dynamic: per row, scale 1 for a zero row",
         post[0, 0] == 1.0 and post[1, 0] == 7.0 / 448 and xq[1].tolist() == [-448.0, 64.0])

    # e2m1 ties and the W4A4 scale rule
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.75, -5.0])
    got = e2m1_rne(ties).tolist()
    flag("e2m1 ties to the even code, saturating",
         got == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -1.0, -4.0], f"{got}")

    def group(amax, *vals):
        g = np.zeros(32)
        g[0] = amax
        g[1:1 + len(vals)] = vals
        return g

    # amax 1.0: 2^0 -> e = -2, scale 1/4.  amax 1.75: mantissa rounds into the
    # exponent -> 2^1, scale 1/2, 1.75/0.5 = 3.5 ties to 4 -> 2.0.  amax 1.74:
    # scale 1/4, 1.74*4 = 6.96 saturates to 6 -> 1.5.  amax 6: scale 1.
    # amax 7 = 1.75*4: scale 2, 3.5 -> 4 -> 8 (above amax), -1 -> -0.5 grid
    # point -> -1, 3 -> 1.5 -> 3.  amax 0: stays zero.
    x = np.stack([group(1.0, 0.3, -0.6, 0.125), group(1.75, 0.3, -0.6, 1.25),
                  group(1.74, 0.3, -0.6, 0.0625), group(6.0, 5.0, -2.5, 0.2),
                  group(7.0, 5.0, -1.0, 3.0), group(0.0)]).reshape(1, -1)
    want = [[1.0, 0.25, -0.5, 0.125], [2.0, 0.25, -0.5, 1.0], [1.5, 0.25, -0.5, 0.0],
            [6.0, 4.0, -2.0, 0.0], [8.0, 4.0, -1.0, 3.0], [0.0, 0.0, 0.0, 0.0]]
    got = mxfp4_quant_act(x).reshape(6, 32)[:, :4].tolist()
    flag("W4A4 activation scale rule", got == want, f"{got}")

    print("self-test:", "FAILED " + ", ".join(failures) if failures else "passed")
    return not failures


# ---------------------------------------------------------------------------
# CLI

def parse_tokens(text):
    parts = [t for t in text.replace(",", " ").split() if t]
    try:
        return [int(t) for t in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad token list {text!r}") from None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs="?", choices=["generate", "dequant"],
                    help="default generate, so the argument list of `moeserve generate` works unchanged")
    ap.add_argument("--model", help="checkpoint directory")
    ap.add_argument("--tokens", type=parse_tokens, help="prompt ids, comma separated")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--logits-out", help="write prompt logits here (f32 LE, [T x V])")
    ap.add_argument("--threads", type=int, help="ignored (accepted for CLI compatibility)")
    ap.add_argument("--ignore-eos", action="store_true",
                    help="ignored: the reference never stops at eos")
    ap.add_argument("--module", help="dequant: module name")
    ap.add_argument("--out", help="dequant: output file (f32 LE, [rows x cols])")
    ap.add_argument("--kv-dtype", choices=["f32", "bf16", "fp8"], default="f32",
                    help="how K and V are stored (moeserve --kv-dtype)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)

    if a.self_test:
        return 0 if self_test() else 1
    if a.command == "dequant":
        if not a.model or not a.module or not a.out:
            ap.error("dequant needs --model, --module and --out")
        try:
            w = dequant_module(a.model, a.module)
        except (OSError, ValueError, SafetensorsError) as e:
            print(f"gptoss_ref: {e}", file=sys.stderr)
            return 1
        w.astype("<f4").tofile(a.out)
        print(f"{w.shape[0]} {w.shape[1]}")
        return 0
    if not a.model or a.tokens is None:
        ap.error("--model and --tokens are required")
    if not a.tokens:
        ap.error("--tokens: need at least one token")
    if a.max_tokens < 0:
        ap.error("--max-tokens must be >= 0")
    try:
        model = Model(a.model)
        model.kv_dtype = a.kv_dtype
        out, logits = generate(model, a.tokens, a.max_tokens)
    except (OSError, ValueError, SafetensorsError) as e:
        print(f"gptoss_ref: {e}", file=sys.stderr)
        return 1
    if a.logits_out:
        logits.astype("<f4").tofile(a.logits_out)
    print(" ".join(str(t) for t in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
