#!/usr/bin/python3
"""Generator of small random GPT-OSS checkpoints in the real Hugging Face layouts.

The golden tests need models that exercise every path of a real gpt-oss
checkpoint (MXFP4 experts, BF16/F32 tensors, sharding through an index file,
GQA, sliding windows, YaRN in both config spellings, the SwiGLU clamps) while
staying small enough for a numpy reference to run in seconds.  Layouts follow
shared/docs/gpt-oss.md section 3; config.json mirrors the real gpt-oss-20b
file (section 1.2) with smaller sizes.

CLI:
    /usr/bin/python3 tools/gptoss_ckpt.py --out DIR [--preset NAME]
        [--format bf16|f32|mxfp4] [--shards N] [--seed S] [--layers L]
        [--hidden H] [--heads nH] [--kv-heads nKV] [--head-dim d]
        [--experts E] [--top-k k] [--intermediate I] [--vocab V]
        [--sliding-window W] [--rope-style scaling|parameters]
        [--no-layer-types] [--truncate] [--report] [--list-presets]

A preset sets every size plus format, shards and seed; explicit options given
after it override single fields.  Importable: PRESETS, QUANT_PRESETS,
preset_params(), write_checkpoint(), clamp_fraction(), quantize_mxfp4(),
write_safetensors().

QUANT_PRESETS (issue 3) write the same random float model (make_weights) as
GPTQ, AWQ, AMD Quark (MXFP4 / FP8) or llm-compressor checkpoints, with the
producers' tensor names, dtypes, shapes and JSON (shared/docs/quant-formats.md);
the encoders live in quantfmt.py, apart from the reference's decoders.

Needs only numpy (run with /usr/bin/python3).
"""

import argparse
import json
import math
import os
import re
import sys
import zlib

import numpy as np

# ---------------------------------------------------------------------------
# parameters and presets

DEFAULTS = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=4,
                top_k=2, intermediate=64, vocab=128, sliding_window=16,
                format="bf16", shards=1, seed=0, rope_style="scaling",
                layer_types=True, truncate=False, quant=None)

# Each preset covers a different corner; together: 1..4 layers, 4..32 experts
# (5, 6, 7 not powers of two), top-k 1..4, one and several kv heads, head_dim
# 8..32, hidden sizes that are not multiples of 16/32/64 (so MXFP4 groups are
# ragged), single-file and sharded, both rope config spellings, truncate, and
# a config without layer_types.
PRESETS = {
    "tiny-bf16": dict(layers=1, hidden=40, heads=4, kv_heads=1, head_dim=16, experts=4, top_k=1,
                      intermediate=24, vocab=96, sliding_window=8, format="bf16", shards=1, seed=1),
    "gqa-f32": dict(layers=2, hidden=72, heads=6, kv_heads=2, head_dim=12, experts=6, top_k=2,
                    intermediate=40, vocab=128, sliding_window=16, format="f32", shards=1, seed=2,
                    rope_style="parameters"),
    "mxfp4-32e": dict(layers=3, hidden=64, heads=8, kv_heads=2, head_dim=8, experts=32, top_k=4,
                      intermediate=64, vocab=128, sliding_window=12, format="mxfp4", shards=1, seed=3),
    "mxfp4-ragged": dict(layers=2, hidden=80, heads=4, kv_heads=4, head_dim=20, experts=5, top_k=3,
                         intermediate=48, vocab=112, sliding_window=24, format="mxfp4", shards=3,
                         seed=4),
    "sharded-bf16": dict(layers=4, hidden=96, heads=8, kv_heads=2, head_dim=16, experts=8, top_k=4,
                         intermediate=56, vocab=160, sliding_window=4, format="bf16", shards=3,
                         seed=5, layer_types=False),
    "odd-heads": dict(layers=2, hidden=50, heads=3, kv_heads=1, head_dim=10, experts=7, top_k=2,
                      intermediate=30, vocab=100, sliding_window=5, format="bf16", shards=2, seed=6),
    "truncate-yarn": dict(layers=2, hidden=72, heads=6, kv_heads=2, head_dim=12, experts=6, top_k=2,
                          intermediate=40, vocab=128, sliding_window=16, format="bf16", shards=1,
                          seed=7, rope_style="parameters", truncate=True),
    # the embedded model of the README demo
    "default": dict(layers=4, hidden=256, heads=8, kv_heads=2, head_dim=32, experts=8, top_k=2,
                    intermediate=256, vocab=512, sliding_window=32, format="bf16", shards=1, seed=0),
}


# Quantized-checkpoint presets (issue 3), kept apart from PRESETS so that
# tests/e2e/golden.py, which iterates PRESETS, is unaffected; tests/quant/quant_golden.py
# iterates these.  `quant` describes the producer's format:
#   GPTQ  method "gptq": bits, group_size (-1 = one group), sym,
#         checkpoint_format "gptq" (v1, zero-1 stored) | "gptq_v2", desc_act,
#         static_groups, config "gptqmodel" (config.json quantization_config)
#         | "autogptq" (standalone quantize_config.json), layout
#   AWQ   method "awq": group_size, zero_point, config "transformers"
#         (config.json) | "autoawq" (standalone quant_config.json), layout
#   Quark method "quark": weight "fp4" | "fp8-tensor" | "fp8-channel",
#         input "fp8-static" | "fp8-dynamic" | "fp4-dynamic" | None,
#         attn "exclude" (re: pattern in exclude) | "same" (global spec)
#         | "fp8-static" (layer_quant_config glob "*self_attn*")
#   none  method "none": unquantized BF16 in another expert layout
# layout (expert tensor naming, doc 5): "defuser" (GPTQModel >= Defuser:
# experts.E.{gate,up,down}_proj, gate/up = the two HALVES of the interleaved
# fused matrix), "gptqmodel-old" (experts.gate_up.E / experts.down.E),
# "per-expert-fused" (experts.E.{gate_up,down}_proj; Quark always uses it),
# "llmc" (experts.experts.E.{gate,up,down}_proj with TRUE gate/up).
# Sizes respect each format's divisibility: GPTQ qweight/qzeros words must
# be whole (3-bit: in and out multiples of 32; 2-bit: 16; 4-bit: 8), AWQ
# in % group_size == 0 and out % 8 == 0, MXFP4 in % 32 == 0.  Several GPTQ
# cases have in_features not divisible by the group size (ceil groups).
_L2 = dict(layers=2, vocab=128, top_k=2, format="bf16", shards=1)
QUANT_PRESETS = {
    # 4-bit sym v1: qzeros all 0x77777777; down K=48 with gs 32 -> 2 groups, ragged
    "gptq-4b-g32-sym-v1-defuser": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=4, intermediate=48,
        sliding_window=16, seed=101, shards=2,
        quant=dict(method="gptq", bits=4, group_size=32, sym=True, checkpoint_format="gptq",
                   desc_act=False, static_groups=False, config="gptqmodel", layout="defuser")),
    # desc_act without static groups: permuted, non-monotone g_idx; K = 96 / 80
    # with gs 64 -> ceil groups
    "gptq-4b-g64-asym-v1-descact": dict(
        _L2, hidden=96, heads=4, kv_heads=2, head_dim=24, experts=5, intermediate=80,
        sliding_window=24, seed=102,
        quant=dict(method="gptq", bits=4, group_size=64, sym=False, checkpoint_format="gptq",
                   desc_act=True, static_groups=False, config="gptqmodel",
                   layout="per-expert-fused")),
    # static groups: monotone g_idx despite desc_act; H=160 -> groups 128+32,
    # I=64 < gs -> one group
    "gptq-4b-g128-asym-v2-descact-static": dict(
        _L2, hidden=160, heads=4, kv_heads=1, head_dim=32, experts=4, intermediate=64,
        sliding_window=32, seed=103,
        quant=dict(method="gptq", bits=4, group_size=128, sym=False, checkpoint_format="gptq_v2",
                   desc_act=True, static_groups=True, config="gptqmodel", layout="defuser")),
    "gptq-8b-g64-sym-v2-old": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=6, top_k=3, intermediate=40,
        sliding_window=16, seed=104,
        quant=dict(method="gptq", bits=8, group_size=64, sym=True, checkpoint_format="gptq_v2",
                   desc_act=False, static_groups=False, config="gptqmodel",
                   layout="gptqmodel-old")),
    # 3-bit: values 10 and 21 of every 32 straddle words; every dim a multiple of 32
    "gptq-3b-gm1-asym-fused": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=4, intermediate=32,
        sliding_window=16, seed=105,
        quant=dict(method="gptq", bits=3, group_size=-1, sym=False, checkpoint_format="gptq",
                   desc_act=False, static_groups=False, config="gptqmodel",
                   layout="per-expert-fused")),
    "gptq-2b-g32-asym-defuser": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=4, intermediate=48,
        sliding_window=16, seed=106,
        quant=dict(method="gptq", bits=2, group_size=32, sym=False, checkpoint_format="gptq",
                   desc_act=False, static_groups=False, config="gptqmodel", layout="defuser")),
    "gptq-4b-standalone-autogptq": dict(
        _L2, hidden=64, heads=2, kv_heads=1, head_dim=32, experts=4, intermediate=64,
        sliding_window=16, seed=107,
        quant=dict(method="gptq", bits=4, group_size=32, sym=False, checkpoint_format="gptq",
                   desc_act=False, static_groups=False, config="autogptq",
                   layout="gptqmodel-old")),
    "awq-zp-g64-defuser": dict(
        _L2, hidden=128, heads=4, kv_heads=2, head_dim=32, experts=4, intermediate=64,
        sliding_window=32, seed=111,
        quant=dict(method="awq", group_size=64, zero_point=True, config="transformers",
                   layout="defuser")),
    "awq-nozp-g32-fused": dict(
        _L2, hidden=64, heads=4, kv_heads=1, head_dim=16, experts=5, intermediate=96,
        sliding_window=16, seed=112, shards=2,
        quant=dict(method="awq", group_size=32, zero_point=False, config="transformers",
                   layout="per-expert-fused")),
    "awq-g128-standalone": dict(
        _L2, hidden=128, heads=4, kv_heads=2, head_dim=32, experts=4, intermediate=128,
        sliding_window=32, seed=113,
        quant=dict(method="awq", group_size=128, zero_point=True, config="autoawq",
                   layout="gptqmodel-old")),
    # W = MXFP4, A = FP8 static per tensor (amd/gpt-oss-*-w-mxfp4-a-fp8 shape);
    # attention excluded through a re: pattern
    "quark-w4a8": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=6, intermediate=64,
        sliding_window=16, seed=121, shards=2,
        quant=dict(method="quark", weight="fp4", input="fp8-static", attn="exclude")),
    "quark-w4a8-attn": dict(
        _L2, hidden=96, heads=3, kv_heads=1, head_dim=32, experts=4, intermediate=64,
        sliding_window=24, seed=122,
        quant=dict(method="quark", weight="fp4", input="fp8-static", attn="same")),
    "quark-w4a4": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=4, intermediate=96,
        sliding_window=16, seed=123,
        quant=dict(method="quark", weight="fp4", input="fp4-dynamic", attn="same")),
    "quark-fp8-static": dict(
        _L2, hidden=72, heads=6, kv_heads=2, head_dim=12, experts=5, intermediate=40,
        sliding_window=16, seed=124,
        quant=dict(method="quark", weight="fp8-tensor", input="fp8-static", attn="same")),
    "quark-fp8-dynamic": dict(
        _L2, hidden=80, heads=4, kv_heads=2, head_dim=20, experts=4, intermediate=56,
        sliding_window=20, seed=125,
        quant=dict(method="quark", weight="fp8-channel", input="fp8-dynamic", attn="same")),
    # global W4A8 for the experts, FP8 W8A8 static for attention via layer_quant_config
    "quark-mixed": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=4, intermediate=64,
        sliding_window=16, seed=126,
        quant=dict(method="quark", weight="fp4", input="fp8-static", attn="fp8-static")),
    # llm-compressor's unquantized layout: true gate/up, no quantization_config
    "llmc-bf16": dict(
        _L2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=5, intermediate=40,
        sliding_window=16, seed=131, shards=2,
        quant=dict(method="none", layout="llmc")),
}


def preset_params(name, **overrides):
    """Full parameter dict of a preset (PRESETS or QUANT_PRESETS), with
    optional field overrides."""
    table = PRESETS if name in PRESETS else QUANT_PRESETS
    if name not in table:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(list(PRESETS) + list(QUANT_PRESETS))}")
    p = dict(DEFAULTS)
    p.update(table[name])
    p.update(overrides)
    return p


def check_params(p):
    if p["format"] not in ("bf16", "f32", "mxfp4"):
        raise ValueError(f"format {p['format']!r}: expected bf16, f32 or mxfp4")
    if p["rope_style"] not in ("scaling", "parameters"):
        raise ValueError(f"rope_style {p['rope_style']!r}: expected scaling or parameters")
    for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "experts", "top_k",
              "intermediate", "sliding_window", "shards"):
        if p[k] < 1:
            raise ValueError(f"{k} must be >= 1")
    if p["heads"] % p["kv_heads"]:
        raise ValueError("heads must be a multiple of kv_heads")
    if p["head_dim"] % 2:
        raise ValueError("head_dim must be even (rotary pairs)")
    if p["top_k"] > p["experts"]:
        raise ValueError("top_k must be <= experts")
    if p["vocab"] < 4:
        raise ValueError("vocab must be >= 4 (the top ids are used for eos/pad/bos)")
    if p.get("quant") is not None:
        check_quant(p)


_LAYOUTS = ("defuser", "gptqmodel-old", "per-expert-fused", "llmc")


def linear_shapes(p):
    """(out, in) of every distinct quantizable Linear shape of p's layout."""
    H, I, q = p["hidden"], p["intermediate"], p["quant"]
    nq, nkv = p["heads"] * p["head_dim"], p["kv_heads"] * p["head_dim"]
    attn = [(nq, H), (nkv, H), (H, nq)]
    halves = q.get("layout") in ("defuser", "llmc")
    experts = [(I if halves else 2 * I, H), (H, I)]
    return attn, experts


def check_quant(p):
    """Reject quant settings the format cannot represent (so a preset typo
    fails here, not as a confusing loader error)."""
    q = p["quant"]
    m = q.get("method")
    if p["format"] != "bf16":
        raise ValueError("quantized presets keep their unquantized tensors in bf16 (format bf16)")
    layout = q.get("layout", "per-expert-fused")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {_LAYOUTS}")
    attn, experts = linear_shapes(p)
    if m == "gptq":
        bits, gs = q["bits"], q["group_size"]
        if bits not in (2, 3, 4, 8):
            raise ValueError(f"gptq bits {bits}: expected 2, 3, 4 or 8")
        if q["checkpoint_format"] not in ("gptq", "gptq_v2"):
            raise ValueError("gptq checkpoint_format: expected gptq or gptq_v2")
        if not (gs == -1 or gs > 0):
            raise ValueError("gptq group_size must be -1 or positive")
        for n, k in attn + experts:
            if (k * bits) % 32 or (n * bits) % 32:
                raise ValueError(f"gptq {bits}-bit: Linear [{n}, {k}] does not pack into whole int32 words")
        if layout == "llmc":
            raise ValueError("llmc layout is unquantized")
    elif m == "awq":
        for n, k in attn + experts:
            if k % q["group_size"] or n % 8:
                raise ValueError(f"awq: Linear [{n}, {k}] needs in % {q['group_size']} == 0 and out % 8 == 0")
        if layout == "llmc":
            raise ValueError("llmc layout is unquantized")
    elif m == "quark":
        if layout != "per-expert-fused":
            raise ValueError("quark always writes per-expert fused gate_up_proj/down_proj")
        if q["weight"] not in ("fp4", "fp8-tensor", "fp8-channel"):
            raise ValueError(f"quark weight {q['weight']!r}")
        if q["input"] not in (None, "fp8-static", "fp8-dynamic", "fp4-dynamic"):
            raise ValueError(f"quark input {q['input']!r}")
        if q["attn"] not in ("exclude", "same", "fp8-static"):
            raise ValueError(f"quark attn {q['attn']!r}")
        mods = experts + (attn if q["attn"] == "same" else [])
        if "fp4" in (q["weight"], q["input"]) and any(k % 32 for _, k in mods):
            raise ValueError("quark fp4: every quantized in_features must be a multiple of 32")
    elif m == "none":
        if layout != "llmc":
            raise ValueError("method none is only the llmc layout")
    else:
        raise ValueError(f"quant method {m!r}: expected gptq, awq, quark or none")


# ---------------------------------------------------------------------------
# encodings

def to_bf16_bits(x):
    """float array -> uint16 bf16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


_FP4_MAGS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_mxfp4(w):
    """w [..., K] float (K = reduction axis) -> (blocks [..., G, 16] u8, scales [..., G] u8).

    G = ceil(K/32); a ragged last group is padded with zeros (code 0).  The
    scale is the smallest power of two 2^(e-127) with max|w| <= 6*2^(e-127),
    so nothing saturates; elements round to the nearest e2m1 value, ties to the
    even code (OCP MX rounding)."""
    w = np.asarray(w, dtype=np.float64)
    k = w.shape[-1]
    g = -(-k // 32)
    padded = np.zeros(w.shape[:-1] + (g * 32,))
    padded[..., :k] = w
    grp = padded.reshape(w.shape[:-1] + (g, 32))
    amax = np.abs(grp).max(axis=-1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.ceil(np.log2(amax / 6.0)), 0.0)
    # log2 can be off by one ulp near powers of two; settle e exactly
    e = np.where(amax > 6.0 * np.exp2(e), e + 1, e)
    e = np.where((amax > 0) & (amax <= 6.0 * np.exp2(e - 1)), e - 1, e)
    e = np.clip(e, -127, 127)
    x = np.abs(grp) / np.exp2(e)[..., None]
    dist = np.abs(x[..., None] - _FP4_MAGS)
    even = np.argmin(dist[..., 0::2], axis=-1) * 2
    odd = np.argmin(dist[..., 1::2], axis=-1) * 2 + 1
    d_even = np.take_along_axis(dist, even[..., None], -1)[..., 0]
    d_odd = np.take_along_axis(dist, odd[..., None], -1)[..., 0]
    code = np.where(d_odd < d_even, odd, even).astype(np.uint8)
    code |= np.where(grp < 0, 8, 0).astype(np.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.astype(np.uint8), (e + 127).astype(np.uint8)


def dequantize_mxfp4(blocks, scales, k):
    """Inverse of quantize_mxfp4 (for checks; the reference has its own)."""
    lut = np.concatenate([_FP4_MAGS, -_FP4_MAGS])
    codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(blocks.shape[:-1] + (32,))
    vals = lut[codes] * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(vals.shape[:-2] + (-1,))[..., :k]


# ---------------------------------------------------------------------------
# safetensors writing

_ST = {"BF16": (2, None), "F32": (4, "<f4"), "F16": (2, "<f2"), "U8": (1, "u1"),
       "I32": (4, "<i4"), "F8_E4M3": (1, "u1")}   # F8_E4M3: raw e4m3fn bytes


def tensor_bytes(dtype, arr):
    if dtype == "BF16":
        return to_bf16_bits(arr).astype("<u2").tobytes()
    return np.ascontiguousarray(arr, dtype=_ST[dtype][1]).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, ndarray).  Data is laid out in the order
    the safetensors library uses (wider dtypes first, then by name), so every
    tensor is aligned to its itemsize once the header is padded to 8 bytes."""
    order = sorted(tensors, key=lambda t: (-_ST[t[1]][0], t[0]))
    header, blobs, off = {}, [], 0
    header["__metadata__"] = metadata if metadata is not None else {"format": "pt"}
    for name, dtype, arr in order:
        b = tensor_bytes(dtype, arr)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(len(hj).to_bytes(8, "little"))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return off


# ---------------------------------------------------------------------------
# config files

def make_config(p):
    H, L, V = p["hidden"], p["layers"], p["vocab"]
    rope = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": 4096, "truncate": bool(p["truncate"])}
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        # real ids (200002/199999) do not exist in a tiny vocab; top ids stand in
        "eos_token_id": V - 1,
        "experts_per_token": p["top_k"],
        "head_dim": p["head_dim"],
        "hidden_act": "silu",
        "hidden_size": H,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": p["intermediate"],
        "max_position_embeddings": 131072,   # keeps factor == 131072/4096 (doc 1.2 trap)
        "model_type": "gpt_oss",
        "num_attention_heads": p["heads"],
        "num_experts_per_tok": p["top_k"],
        "num_hidden_layers": L,
        "num_key_value_heads": p["kv_heads"],
        "num_local_experts": p["experts"],
        "output_router_logits": False,
        "pad_token_id": V - 2,
        "rms_norm_eps": 1e-05,
        "router_aux_loss_coef": 0.9,
        "sliding_window": p["sliding_window"],
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": V,
    }
    if p["layer_types"] == "all-sliding":
        # every layer slides: the engine's bounded-memory test runs 100k
        # positions through it at the cost of the window alone
        cfg["layer_types"] = ["sliding_attention"] * L
    elif p["layer_types"]:
        cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                              for i in range(L)]
    if p["rope_style"] == "scaling":
        cfg["rope_scaling"] = rope
        cfg["rope_theta"] = 150000
    else:
        # transformers v5: theta lives inside rope_parameters, no top-level copy
        cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 150000.0,
                                  **{k: v for k, v in rope.items() if k != "rope_type"}}
    qc = quant_config_json(p)
    if qc is not None and qc[0] == "config.json":
        cfg["quantization_config"] = qc[1]
    if p["format"] == "mxfp4":
        cfg["quantization_config"] = {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4"}
    return cfg


def make_generation_config(p):
    V = p["vocab"]
    return {"bos_token_id": V - 3, "do_sample": True, "eos_token_id": [V - 1, V - 2],
            "pad_token_id": V - 2, "transformers_version": "4.55.0.dev0"}


# ---------------------------------------------------------------------------
# random weights

def make_weights(p):
    """Float64 weights in the HF parameter layout (doc 3.3), in checkpoint
    order.  All formats draw the same numbers from the same seed, so a bf16,
    f32 and mxfp4 model of one seed differ only by rounding.

    Scales are chosen so the residual stream stays O(1) and both sublayers
    matter: projections ~ N(0, 1/in); router logits spread ~2 so top-k varies
    per token; gate/up biases ~ N(0, 4^2) so the gate clamp (above 7) and the
    up clamp (+-7) fire on a few percent of elements; down_proj shrunk to
    offset the (up+1)*glu growth; lm_head ~2/sqrt(H) for logits of a few
    units."""
    rng = np.random.default_rng(p["seed"])
    H, L, V = p["hidden"], p["layers"], p["vocab"]
    nH, nKV, d = p["heads"], p["kv_heads"], p["head_dim"]
    E, I = p["experts"], p["intermediate"]

    def lin(out, inp, gain=1.0):
        return rng.standard_normal((out, inp)) * (gain / math.sqrt(inp))

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    def bias(n, s=0.1):
        return s * rng.standard_normal(n)

    w = [("model.embed_tokens.weight", rng.standard_normal((V, H)))]
    for l in range(L):
        pre = f"model.layers.{l}."
        w += [
            (pre + "input_layernorm.weight", norm(H)),
            (pre + "self_attn.q_proj.weight", lin(nH * d, H)),
            (pre + "self_attn.q_proj.bias", bias(nH * d)),
            (pre + "self_attn.k_proj.weight", lin(nKV * d, H)),
            (pre + "self_attn.k_proj.bias", bias(nKV * d)),
            (pre + "self_attn.v_proj.weight", lin(nKV * d, H)),
            (pre + "self_attn.v_proj.bias", bias(nKV * d)),
            (pre + "self_attn.o_proj.weight", lin(H, nH * d, 1.5)),
            (pre + "self_attn.o_proj.bias", bias(H)),
            (pre + "self_attn.sinks", rng.standard_normal(nH)),
            (pre + "post_attention_layernorm.weight", norm(H)),
            (pre + "mlp.router.weight", lin(E, H, 2.0)),
            (pre + "mlp.router.bias", bias(E, 0.5)),
            (pre + "mlp.experts.gate_up_proj", rng.standard_normal((E, H, 2 * I)) / math.sqrt(H)),
            (pre + "mlp.experts.gate_up_proj_bias", 4.0 * rng.standard_normal((E, 2 * I))),
            (pre + "mlp.experts.down_proj", rng.standard_normal((E, I, H)) * (0.1 / math.sqrt(I))),
            (pre + "mlp.experts.down_proj_bias", bias((E, H))),
        ]
    w += [("model.norm.weight", norm(H)), ("lm_head.weight", lin(V, H, 2.0))]
    return w


def encode(p, weights):
    """-> list of (name, dtype, array) as stored for p['format']."""
    fmt = p["format"]
    out = []
    for name, arr in weights:
        if fmt == "f32":
            out.append((name, "F32", arr))
        elif fmt == "bf16" or not name.endswith(("gate_up_proj", "down_proj")):
            out.append((name, "BF16", arr))
        else:
            # MXFP4 blocks run along the input axis of the [out, in] matrix,
            # i.e. the transpose of the HF parameter layout
            blocks, scales = quantize_mxfp4(arr.transpose(0, 2, 1))
            out.append((name + "_blocks", "U8", blocks))
            out.append((name + "_scales", "U8", scales))
    return out


# ---------------------------------------------------------------------------
# quantized formats (shared/docs/quant-formats.md; encoders in quantfmt.py)

def _quantfmt():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import quantfmt
    return quantfmt


# Written into meta.quantizer; a placeholder version (no real GPTQModel ran)
GPTQMODEL_VERSION = "gptqmodel:0.0.0+gptoss_ckpt"


def _quark_specs(q):
    """Quark: (global spec, attention spec or None when excluded) as the
    writer applies them.  The reference resolves the same from the JSON."""
    qf = _quantfmt()
    weight = {"fp4": qf.QUARK_FP4_WEIGHT, "fp8-tensor": qf.quark_fp8_weight(False),
              "fp8-channel": qf.quark_fp8_weight(True)}[q["weight"]]
    inp = {None: None, "fp8-static": qf.QUARK_FP8_INPUT_STATIC,
           "fp8-dynamic": qf.QUARK_FP8_INPUT_DYNAMIC,
           "fp4-dynamic": qf.QUARK_FP4_INPUT_DYNAMIC}[q["input"]]
    glob = qf.quark_layer_spec(weight, inp)
    attn = {"exclude": None, "same": glob,
            "fp8-static": qf.quark_layer_spec(qf.quark_fp8_weight(False),
                                              qf.QUARK_FP8_INPUT_STATIC)}[q["attn"]]
    return glob, attn


def quant_config_json(p):
    """-> None, or (file, dict): file "config.json" means the dict goes into
    config.json["quantization_config"], otherwise it is a standalone file."""
    q = p.get("quant")
    if q is None or q["method"] == "none":
        return None
    m = q["method"]
    if m == "gptq":
        fmt = q["checkpoint_format"]
        if q["config"] == "autogptq":
            # AutoGPTQ's quantize_config.json: exactly these keys (doc 1.1)
            return "quantize_config.json", {
                "bits": q["bits"], "group_size": q["group_size"], "damp_percent": 0.01,
                "desc_act": q["desc_act"], "static_groups": q["static_groups"], "sym": q["sym"],
                "true_sequential": True, "model_name_or_path": None,
                "model_file_base_name": None, "quant_method": "gptq", "checkpoint_format": fmt}
        # GPTQModel: None/{} values (dynamic, rotation) dropped; inference-free
        # fields under meta; format written under both names (doc 1.1)
        return "config.json", {
            "bits": q["bits"], "group_size": q["group_size"], "desc_act": q["desc_act"],
            "sym": q["sym"], "lm_head": False, "method": "gptq", "quant_method": "gptq",
            "checkpoint_format": fmt, "format": fmt, "pack_dtype": "int32",
            "meta": {"quantizer": [GPTQMODEL_VERSION], "static_groups": q["static_groups"],
                     "true_sequential": True, "damp_percent": 0.01}}
    if m == "awq":
        if q["config"] == "autoawq":
            return "quant_config.json", {"zero_point": q["zero_point"],
                                         "q_group_size": q["group_size"], "w_bit": 4,
                                         "version": "GEMM", "modules_to_not_convert": None}
        return "config.json", {"quant_method": "awq", "zero_point": q["zero_point"],
                               "group_size": q["group_size"], "bits": 4, "version": "gemm",
                               "modules_to_not_convert": None}
    # quark (doc 3.1)
    glob, attn = _quark_specs(q)
    exclude = ["*router*", "lm_head", "model.embed_tokens"]
    layer = {}
    if q["attn"] == "exclude":
        exclude.append("re:.*self_attn.*")
    elif q["attn"] == "fp8-static":
        layer["*self_attn*"] = attn
    return "config.json", {
        "quant_method": "quark", "global_quant_config": glob, "layer_quant_config": layer,
        "layer_type_quant_config": {}, "exclude": exclude,
        "export": dict(_quantfmt().QUARK_EXPORT)}


def linear_modules(p, wd, layer):
    """The Linear modules of one layer in the preset's layout, in checkpoint
    order: (prefix, role, W [out, in] float64, bias [out]).  role is "attn" or
    "expert".  Expert matrices start from HF's gate_up_proj[e].T, the fused
    [2I, H] matrix with INTERLEAVED rows (row 2j = gate j, 2j+1 = up j)."""
    q = p["quant"]
    layout = q.get("layout", "per-expert-fused")
    pre = f"model.layers.{layer}."
    I = p["intermediate"]
    mods = []
    for proj in "qkvo":
        name = pre + f"self_attn.{proj}_proj"
        mods.append((name, "attn", wd[name + ".weight"], wd[name + ".bias"]))
    gu, gub = wd[pre + "mlp.experts.gate_up_proj"], wd[pre + "mlp.experts.gate_up_proj_bias"]
    dn, db = wd[pre + "mlp.experts.down_proj"], wd[pre + "mlp.experts.down_proj_bias"]
    ex = pre + "mlp.experts."
    for e in range(p["experts"]):
        fused, fb = gu[e].T, gub[e]
        down = (dn[e].T, db[e])
        if layout == "defuser":
            # Defuser chunk(2): gate_proj = FIRST half of the interleaved rows,
            # up_proj = the last half -- not the true gate and up (doc 5)
            mods += [(ex + f"{e}.gate_proj", "expert", fused[:I], fb[:I]),
                     (ex + f"{e}.up_proj", "expert", fused[I:], fb[I:]),
                     (ex + f"{e}.down_proj", "expert") + down]
        elif layout == "gptqmodel-old":
            mods += [(ex + f"gate_up.{e}", "expert", fused, fb), (ex + f"down.{e}", "expert") + down]
        elif layout == "per-expert-fused":
            mods += [(ex + f"{e}.gate_up_proj", "expert", fused, fb),
                     (ex + f"{e}.down_proj", "expert") + down]
        else:   # llmc: true gate (even rows) and up (odd rows)
            mods += [(ex + f"experts.{e}.gate_proj", "expert", fused[0::2], fb[0::2]),
                     (ex + f"experts.{e}.up_proj", "expert", fused[1::2], fb[1::2]),
                     (ex + f"experts.{e}.down_proj", "expert") + down]
    return mods


def calibrate_input_amax(p, weights, n_tokens=64):
    """Per-module max |input| of the float model on a seeded random batch,
    recorded by the reference's observer hook.  Names are the reference's:
    dense prefixes and virtual expert names ...experts.E.gate_up / .down; an
    expert sees only the tokens routed to it, so experts get different
    values.  An expert no calibration token reached takes the maximum of its
    layer's experts for that projection."""
    ref = _ref()
    model = ref.Model(config=make_config(dict(p, quant=None)), tensors=dict(weights))
    rng = np.random.default_rng([p["seed"], 0xCA1])
    return record_input_amax(model, p, lambda: model.forward(rng.integers(0, p["vocab"], n_tokens)))


def record_input_amax(model, p, run):
    """Per-module max |input| seen through the reference model's observer
    hook while run() runs it; an expert no token reached takes the maximum
    of its layer's experts for that projection."""
    amax = {}

    def observe(name, x):
        if x.size:
            amax[name] = max(amax.get(name, 0.0), float(np.max(np.abs(x))))

    model.observer = observe
    run()
    for l in range(p["layers"]):
        for proj in ("gate_up", "down"):
            names = [f"model.layers.{l}.mlp.experts.{e}.{proj}" for e in range(p["experts"])]
            fallback = max([amax[n] for n in names if n in amax], default=1.0)
            for n in names:
                amax.setdefault(n, fallback)
    return amax


def _expert_virtual(prefix):
    """Quark expert prefix -> the reference's virtual module name."""
    return re.sub(r"\.(gate_up|down)_proj$", r".\1", prefix)


def encode_quant(p, weights):
    """-> list of (name, dtype, array) for a quantized preset: the producer's
    tensor names, dtypes and shapes.  Router, embeddings, norms, sinks and
    lm_head stay BF16 in every format."""
    qf = _quantfmt()
    q = p["quant"]
    m = q["method"]
    wd = dict(weights)
    glob, attn_spec = _quark_specs(q) if m == "quark" else (None, None)
    amax = None
    if m == "quark" and (q["input"] == "fp8-static" or q["attn"] == "fp8-static"):
        amax = calibrate_input_amax(p, weights)
    stats = {"gptq_v1_zeros_raised": 0}

    def bf16(name):
        return (name, "BF16", wd[name])

    def emit(prefix, role, w, b):
        if m == "gptq":
            rng = np.random.default_rng([p["seed"], zlib.crc32(prefix.encode())])
            r = qf.gptq_quantize(w, q["bits"], q["group_size"], q["sym"], q["desc_act"],
                                 q["static_groups"], q["checkpoint_format"], rng)
            stats["gptq_v1_zeros_raised"] += r["raised"]
            return [(prefix + ".qweight", "I32", r["qweight"]), (prefix + ".qzeros", "I32", r["qzeros"]),
                    (prefix + ".scales", "F16", r["scales"]), (prefix + ".g_idx", "I32", r["g_idx"]),
                    (prefix + ".bias", "F16", b)]
        if m == "awq":
            r = qf.awq_quantize(w, q["group_size"], q["zero_point"])
            return [(prefix + ".qweight", "I32", r["qweight"]), (prefix + ".qzeros", "I32", r["qzeros"]),
                    (prefix + ".scales", "F16", r["scales"]), (prefix + ".bias", "F16", b)]
        spec = (attn_spec if role == "attn" else glob) if m == "quark" else None
        if spec is None:
            return [(prefix + ".weight", "BF16", w), (prefix + ".bias", "BF16", b)]
        out = []
        wt = spec["weight"]
        if wt["dtype"] == "fp4":
            packed, scale = qf.quark_fp4_quantize(w)
            out += [(prefix + ".weight", "U8", packed), (prefix + ".weight_scale", "U8", scale)]
        else:
            codes, scale = qf.quark_fp8_quantize(w, wt["qscheme"] == "per_channel")
            out += [(prefix + ".weight", "F8_E4M3", codes), (prefix + ".weight_scale", "F32", scale)]
        it = spec["input_tensors"]
        if it is not None and not it["is_dynamic"]:
            a = amax[_expert_virtual(prefix)]
            out.append((prefix + ".input_scale", "F32", np.asarray(np.float32(a / 448.0))))
        out.append((prefix + ".bias", "BF16", b))
        return out

    out = [bf16("model.embed_tokens.weight")]
    for l in range(p["layers"]):
        pre = f"model.layers.{l}."
        mods = linear_modules(p, wd, l)
        out.append(bf16(pre + "input_layernorm.weight"))
        for prefix, role, w, b in mods:
            if role == "attn":
                out += emit(prefix, role, w, b)
        out += [bf16(pre + "self_attn.sinks"), bf16(pre + "post_attention_layernorm.weight"),
                bf16(pre + "mlp.router.weight"), bf16(pre + "mlp.router.bias")]
        for prefix, role, w, b in mods:
            if role == "expert":
                out += emit(prefix, role, w, b)
    out += [bf16("model.norm.weight"), bf16("lm_head.weight")]
    encode_quant.last_stats = stats
    return out


# ---------------------------------------------------------------------------
# sharding

def _layer_of(name):
    parts = name.split(".")
    return int(parts[2]) if name.startswith("model.layers.") else None


def assign_shards(tensors, n):
    """Split the checkpoint-ordered tensor list into n contiguous runs of
    roughly equal bytes; then make sure every shard is non-empty and that at
    least one layer straddles two shards (the case a loader keyed on the
    file instead of the index would get wrong)."""
    sizes = [tensor_size(t) for t in tensors]
    if n > len(tensors):
        raise ValueError(f"{n} shards but only {len(tensors)} tensors")
    total = sum(sizes)
    # boundary b: first tensor index of shard s+1
    cuts, acc, s = [], 0, 1
    for i, sz in enumerate(sizes):
        while s < n and acc >= total * s / n:
            cuts.append(i)
            s += 1
        acc += sz
    while len(cuts) < n - 1:
        cuts.append(len(tensors) - (n - 1 - len(cuts)))
    # strictly increasing, inside (0, len)
    for j in range(len(cuts)):
        lo = cuts[j - 1] + 1 if j else 1
        hi = len(tensors) - (len(cuts) - j)
        cuts[j] = min(max(cuts[j], lo), hi)

    def layer_split():
        return any(_layer_of(tensors[c][0]) is not None and
                   _layer_of(tensors[c][0]) == _layer_of(tensors[c - 1][0]) for c in cuts)

    if n > 1 and not layer_split():
        # move the first cut that falls on a layer boundary one tensor forward
        for j, c in enumerate(cuts):
            nxt = cuts[j + 1] if j + 1 < len(cuts) else len(tensors)
            if (_layer_of(tensors[c][0]) is not None and c + 1 < nxt
                    and _layer_of(tensors[c + 1][0]) == _layer_of(tensors[c][0])):
                cuts[j] = c + 1
                break
    assert n == 1 or layer_split(), "could not split a layer across shards"
    shard_of = []
    for i in range(len(tensors)):
        shard_of.append(sum(1 for c in cuts if i >= c))
    return shard_of


def tensor_size(t):
    _, dtype, arr = t
    return int(arr.size) * _ST[dtype][0]


def shard_name(i, n):
    # the converter numbers from 0 and writes count-1 as the "of" number
    return f"model-{i:05d}-of-{n - 1:05d}.safetensors"


# ---------------------------------------------------------------------------
# top level

def write_checkpoint(out_dir, p):
    """Write config.json, generation_config.json and the weights for params p
    (see DEFAULTS) into out_dir.  Returns the config dict."""
    check_params(p)
    os.makedirs(out_dir, exist_ok=True)
    # weight files of an earlier run with another shard count would confuse
    # loaders; only names this tool writes are removed
    for f in os.listdir(out_dir):
        if f in ("model.safetensors", "model.safetensors.index.json") or \
                re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f):
            os.remove(os.path.join(out_dir, f))
    for f in ("quantize_config.json", "quant_config.json"):
        if os.path.exists(os.path.join(out_dir, f)):
            os.remove(os.path.join(out_dir, f))
    cfg = make_config(p)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    qc = quant_config_json(p)
    if qc is not None and qc[0] != "config.json":
        # standalone AutoGPTQ / AutoAWQ file; config.json has no quantization_config
        with open(os.path.join(out_dir, qc[0]), "w") as f:
            json.dump(qc[1], f, indent=2)
            f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(make_generation_config(p), f, indent=2, sort_keys=True)
        f.write("\n")
    tensors = encode_quant(p, make_weights(p)) if p.get("quant") else encode(p, make_weights(p))
    n = p["shards"]
    if n == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
        return cfg
    shard_of = assign_shards(tensors, n)
    weight_map = {}
    for s in range(n):
        part = [t for t, so in zip(tensors, shard_of) if so == s]
        fname = shard_name(s, n)
        write_safetensors(os.path.join(out_dir, fname), part)
        weight_map.update({t[0]: fname for t in part})
    index = {"metadata": {"total_size": sum(tensor_size(t) for t in tensors)},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return cfg


def _ref():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gptoss_ref
    return gptoss_ref


def clamp_fraction(model_dir, tokens):
    """Run the reference forward pass on tokens and return the fraction of
    evaluated expert elements where the gate clamp (gate > limit) and the up
    clamp (|up| > limit) fire: {"gate": f, "up": f}."""
    ref = _ref()
    stats = ref.Stats()
    ref.Model(model_dir).forward(tokens, stats)
    return stats.clamp_fraction()


def report(model_dir, n_tokens=64, seed=0):
    """Clamp fractions and logit magnitudes for a random prompt: a quick
    sanity check that a generated model is in a useful numerical regime."""
    ref = _ref()
    model = ref.Model(model_dir)
    toks = np.random.default_rng(seed).integers(0, model.cfg.vocab, n_tokens)
    stats = ref.Stats()
    logits = model.forward(toks, stats)
    cf = stats.clamp_fraction()
    return {"tokens": n_tokens, "gate_clamped": cf["gate"], "up_clamped": cf["up"],
            "logit_abs_max": float(np.abs(logits).max()),
            "logit_std": float(logits.std()),
            "min_router_gap": stats.min_router_gap,
            "distinct_argmax": int(len(set(np.argmax(logits, axis=1).tolist())))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory (created)")
    ap.add_argument("--preset", choices=list(PRESETS) + list(QUANT_PRESETS))
    ap.add_argument("--list-presets", action="store_true", help="print the preset table and exit")
    ap.add_argument("--report", action="store_true",
                    help="after writing, print clamp fractions and logit magnitudes")
    ap.add_argument("--format", choices=["bf16", "f32", "mxfp4"])
    ap.add_argument("--rope-style", choices=["scaling", "parameters"])
    ap.add_argument("--no-layer-types", dest="layer_types", action="store_false", default=None)
    ap.add_argument("--all-sliding", dest="layer_types", action="store_const", const="all-sliding")
    ap.add_argument("--truncate", action="store_true", default=None)
    for opt in ("shards", "seed", "layers", "hidden", "heads", "kv-heads", "head-dim", "experts",
                "top-k", "intermediate", "vocab", "sliding-window"):
        ap.add_argument("--" + opt, type=int)
    a = ap.parse_args(argv)

    if a.list_presets:
        cols = ["layers", "hidden", "heads", "kv_heads", "head_dim", "experts", "top_k",
                "intermediate", "vocab", "sliding_window", "format", "shards", "seed"]
        w = max(map(len, list(PRESETS) + list(QUANT_PRESETS))) + 1
        print("preset".ljust(w) + " ".join(c[:8].rjust(8) for c in cols) + "  quant")
        for name in list(PRESETS) + list(QUANT_PRESETS):
            p = preset_params(name)
            q = p["quant"]
            qtext = "" if q is None else "  " + " ".join(f"{k}={v}" for k, v in q.items())
            print(name.ljust(w) + " ".join(str(p[c]).rjust(8) for c in cols) + qtext)
        return 0
    if not a.out:
        ap.error("--out is required")
    p = preset_params(a.preset) if a.preset else dict(DEFAULTS)
    for key in DEFAULTS:
        v = getattr(a, key, None)
        if v is not None:
            p[key] = v
    try:
        write_checkpoint(a.out, p)
    except (ValueError, OSError) as e:
        print(f"gptoss_ckpt: {e}", file=sys.stderr)
        return 1
    if a.report:
        for k, v in report(a.out).items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
