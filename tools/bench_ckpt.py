#!/usr/bin/python3
"""Writer of the GPT-OSS-shaped benchmark checkpoints of issue 7.

    /usr/bin/python3 tools/bench_ckpt.py --format mxfp4|gptq|quark --out DIR
        [--preset issue7|20b|120b] [--layers N] [--experts N] [--top-k K] [--hidden H] [--intermediate I]
        [--heads N] [--kv-heads N] [--head-dim D] [--vocab V]
        [--sliding-window W] [--seed S] [--jobs N] [--selftest]

Default sizes (issue 7's): hidden 2048, 12 layers, 32 experts, top-4,
intermediate 2048, 32 query heads and 8 KV heads of 64, vocab 32000, sliding
window 128 on alternate layers (even layers slide). --preset 20b and 120b
give the released models' shapes (gpt-oss-20b: hidden 2880, 24 layers, 32
experts top-4, 64 query / 8 KV heads, vocab 201,088; mxfp4 13.75 GB;
gpt-oss-120b: 36 layers, 128 experts).  Formats, each in its real
producer's layout (names, dtypes, shapes and JSON as tools/gptoss_ckpt.py
writes them for its tests):

  mxfp4  native gpt-oss (Hugging Face): experts' gate_up_proj_blocks/_scales,
         down_proj_blocks/_scales (U8), biases and everything else BF16.
  gptq   GPTQModel int4, group 32, sym, desc_act false, checkpoint_format
         gptq (v1), Defuser expert layout (experts.E.gate_proj/up_proj/
         down_proj), attention quantized too, router/embeddings/head BF16.
         The codes are plain round-to-nearest (GPTQModel's scale/zero rule,
         no Hessian updates): right for a speed checkpoint, not a real GPTQ
         run.
  quark  AMD Quark W4A8: MXFP4 weights (per_group 32, e8m0, floor scale)
         and FP8 e4m3 static per-tensor input scales, per-expert fused
         experts.E.gate_up_proj / down_proj, attention excluded (BF16).
         The input scales are not calibrated (a float forward of this size is
         out of reach in numpy): each is a fixed activation bound (8 for
         gate_up inputs, 64 for down inputs, the SwiGLU clamp's range) times a
         seeded +-10% jitter, / 448, so every expert has its own scale.

Weights are random with the scales of gptoss_ckpt.make_weights (projections
~N(0, 1/in), router gain 2, gate/up biases ~N(0, 16) so the clamps fire,
down_proj shrunk), so activations stay finite through all layers.

It streams: the safetensors header is computed from the shapes first, then
each job (one dense tensor or a row chunk of one, one expert's matrix or one
quantized module) draws its own seeded numbers, encodes them and writes them
at their offset with pwrite, in --jobs worker processes.  Nothing bigger than
one expert matrix is held, and the bytes do not depend on the job order or
count: the output is deterministic for a seed.  The encoders are vectorised
re-implementations of gptoss_ckpt.quantize_mxfp4, quantfmt.gptq_quantize and
quantfmt.quark_fp4_quantize; --selftest checks them bit for bit against those
on random and tie-crafted matrices.

Needs only numpy (run with /usr/bin/python3).
"""

import argparse
import json
import math
import multiprocessing
import os
import resource
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptoss_ckpt  # noqa: E402
import quantfmt  # noqa: E402

BENCH = dict(layers=12, hidden=2048, heads=32, kv_heads=8, head_dim=64, experts=32, top_k=4,
             intermediate=2048, vocab=32000, sliding_window=128, seed=7)

# --preset: issue 7's bench shape (the default), and the released models'
# shapes (their config.json: hidden 2880, intermediate 2880, 64 query and
# 8 KV heads of 64, vocab 201,088, window 128; 24 layers and 32 experts for
# gpt-oss-20b, 36 and 128 for gpt-oss-120b, top-4 both)
SHAPES = {
    "issue7": BENCH,
    "20b": dict(BENCH, layers=24, hidden=2880, heads=64, kv_heads=8, head_dim=64, experts=32,
                intermediate=2880, vocab=201088),
    "120b": dict(BENCH, layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, experts=128,
                 intermediate=2880, vocab=201088),
}

GPTQ_QUANT = dict(method="gptq", bits=4, group_size=32, sym=True, checkpoint_format="gptq",
                  desc_act=False, static_groups=False, config="gptqmodel", layout="defuser")
QUARK_QUANT = dict(method="quark", weight="fp4", input="fp8-static", attn="exclude")

# rows per job for the big dense tensors (embedding, lm_head): 8 Mi values
CHUNK_VALUES = 8 << 20


def params(fmt, preset="issue7", **sizes):
    p = dict(gptoss_ckpt.DEFAULTS)
    p.update(SHAPES[preset])
    p.update({k: v for k, v in sizes.items() if v is not None})
    p["shards"] = 1
    if fmt == "mxfp4":
        p["format"], p["quant"] = "mxfp4", None
    else:
        p["format"] = "bf16"
        p["quant"] = dict(GPTQ_QUANT if fmt == "gptq" else QUARK_QUANT)
    gptoss_ckpt.check_params(p)
    return p


# ---------------------------------------------------------------------------
# fast encoders (bit-identical to the tools' reference encoders; --selftest)

# e2m1 midpoints between codes c and c+1; a tie goes to the even code, so
# "x > mid" when c is even and "x >= mid" when c is odd
_MIDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True),
         (5.0, False))


def e2m1(x, neg):
    """x >= 0 scaled magnitudes (float32/64), neg: sign mask -> uint8 codes,
    nearest e2m1 value, ties to even, saturating at 6 (code 7)."""
    code = np.zeros(x.shape, np.uint8)
    for mid, ge in _MIDS:
        code += (x >= mid) if ge else (x > mid)
    code |= neg.view(np.uint8) << 3
    return code


def mxfp4_encode(w, rule):
    """w [N, K] float32 (K % 32 == 0) -> (packed u8 [N, K/2], scales u8 [N, K/32]).
    rule "hf": smallest 2^e with amax <= 6*2^e (gptoss_ckpt.quantize_mxfp4);
    "quark": 2^(floor(log2 amax) - 2) (quantfmt.quark_fp4_quantize)."""
    n, k = w.shape
    g = w.reshape(n, k // 32, 32)
    a = np.abs(g)
    amax = a.max(axis=-1)
    f, ex = np.frexp(amax)            # amax = f * 2^ex, f in [0.5, 1)
    if rule == "hf":
        e = np.where(f <= 0.75, ex - 3, ex - 2)
    else:
        e = ex - 3
    e = np.clip(np.where(amax > 0, e, 0), -127, 127).astype(np.int32)
    a *= np.ldexp(np.float32(1), -e).astype(np.float32)[..., None]   # exact: power of two
    codes = e2m1(a, g < 0).reshape(n, k)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), (e + 127).astype(np.uint8)


def gptq_encode(w, gs):
    """4-bit sym GPTQ v1 (desc_act false) of w [N, K] float32 -> qweight
    [K/8, N] i32, qzeros [G, N/8] i32, scales [G, N] f16, g_idx [K] i32,
    as quantfmt.gptq_quantize(w, 4, gs, True, False, False, "gptq")."""
    n, k = w.shape
    if k % gs:
        raise ValueError("bench GPTQ wants in_features % group_size == 0")
    g = w.reshape(n, k // gs, gs).astype(np.float64)
    xmin, xmax = quantfmt.group_range(g, True)
    s16 = ((xmax - xmin) / 15).astype(np.float16)
    if np.any(s16 <= 0) or not np.all(np.isfinite(s16)):
        raise ValueError("GPTQ scale not representable in float16")
    g /= s16.astype(np.float64)[..., None]
    g += 8
    codes = np.clip(np.round(g), 0, 15).astype(np.uint32).reshape(n, k)
    c = codes.T.reshape(k // 8, 8, n)
    qweight = np.zeros((k // 8, n), np.uint32)
    for i in range(8):
        qweight |= c[:, i, :] << np.uint32(4 * i)
    qzeros = np.full((k // gs, n // 8), 0x77777777, np.uint32)   # zero 8, stored as 7
    return (qweight.view(np.int32), qzeros.view(np.int32), np.ascontiguousarray(s16.T),
            (np.arange(k) // gs).astype(np.int32))


def bf16(x):
    return gptoss_ckpt.to_bf16_bits(x).astype("<u2").tobytes()


# ---------------------------------------------------------------------------
# the tensors: name -> (dtype, shape), and the jobs that fill them

_ITEM = {"F32": 4, "I32": 4, "BF16": 2, "F16": 2, "U8": 1}


def rng_for(seed, name, *extra):
    return np.random.default_rng([seed, zlib.crc32(name.encode()), *extra])


def normal(seed, name, shape, std, *extra):
    x = rng_for(seed, name, *extra).standard_normal(shape, dtype=np.float32)
    x *= np.float32(std)
    return x


class Plan:
    """Tensors (for the header) and jobs (to fill them)."""

    def __init__(self, p, fmt):
        self.p, self.fmt = p, fmt
        self.tensors = {}   # name -> (dtype, shape)
        self.jobs = []      # (kind, args)
        self.build()

    def add(self, name, dtype, shape):
        self.tensors[name] = (dtype, list(shape))

    def dense(self, name, shape, kind, s=1.0):
        """BF16 tensor: kind "normal" (std s), "norm" (1 + 0.1 N), "bias" (s N)."""
        self.add(name, "BF16", shape)
        rows = shape[0]
        per = max(1, CHUNK_VALUES // max(1, int(np.prod(shape[1:]))))
        for c, r0 in enumerate(range(0, rows, per)):
            self.jobs.append(("dense", (name, tuple(shape), kind, s, r0, min(rows, r0 + per), c)))

    def build(self):
        p, fmt = self.p, self.fmt
        H, L, V = p["hidden"], p["layers"], p["vocab"]
        nH, nKV, d = p["heads"], p["kv_heads"], p["head_dim"]
        E, I = p["experts"], p["intermediate"]
        self.dense("model.embed_tokens.weight", (V, H), "normal", 1.0)
        for l in range(L):
            pre = f"model.layers.{l}."
            self.dense(pre + "input_layernorm.weight", (H,), "norm")
            for proj, out, inp, gain in (("q", nH * d, H, 1.0), ("k", nKV * d, H, 1.0),
                                         ("v", nKV * d, H, 1.0), ("o", H, nH * d, 1.5)):
                name = pre + f"self_attn.{proj}_proj"
                if fmt == "gptq":
                    self.module(name, out, inp, gain / math.sqrt(inp), 0.1, "attn")
                else:
                    self.dense(name + ".weight", (out, inp), "normal", gain / math.sqrt(inp))
                    self.dense(name + ".bias", (out,), "bias", 0.1)
            self.dense(pre + "self_attn.sinks", (nH,), "normal", 1.0)
            self.dense(pre + "post_attention_layernorm.weight", (H,), "norm")
            self.dense(pre + "mlp.router.weight", (E, H), "normal", 2.0 / math.sqrt(H))
            self.dense(pre + "mlp.router.bias", (E,), "bias", 0.5)
            ex = pre + "mlp.experts."
            gu_std, dn_std = 1.0 / math.sqrt(H), 0.1 / math.sqrt(I)
            if fmt == "mxfp4":
                for proj, rows, cols, std in (("gate_up_proj", 2 * I, H, gu_std),
                                              ("down_proj", H, I, dn_std)):
                    self.add(ex + proj + "_blocks", "U8", (E, rows, cols // 32, 16))
                    self.add(ex + proj + "_scales", "U8", (E, rows, cols // 32))
                    for e in range(E):
                        self.jobs.append(("hf_expert", (ex + proj, rows, cols, std, e)))
                self.dense(ex + "gate_up_proj_bias", (E, 2 * I), "bias", 4.0)
                self.dense(ex + "down_proj_bias", (E, H), "bias", 0.1)
            elif fmt == "gptq":
                # Defuser: gate_proj / up_proj are the two halves of the
                # interleaved fused matrix (random here, so drawn apart)
                for e in range(E):
                    self.module(ex + f"{e}.gate_proj", I, H, gu_std, 4.0, "expert")
                    self.module(ex + f"{e}.up_proj", I, H, gu_std, 4.0, "expert")
                    self.module(ex + f"{e}.down_proj", H, I, dn_std, 0.1, "expert")
            else:
                for e in range(E):
                    self.module(ex + f"{e}.gate_up_proj", 2 * I, H, gu_std, 4.0, "expert", 8.0)
                    self.module(ex + f"{e}.down_proj", H, I, dn_std, 0.1, "expert", 64.0)
        self.dense("model.norm.weight", (H,), "norm")
        self.dense("lm_head.weight", (V, H), "normal", 2.0 / math.sqrt(H))

    def module(self, prefix, out, inp, std, bias_s, role, act_bound=None):
        if self.fmt == "gptq":
            gs = self.p["quant"]["group_size"]
            self.add(prefix + ".qweight", "I32", (inp // 8, out))
            self.add(prefix + ".qzeros", "I32", (inp // gs, out // 8))
            self.add(prefix + ".scales", "F16", (inp // gs, out))
            self.add(prefix + ".g_idx", "I32", (inp,))
            self.add(prefix + ".bias", "F16", (out,))
        else:
            self.add(prefix + ".weight", "U8", (out, inp // 2))
            self.add(prefix + ".weight_scale", "U8", (out, inp // 32))
            self.add(prefix + ".input_scale", "F32", ())
            self.add(prefix + ".bias", "BF16", (out,))
        self.jobs.append(("module", (prefix, out, inp, std, bias_s, act_bound)))

    def layout(self):
        """Offsets in write_safetensors' order (wider dtypes first, then by
        name): every tensor aligned to its item size."""
        order = sorted(self.tensors, key=lambda n: (-_ITEM[self.tensors[n][0]], n))
        header = {"__metadata__": {"format": "pt"}}
        off = 0
        self.offsets = {}
        for name in order:
            dtype, shape = self.tensors[name]
            size = int(np.prod(shape, dtype=np.int64)) * _ITEM[dtype]
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
            self.offsets[name] = off
            off += size
        hj = json.dumps(header, separators=(",", ":")).encode()
        hj += b" " * (-len(hj) % 8)
        self.base = 8 + len(hj)
        self.head = len(hj).to_bytes(8, "little") + hj
        self.total = self.base + off
        return self.total


# ---------------------------------------------------------------------------
# jobs (run in the workers; the plan and the file come through fork)

_PLAN = None
_FD = None


def _put(name, data, at=0):
    b = data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes()
    want = _PLAN.base + _PLAN.offsets[name] + at
    n = os.pwrite(_FD, b, want)
    if n != len(b):
        raise OSError(f"short write of {name}")


def _job(i):
    kind, a = _PLAN.jobs[i]
    seed = _PLAN.p["seed"]
    if kind == "dense":
        name, shape, how, s, r0, r1, c = a
        sub = (r1 - r0,) + shape[1:]
        x = normal(seed, name, sub, 0.1 if how == "norm" else s, c)
        if how == "norm":
            x += 1.0
        row = int(np.prod(shape[1:], dtype=np.int64)) * 2
        _put(name, bf16(x), r0 * row)
    elif kind == "hf_expert":
        base, rows, cols, std, e = a
        w = normal(seed, base, (rows, cols), std, e)
        blocks, scales = mxfp4_encode(w, "hf")
        _put(base + "_blocks", blocks, e * blocks.size)
        _put(base + "_scales", scales, e * scales.size)
    else:
        prefix, out, inp, std, bias_s, act_bound = a
        w = normal(seed, prefix, (out, inp), std, 0)
        b = normal(seed, prefix, (out,), bias_s, 1)
        if _PLAN.fmt == "gptq":
            qw, qz, sc, gi = gptq_encode(w, _PLAN.p["quant"]["group_size"])
            _put(prefix + ".qweight", qw.astype("<i4"))
            _put(prefix + ".qzeros", qz.astype("<i4"))
            _put(prefix + ".scales", sc.astype("<f2"))
            _put(prefix + ".g_idx", gi.astype("<i4"))
            _put(prefix + ".bias", b.astype("<f2"))
        else:
            packed, scales = mxfp4_encode(w, "quark")
            _put(prefix + ".weight", packed)
            _put(prefix + ".weight_scale", scales)
            jitter = 1.0 + 0.1 * (2.0 * rng_for(seed, prefix, 2).random() - 1.0)
            _put(prefix + ".input_scale", np.asarray(act_bound * jitter / 448.0, "<f4"))
            _put(prefix + ".bias", bf16(b))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def write(out_dir, fmt, p, jobs):
    global _PLAN, _FD
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f in ("model.safetensors", "model.safetensors.index.json", "quantize_config.json",
                 "quant_config.json") or (f.startswith("model-") and f.endswith(".safetensors")):
            os.remove(os.path.join(out_dir, f))
    cfg = gptoss_ckpt.make_config(p)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gptoss_ckpt.make_generation_config(p), f, indent=2, sort_keys=True)
        f.write("\n")
    plan = Plan(p, fmt)
    total = plan.layout()
    tmp = os.path.join(out_dir, "model.safetensors.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, plan.head, 0)
        os.ftruncate(fd, total)
        _PLAN, _FD = plan, fd
        order = list(range(len(plan.jobs)))
        worker_rss = 0
        if jobs > 1:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(jobs) as pool:
                for r in pool.imap_unordered(_job, order, chunksize=1):
                    worker_rss = max(worker_rss, r)
        else:
            for i in order:
                _job(i)
    finally:
        os.close(fd)
        _PLAN, _FD = None, None
    os.replace(tmp, os.path.join(out_dir, "model.safetensors"))
    return total, len(plan.jobs), worker_rss


# ---------------------------------------------------------------------------
# self-test: the fast encoders against the tools' reference encoders


def selftest(seed=1):
    rng = np.random.default_rng(seed)
    mats = []
    for n, k, std in ((8, 64, 1.0), (16, 256, 0.02), (24, 96, 7.0), (8, 128, 1e-3)):
        mats.append(rng.standard_normal((n, k)).astype(np.float32) * np.float32(std))
    # exact ties of every e2m1 midpoint and the saturation edge at several scales
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 0.0])
    t = np.zeros((16, 64), np.float32)
    for r in range(16):
        sc = 2.0 ** (r - 8)
        vals = rng.choice(mids, 64) * sc * rng.choice([-1, 1], 64)
        vals[::32] = 6.0 * sc   # make each group's amax a clean power-of-two multiple
        t[r] = vals
    t[3] = 0.0                  # an all-zero row
    t[5, :32] = 0.0             # an all-zero group
    mats.append(t)
    bad = []
    for i, w in enumerate(mats):
        w64 = w.astype(np.float64)
        blk, sc = mxfp4_encode(w, "hf")
        rb, rs = gptoss_ckpt.quantize_mxfp4(w64)
        if not (np.array_equal(blk, rb.reshape(blk.shape)) and np.array_equal(sc, rs)):
            bad.append(f"hf mxfp4 #{i}")
        qp, qs = mxfp4_encode(w, "quark")
        rp, rsq = quantfmt.quark_fp4_quantize(w64)
        if not (np.array_equal(qp, rp) and np.array_equal(qs, rsq)):
            bad.append(f"quark mxfp4 #{i}")
        if w.shape[0] % 8 == 0:
            qw, qz, s, gi = gptq_encode(w, 32)
            r = quantfmt.gptq_quantize(w64, 4, 32, True, False, False, "gptq",
                                       np.random.default_rng(0))
            if not (np.array_equal(qw, r["qweight"]) and np.array_equal(qz, r["qzeros"])
                    and np.array_equal(s.view(np.uint16), r["scales"].view(np.uint16))
                    and np.array_equal(gi, r["g_idx"])):
                bad.append(f"gptq #{i}")
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", choices=["mxfp4", "gptq", "quark"])
    ap.add_argument("--out", help="output directory (created)")
    ap.add_argument("--preset", choices=sorted(SHAPES), default="issue7",
                    help="the shape: issue 7's bench shape (default), gpt-oss-20b's or -120b's; "
                         "the size flags below override it")
    for opt in ("layers", "hidden", "heads", "kv-heads", "head-dim", "experts", "top-k",
                "intermediate", "vocab", "sliding-window", "seed"):
        ap.add_argument("--" + opt, type=int)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="worker processes (default: available CPUs)")
    ap.add_argument("--selftest", action="store_true",
                    help="check the fast encoders against the reference ones, then exit")
    a = ap.parse_args(argv)
    if a.selftest:
        bad = selftest()
        print("selftest: " + ("ok" if not bad else "MISMATCH " + ", ".join(bad)))
        return 1 if bad else 0
    if not a.format or not a.out:
        ap.error("--format and --out are required")
    sizes = {k.replace("-", "_"): getattr(a, k.replace("-", "_"))
             for k in ("layers", "hidden", "heads", "kv-heads", "head-dim", "experts", "top-k",
                       "intermediate", "vocab", "sliding-window", "seed")}
    try:
        p = params(a.format, a.preset, **sizes)
        if p["hidden"] % 32 or p["intermediate"] % 32 or (p["heads"] * p["head_dim"]) % 32:
            raise ValueError("hidden, intermediate and heads*head_dim must be multiples of 32")
        t0 = time.time()
        total, n_jobs, worker_rss = write(a.out, a.format, p, max(1, a.jobs))
    except (ValueError, OSError) as e:
        print(f"bench_ckpt: {e}", file=sys.stderr)
        return 1
    dt = time.time() - t0
    main_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss = f"peak RSS {main_rss / 1024:.0f} MiB"
    if a.jobs > 1:
        rss += f" (main), largest worker {worker_rss / 1024:.0f} MiB"
    print(f"bench_ckpt: {a.format} -> {a.out}/model.safetensors: {total / 1e9:.3f} GB, "
          f"{n_jobs} jobs on {max(1, a.jobs)} processes in {dt:.1f} s; {rss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
