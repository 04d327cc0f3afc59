#!/usr/bin/python3
"""Quantize the default model (models/default/bf16) into every shipped format.

From the bf16 checkpoint that tools/train_default.py wrote, this writes, each
with the very writers the tests use (tools/gptoss_ckpt.py and
tools/quantfmt.py: the producers' tensor names, dtypes, packing and JSON):

  mxfp4       native gpt-oss MXFP4 (quant_method "mxfp4"): expert
              gate_up/down as *_blocks/*_scales (gptoss_ckpt.encode, format
              mxfp4); attention, router, embeddings, head stay BF16, as
              modules_to_not_convert says.
  gptq-int4   GPTQ 4-bit, group 32, symmetric, desc_act false, checkpoint
              format "gptq" (v1), GPTQModel's config and its Defuser expert
              layout (experts.E.gate_proj / up_proj = the two halves of the
              interleaved gate_up, down_proj); quantized: q/k/v/o and every
              expert projection; router, embeddings, head, norms stay BF16.
              The codes come from the real GPTQ algorithm (below), not
              rounding.
  awq-int4    AWQ GEMM 4-bit, group 32, zero point, transformers-style
              quantization_config, the same Defuser expert layout; same
              modules as GPTQ.  Weights are AutoAWQ's activation-aware
              scaled and clipped ones (below), then rounded by
              quantfmt.awq_quantize as AutoAWQ's packer does.
  quark-w4a8  AMD Quark W4A8: MXFP4 weights (per_group 32, e8m0) with FP8
              e4m3 static per-tensor input scales, the expert projections
              only (attention, router, embeddings and head excluded: the
              amd/gpt-oss-*-w-mxfp4-a-fp8 shape, gptoss_ckpt's
              "quark-w4a8" preset); Quark's per-expert fused layout, each
              expert with its own input_scale = max|x| / 448 over the
              calibration text.

Calibration: 128 rows of 256 tokens drawn (seeded) from the training split
the model was trained on -- KJV chapters and harmony chat samples, never the
held-out chapters -- tokenized with the model's own tokenizer.  Needs the
KJV text (apt-get install -y bible-kjv, or --kjv-text FILE) and numpy only:
every forward pass is tools/gptoss_ref.py's float64 reference.

GPTQ (IST-DASLab gptq.py / AutoGPTQ fasterquant, as GPTQModel runs it):
layer by layer, modules in GPTQModel's order [q,k,v] -> [o] -> [experts'
gate/up] -> [experts' down], each group's inputs recorded with everything
before it already quantized (true_sequential, quantized outputs feed the
next layer).  Per Linear: H = 2/n X^T X over its calibration inputs (an
expert sees only the tokens routed to it); dead columns (H_ii = 0) zeroed;
damping 0.01 * mean(diag H); H^-1 by Cholesky, then its upper Cholesky
factor; columns quantized left to right in blocks of 128, each column's
error (w - q) / [H^-1]_ii fed back into the columns after it, lazily
across blocks; the scale/zero of each group of 32 columns computed (as the
original does) from the weights when its first column comes up: sym, scale
= max(|min|, |max|) * 2 / 15, zero 8, the scale rounded to float16 at once
so the error feedback sees the stored grid.  An expert no calibration
token reached gets H = I (plain rounding).

AWQ (AutoAWQ AwqQuantizer, duo_scaling, zero point): per layer, on the
float model's inputs:
  - q/k/v, previous op input_layernorm, inspected module = the attention
    block: x_mean = mean |x| per input channel, w_mean = mean over rows of
    |W| / (group max |W|) (q, k, v stacked); for ratio r = 0, 1/20, ...,
    19/20: s = x_mean^r / (w_mean^(1-r) + 1e-4), clamped >= 1e-4, divided
    by sqrt(max s * min s); loss = mean squared difference of the block's
    output with W -> Q(W s) / s; the best s is folded in: q/k/v columns *
    s, input_layernorm.weight / s.
  - o_proj: AutoAWQ scales it against v_proj only when their shapes are
    equal; with GQA (v [nKV*d, H] vs o [H, nH*d]) they are not: no scale.
  - experts' gate_up (all experts together), previous op
    post_attention_layernorm, inspected module = the whole MoE block
    (router + experts): same search; s folded into every expert's gate_up
    rows and post_attention_layernorm.weight / s -- and into the router's
    weight (which stays BF16), so the routing is unchanged (AutoAWQ's
    Mixtral recipe leaves the router out, which would feed it x / s).
  - experts' down_proj: its input is (clamp(up)+1) * glu(clamp(gate)), not
    a linear function of gate_up's output, so no scale can be folded
    (AutoAWQ folds Mixtral's into w3; gpt-oss's clamps and +1 forbid it).
  - clipping (auto_clip): for every quantized Linear but q and k, per
    output row and group of 32, the max |w| shrunk by 0..45% in steps of
    5% minimizing the output error on 512 of its (scaled) inputs.

    /usr/bin/python3 tools/quantize_default.py --model models/default/bf16 \\
        --out models/default [--formats mxfp4,gptq-int4,awq-int4,quark-w4a8]
        [--calib-rows 128] [--calib-seq 256] [--kjv-text FILE] [--no-eval]

Without --no-eval each written variant is scored on the held-out text
(OUT/heldout.txt) by the numpy reference (no daemon involved), so the
daemon's numbers (tools/perplexity.py) can be checked against them.
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import gptoss_ckpt  # noqa: E402
import gptoss_ref  # noqa: E402
import perplexity  # noqa: E402
import quantfmt  # noqa: E402
import train_default  # noqa: E402  (corpus and tokenizer; torch is only imported to train)

FORMATS = ["mxfp4", "gptq-int4", "awq-int4", "quark-w4a8"]
GROUP = 32
CALIB_SEED = 2024

# gptoss_ckpt quant descriptions (see QUANT_PRESETS there) of the shipped formats
QUANT = {
    "gptq-int4": dict(method="gptq", bits=4, group_size=GROUP, sym=True, checkpoint_format="gptq",
                      desc_act=False, static_groups=False, config="gptqmodel", layout="defuser"),
    "awq-int4": dict(method="awq", group_size=GROUP, zero_point=True, config="transformers",
                     layout="defuser"),
    "quark-w4a8": dict(method="quark", weight="fp4", input="fp8-static", attn="exclude"),
}


# ---------------------------------------------------------------------------
# the bf16 model

def load_bf16(model_dir):
    """-> (gptoss_ckpt params p, weights [(name, float64)] in checkpoint
    order, config.json dict)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("quantization_config"):
        raise SystemExit(f"{model_dir}: not an unquantized checkpoint")
    p = dict(gptoss_ckpt.DEFAULTS)
    p.update(layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"],
             heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
             head_dim=cfg["head_dim"], experts=cfg["num_local_experts"],
             top_k=cfg["num_experts_per_tok"], intermediate=cfg["intermediate_size"],
             vocab=cfg["vocab_size"], sliding_window=cfg["sliding_window"], format="bf16")
    # the writer must regenerate this very config (else p is wrong)
    want = gptoss_ckpt.make_config(p)
    for k in ("eos_token_id", "pad_token_id"):
        want[k] = cfg[k]
    if want != cfg:
        diff = sorted(k for k in set(want) | set(cfg) if want.get(k) != cfg.get(k))
        raise SystemExit(f"{model_dir}/config.json differs from gptoss_ckpt.make_config in {diff}")
    ck = gptoss_ref.Checkpoint(model_dir)
    weights = [(n, ck.get(n, shape)) for n, shape in train_default.hf_param_shapes(p, p["vocab"])]
    return p, weights, cfg


def variant_config(p, base_cfg):
    cfg = gptoss_ckpt.make_config(p)
    for k in ("eos_token_id", "pad_token_id"):
        cfg[k] = base_cfg[k]
    return cfg


def write_variant(out_dir, p, base_cfg, tensors, src_dir):
    """config.json (+ the quantization_config the writer makes),
    generation_config.json and tokenizer.json from the bf16 folder, and
    model.safetensors."""
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    gptoss_ckpt.check_params(p)
    qc = gptoss_ckpt.quant_config_json(p)
    if qc is not None and qc[0] != "config.json":
        raise SystemExit("standalone quant config files are not used by the shipped formats")
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(variant_config(p, base_cfg), f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("generation_config.json", "tokenizer.json"):
        shutil.copyfile(os.path.join(src_dir, name), os.path.join(tmp, name))
    gptoss_ckpt.write_safetensors(os.path.join(tmp, "model.safetensors"), tensors)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)


# ---------------------------------------------------------------------------
# calibration data

def calibration_rows(tok, n_rows, seq, kjv_text=None):
    """n_rows rows of seq tokens from the training split (documents and chat
    samples mixed as in training), seeded."""
    td = train_default
    chapters = td.parse_chapters(td.read_kjv(kjv_text))
    train_ch, _ = td.split_chapters(chapters)
    docs = [td.chapter_text(c) for c in train_ch]
    verses = [v for c in train_ch for v in c[2]]
    chats = td.make_chats(1000, CALIB_SEED, verses, td.topic_index(train_ch))
    segs = td.encode_segments(tok, docs, chats)
    x, _ = td.epoch_rows(segs, seq - 1, CALIB_SEED)
    pick = np.random.default_rng([td.SEED, CALIB_SEED]).choice(len(x), n_rows, replace=False)
    return [x[i].astype(np.int64) for i in sorted(pick)]


# ---------------------------------------------------------------------------
# layer-wise forward on the reference model

class Runner:
    """Runs the reference model's blocks layer by layer over all calibration
    rows at once (a [B, T, H] array), with an observer that records the
    input of every Linear (reference names: dense prefixes, experts
    model.layers.L.mlp.experts.E.gate_up / .down).  The MoE block is
    gptoss_ref.Model.moe itself (per token); attention is the reference's
    formula batched over the rows with matmul instead of einsum (checked
    against gptoss_ref.Model.attention at start)."""

    def __init__(self, model, rows):
        self.m = model
        self.rows = np.stack(rows)
        self.cfg = model.cfg
        self.rope = {}
        x = self.embed()[:2]
        lw = model.layers[0]
        h = self.norm1(lw, x)
        mine = self.attn(0, lw, h)
        for b in range(len(x)):
            ref = model.attention(lw, h[b], self.cfg.sliding[0], *self.tables(h.shape[1]))
            if not np.allclose(mine[b], ref, rtol=0, atol=1e-9 * max(1.0, np.abs(ref).max())):
                raise AssertionError("batched attention differs from gptoss_ref's")

    def tables(self, T):
        if T not in self.rope:
            self.rope[T] = gptoss_ref.rope_tables(self.cfg, T)
        return self.rope[T]

    def embed(self):
        return self.m.embed[self.rows]

    @contextlib.contextmanager
    def record(self, keep=None):
        """Collect Linear inputs (names in keep, or all) as 2-D arrays."""
        got = {}

        def obs(name, x):
            if keep is None or name in keep:
                got.setdefault(name, []).append(np.array(x).reshape(-1, x.shape[-1]))

        old = self.m.observer
        self.m.observer = obs
        try:
            yield got
        finally:
            self.m.observer = old

    def attn(self, l, lw, h):
        """gptoss_ref.Model.attention on every row of h [B, T, H]."""
        cfg, m = self.cfg, self.m
        B, T, _ = h.shape
        d, nH, nKV = cfg.head_dim, cfg.n_heads, cfg.n_kv
        cos, sin = self.tables(T)
        nm, aq = lw["names"], lw["aq"]
        q = gptoss_ref.apply_rope(m.linear(nm["q"], h, lw["wq"].T, lw["bq"], aq["q"]).reshape(B, T, nH, d),
                                  cos, sin)
        k = gptoss_ref.apply_rope(m.linear(nm["k"], h, lw["wk"].T, lw["bk"], aq["k"]).reshape(B, T, nKV, d),
                                  cos, sin)
        v = m.linear(nm["v"], h, lw["wv"].T, lw["bv"], aq["v"]).reshape(B, T, nKV, d)
        k = np.repeat(k, nH // nKV, axis=2).transpose(0, 2, 3, 1)       # [B, nH, d, T]
        v = np.repeat(v, nH // nKV, axis=2).transpose(0, 2, 1, 3)       # [B, nH, T, d]
        s = np.matmul(q.transpose(0, 2, 1, 3), k) * d ** -0.5           # [B, nH, T, T]
        i = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        allowed = j <= i
        if cfg.sliding[l]:
            allowed &= (i - j) < int(cfg.window)
        s = np.where(allowed, s, -np.inf)
        sink = lw["sinks"][None, :, None, None]
        mx = np.maximum(s.max(axis=-1, keepdims=True), sink)
        e = np.exp(s - mx)
        p = e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - mx))
        o = np.matmul(p, v).transpose(0, 2, 1, 3).reshape(B, T, nH * d)
        return m.linear(nm["o"], o, lw["wo"].T, lw["bo"], aq["o"])

    def norm1(self, lw, x):
        return gptoss_ref.rms_norm(x, lw["ln1"], self.cfg.eps)

    def norm2(self, lw, x):
        return gptoss_ref.rms_norm(x, lw["ln2"], self.cfg.eps)

    def moe(self, lw, h):
        """gptoss_ref.Model.moe on all tokens at once (it is per token)."""
        return self.m.moe(lw, h.reshape(-1, h.shape[-1]), None).reshape(h.shape)


def ref_model(p, weights, base_cfg):
    cfg = dict(base_cfg)
    return gptoss_ref.Model(config=cfg, tensors=dict(weights))


# ---------------------------------------------------------------------------
# GPTQ

def hessian(xs, k):
    """2/n sum x x^T over the rows of the arrays in xs ([k, k] float64)."""
    h = np.zeros((k, k))
    n = 0
    for x in xs:
        x = x.reshape(-1, k)
        h += x.T @ x
        n += x.shape[0]
    return (2.0 / n) * h if n else None


def gptq(w, h, bits=4, gs=GROUP, sym=True, damp=0.01, block=128):
    """GPTQ of w [N, K] with Hessian h [K, K] (None: identity, i.e. plain
    rounding).  -> (codes [K, N] int, zeros [G, N] int, scales [G, N] f16,
    dequantized [N, K] float64)."""
    w = np.array(w, dtype=np.float64)
    n, k = w.shape
    maxq = (1 << bits) - 1
    h = np.eye(k) if h is None else np.array(h)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * np.mean(np.diag(h)) * np.eye(k)
    hinv = np.linalg.inv(np.linalg.cholesky(h))
    hinv = hinv.T @ hinv                                  # H^-1 through the Cholesky factor
    u = np.linalg.cholesky(hinv).T                        # upper factor, as torch.linalg.cholesky(upper=True)
    groups = -(-k // gs)
    codes = np.zeros((k, n), dtype=np.int64)
    scales = np.zeros((groups, n), dtype=np.float16)
    zeros = np.zeros((groups, n), dtype=np.int64)
    deq = np.zeros_like(w)
    s = z = None
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        w1 = w[:, i1:i2].copy()
        err = np.zeros_like(w1)
        u1 = u[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            if col % gs == 0:
                # the group's parameters from the weights as they stand in w
                # (earlier blocks' feedback applied; this block's not yet --
                # exactly what the reference implementation reads)
                xmin, xmax = quantfmt.group_range(w[:, col:col + gs], sym)
                s16 = ((xmax - xmin) / maxq).astype(np.float16)
                s = s16.astype(np.float64)
                z = np.full(n, (maxq + 1) // 2) if sym else np.round(-xmin / s).astype(np.int64)
                scales[col // gs], zeros[col // gs] = s16, z
            q = np.clip(np.round(w1[:, i] / s) + z, 0, maxq).astype(np.int64)
            dq = s * (q - z)
            codes[col], deq[:, col] = q, dq
            e = (w1[:, i] - dq) / u1[i, i]
            w1[:, i:] -= np.outer(e, u1[i, i:])
            err[:, i] = e
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return codes, zeros, scales, deq


def pack_gptq(codes, zeros, scales, bits=4, gs=GROUP, fmt="gptq"):
    """The dict quantfmt.gptq_quantize returns, for GPTQ's own codes (same
    packers: qweight along K, qzeros along N, v1 stores zero - 1)."""
    k = codes.shape[0]
    stored = zeros - 1 if fmt == "gptq" else zeros
    if np.any(stored < 0):
        raise ValueError("a v1 GPTQ zero of 0 cannot be stored")
    return dict(qweight=quantfmt.pack_bitstream(codes, bits, axis=0),
                qzeros=quantfmt.pack_bitstream(stored, bits, axis=1),
                scales=scales, g_idx=(np.arange(k) // gs).astype(np.int32), raised=0)


def digest(w):
    w = np.ascontiguousarray(w, dtype=np.float64)
    return (w.shape, hashlib.sha256(w.tobytes()).hexdigest())


def run_gptq(p, weights, base_cfg, rows, log):
    """-> {digest of a module's float weight: packed GPTQ dict}, for every
    Linear that gptoss_ckpt.linear_modules lists (q/k/v/o and the Defuser
    expert halves + down), quantized sequentially."""
    q = p["quant"]
    wd = dict(weights)
    model = ref_model(p, weights, base_cfg)
    run = Runner(model, rows)
    E, I, H = p["experts"], p["intermediate"], p["hidden"]
    results = {}
    xs = run.embed()
    for l in range(p["layers"]):
        t0 = time.time()
        lw = model.layers[l]
        mods = {m[0]: m for m in gptoss_ckpt.linear_modules(p, wd, l)}
        pre = f"model.layers.{l}."

        def quant(prefix, hmat):
            _, _, w, _ = mods[prefix]
            c, z, s, dq = gptq(w, hmat, q["bits"], q["group_size"], q["sym"])
            results[digest(w)] = pack_gptq(c, z, s, q["bits"], q["group_size"], q["checkpoint_format"])
            return dq

        # [q, k, v]
        h1 = run.norm1(lw, xs)
        hq = hessian(h1, H)
        for key in "qkv":
            lw["w" + key] = quant(pre + f"self_attn.{key}_proj", hq)
        # [o], its inputs with q/k/v quantized
        with run.record({lw["names"]["o"]}) as got:
            run.attn(l, lw, h1)
        lw["wo"] = quant(pre + "self_attn.o_proj", hessian(got[lw["names"]["o"]], lw["wo"].shape[1]))
        xs = xs + run.attn(l, lw, h1)
        # [experts' gate/up]: each expert's own tokens
        h2 = run.norm2(lw, xs)
        ex = lw["names"]["ex"]
        with run.record() as got:
            run.moe(lw, h2)
        hit = {e: sum(len(a) for a in got.get(f"{ex}{e}.gate_up", [])) for e in range(E)}
        for e in range(E):
            hg = hessian(got[f"{ex}{e}.gate_up"], H) if hit[e] else None
            top = quant(pre + f"mlp.experts.{e}.gate_proj", hg)     # Defuser: first half
            bot = quant(pre + f"mlp.experts.{e}.up_proj", hg)       # second half
            lw["gu"][e] = np.concatenate([top, bot]).T
        # [experts' down], inputs with gate/up quantized
        with run.record() as got:
            run.moe(lw, h2)
        for e in range(E):
            hd = hessian(got[f"{ex}{e}.down"], I) if f"{ex}{e}.down" in got else None
            lw["dn"][e] = quant(pre + f"mlp.experts.{e}.down_proj", hd).T
        xs = xs + run.moe(lw, h2)
        log(f"  gptq layer {l}: {time.time() - t0:.1f} s; tokens per expert "
            f"{[hit[e] for e in range(E)]}")
    return results


@contextlib.contextmanager
def patched(module, name, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def encode_gptq(p, weights, results):
    """gptoss_ckpt.encode_quant (the tests' writer: names, dtypes, config)
    with each module's codes taken from GPTQ instead of its rounding."""
    def from_gptq(w, bits, group_size, sym, desc_act, static_groups, fmt, rng):
        r = results.get(digest(w))
        if r is None:
            raise RuntimeError(f"no GPTQ result for a {list(np.shape(w))} module")
        return r

    with patched(gptoss_ckpt._quantfmt(), "gptq_quantize", from_gptq):
        return gptoss_ckpt.encode_quant(p, weights)


# ---------------------------------------------------------------------------
# AWQ

def awq_qdq(w, gs=GROUP):
    """What the AWQ writer stores for w, decoded: quantfmt.awq_quantize's
    codes and float16 scales through the reference's AWQ decoder."""
    r = quantfmt.awq_quantize(w, gs, True)
    k = w.shape[1]
    qv = gptoss_ref.unpack_awq(r["qweight"])                  # [K, N]
    z = gptoss_ref.unpack_awq(r["qzeros"])                    # [G, N]
    g = np.arange(k) // gs
    return (r["scales"].astype(np.float64)[g] * (qv - z[g])).T


def awq_w_mean(ws, gs=GROUP):
    w = np.concatenate(ws)
    g = np.abs(w).reshape(-1, gs)
    return (g / (g.max(axis=1, keepdims=True) + 1e-6)).reshape(w.shape).mean(axis=0)


def awq_search(x_mean, w_mean, forward, apply, fp_out, n_grid=20):
    """AutoAWQ _compute_best_scale (duo_scaling): -> (best scales, ratio)."""
    best = (math.inf, None, None)
    for r in range(n_grid):
        ratio = r / n_grid
        s = np.maximum(x_mean ** ratio / (w_mean ** (1 - ratio) + 1e-4), 1e-4)
        s = s / math.sqrt(s.max() * s.min())
        out = forward(apply(s))
        loss = float(np.mean((out - fp_out) ** 2))
        if loss < best[0]:
            best = (loss, s, ratio)
    return best[1], best[2]


def awq_clip(w, x, gs=GROUP, n_grid=20, max_shrink=0.5, n_tokens=512):
    """AutoAWQ _compute_best_clip: w [N, K] (already scaled), x [T, K] its
    (scaled) inputs -> w with each (row, group) clamped to its best max."""
    n, k = w.shape
    x = x.reshape(-1, k)
    x = x[::max(1, x.shape[0] // n_tokens)]
    xg = x.reshape(x.shape[0], k // gs, gs)
    wg = w.reshape(n, k // gs, gs)
    org_max = np.abs(wg).max(axis=-1, keepdims=True)              # [N, G, 1]
    org_out = np.einsum("tgk,ngk->ntg", xg, wg)
    best_max = org_max.copy()
    min_err = np.full(org_max.shape, 1e9)
    for i_s in range(int(max_shrink * n_grid)):
        mx = org_max * (1 - i_s / n_grid)
        cur = np.clip(wg, -mx, mx)
        qw = awq_qdq(cur.reshape(n, k), gs).reshape(n, k // gs, gs)
        err = ((np.einsum("tgk,ngk->ntg", xg, qw) - org_out) ** 2).mean(axis=1)[..., None]
        better = err < min_err
        min_err = np.where(better, err, min_err)
        best_max = np.where(better, mx, best_max)
    return np.clip(wg, -best_max, best_max).reshape(n, k)


def run_awq(p, weights, base_cfg, rows, log):
    """-> weights with AWQ's scales folded in and clipping applied (the AWQ
    writer then only rounds them)."""
    wd = {n: np.array(a) for n, a in weights}
    model = ref_model(p, weights, base_cfg)
    run = Runner(model, rows)
    E, H = p["experts"], p["hidden"]
    xs = run.embed()
    for l in range(p["layers"]):
        t0 = time.time()
        lw = model.layers[l]
        pre = f"model.layers.{l}."
        ex = lw["names"]["ex"]
        # float inputs of every Linear of this layer (the float model's)
        h1 = run.norm1(lw, xs)
        with run.record() as got_a:
            att = run.attn(l, lw, h1)
        xmid = xs + att
        h2 = run.norm2(lw, xmid)
        with run.record() as got_m:
            moe_fp = run.moe(lw, h2)
        xs_next = xmid + moe_fp

        # q/k/v against input_layernorm, inspecting the attention block
        ws = [lw["wq"], lw["wk"], lw["wv"]]
        x_mean = np.mean(np.abs(h1.reshape(-1, H)), axis=0)

        def apply_qkv(s):
            lw2 = dict(lw)
            for key in "qkv":
                lw2["w" + key] = awq_qdq(lw["w" + key] * s) / s
            return lw2

        s_att, r_att = awq_search(x_mean, awq_w_mean(ws), lambda lw2: run.attn(l, lw2, h1),
                                  apply_qkv, att)
        # gate_up of all experts against post_attention_layernorm, inspecting the MoE block
        gus = [lw["gu"][e].T for e in range(E)]                   # [2I, H] each
        x_mean = np.mean(np.abs(h2.reshape(-1, H)), axis=0)

        def apply_gu(s):
            lw2 = dict(lw)
            lw2["gu"] = np.stack([(awq_qdq(g * s) / s).T for g in gus])
            return lw2

        s_moe, r_moe = awq_search(x_mean, awq_w_mean(gus), lambda lw2: run.moe(lw2, h2),
                                  apply_gu, moe_fp)
        # fold the scales in (float64; the norms are rounded to bf16 when written)
        wd[pre + "input_layernorm.weight"] = wd[pre + "input_layernorm.weight"] / s_att
        for key in "qkv":
            wd[pre + f"self_attn.{key}_proj.weight"] = wd[pre + f"self_attn.{key}_proj.weight"] * s_att
        wd[pre + "post_attention_layernorm.weight"] = wd[pre + "post_attention_layernorm.weight"] / s_moe
        wd[pre + "mlp.router.weight"] = wd[pre + "mlp.router.weight"] * s_moe
        wd[pre + "mlp.experts.gate_up_proj"] = wd[pre + "mlp.experts.gate_up_proj"] * s_moe[None, :, None]
        # clipping, on the scaled weights and scaled inputs (not q, k)
        nm = lw["names"]
        v = wd[pre + "self_attn.v_proj.weight"]
        wd[pre + "self_attn.v_proj.weight"] = awq_clip(v, h1.reshape(-1, H) / s_att)
        wd[pre + "self_attn.o_proj.weight"] = awq_clip(wd[pre + "self_attn.o_proj.weight"],
                                                       np.concatenate(got_a[nm["o"]]))
        gu = wd[pre + "mlp.experts.gate_up_proj"]
        dn = wd[pre + "mlp.experts.down_proj"]
        I = p["intermediate"]
        for e in range(E):
            xin = got_m.get(f"{ex}{e}.gate_up")
            if xin:
                fused = gu[e].T                                       # [2I, H]
                xe = np.concatenate(xin) / s_moe
                # Defuser's gate_proj / up_proj are separate Linears: clipped one by one
                fused = np.concatenate([awq_clip(fused[:I], xe), awq_clip(fused[I:], xe)])
                gu[e] = fused.T
            xin = got_m.get(f"{ex}{e}.down")
            if xin:
                dn[e] = awq_clip(dn[e].T, np.concatenate(xin)).T
        xs = xs_next
        log(f"  awq layer {l}: ratios attn {r_att:.2f}, moe {r_moe:.2f}; {time.time() - t0:.1f} s")
    return [(n, wd[n]) for n, _ in weights]


# ---------------------------------------------------------------------------
# Quark: FP8 input scales from text

def quark_amax(p, weights, base_cfg, rows):
    """max |x| at the input of every Linear over the calibration rows (the
    float model), named as gptoss_ckpt.calibrate_input_amax names them; an
    expert no token reached takes its layer's maximum for that projection."""
    model = ref_model(p, weights, base_cfg)
    run = Runner(model, rows)

    def forward():
        xs = run.embed()
        for l, lw in enumerate(model.layers):
            xs = xs + run.attn(l, lw, run.norm1(lw, xs))
            xs = xs + run.moe(lw, run.norm2(lw, xs))

    return gptoss_ckpt.record_input_amax(model, p, forward)


# ---------------------------------------------------------------------------
# held-out perplexity with the reference

def ref_perplexity(model_dir, tok, heldout_text, max_chunks=None):
    chunks = perplexity.chunks(heldout_text)
    chunks = chunks[:max_chunks] if max_chunks else chunks
    return gptoss_ref.perplexity(gptoss_ref.Model(model_dir), [tok.encode(ch) for ch in chunks])


# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the bf16 checkpoint (models/default/bf16)")
    ap.add_argument("--out", required=True, help="parent folder of the variants (models/default)")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--calib-rows", type=int, default=128)
    ap.add_argument("--calib-seq", type=int, default=256)
    ap.add_argument("--kjv-text", help="the output of `bible -f Gen1:1-Rev22:21` (default: run it)")
    ap.add_argument("--no-eval", action="store_true", help="skip the reference perplexities")
    ap.add_argument("--eval-chunks", type=int, help="score only the first N held-out chunks")
    a = ap.parse_args(argv)
    train_default.use_openblas(sys.argv[1:] if argv is None else argv, __file__)
    fmts = [f for f in a.formats.split(",") if f]
    for f in fmts:
        if f not in FORMATS:
            ap.error(f"unknown format {f!r}; known: {', '.join(FORMATS)}")

    def log(msg):
        print(msg, flush=True)

    t_all = time.time()
    p, weights, base_cfg = load_bf16(a.model)
    tok = train_default.Tokenizer.from_json(os.path.join(a.model, "tokenizer.json"))
    rows = None
    if set(fmts) & {"gptq-int4", "awq-int4", "quark-w4a8"}:
        rows = calibration_rows(tok, a.calib_rows, a.calib_seq, a.kjv_text)
        log(f"calibration: {len(rows)} rows of {a.calib_seq} tokens from the training split")
    report = {}
    for f in fmts:
        t0 = time.time()
        dst = os.path.join(a.out, f)
        if f == "mxfp4":
            pv = dict(p, format="mxfp4")
            tensors = gptoss_ckpt.encode(pv, weights)
        elif f == "gptq-int4":
            pv = dict(p, quant=QUANT[f])
            results = run_gptq(pv, weights, base_cfg, rows, log)
            tensors = encode_gptq(pv, weights, results)
        elif f == "awq-int4":
            pv = dict(p, quant=QUANT[f])
            tensors = gptoss_ckpt.encode_quant(pv, run_awq(pv, weights, base_cfg, rows, log))
        else:
            pv = dict(p, quant=QUANT[f])
            amax = quark_amax(pv, weights, base_cfg, rows)
            with patched(gptoss_ckpt, "calibrate_input_amax", lambda p_, w_: amax):
                tensors = gptoss_ckpt.encode_quant(pv, weights)
        write_variant(dst, pv, base_cfg, tensors, a.model)
        size = os.path.getsize(os.path.join(dst, "model.safetensors"))
        log(f"{f}: wrote {dst} ({size / 1e6:.2f} MB) in {time.time() - t0:.0f} s")
        report[f] = {"bytes": size, "seconds": round(time.time() - t0, 1)}

    heldout = os.path.join(a.out, "heldout.txt")
    if not a.no_eval and os.path.exists(heldout):
        with open(heldout) as fh:
            text = fh.read()
        for f in ["bf16"] + fmts:
            d = a.model if f == "bf16" else os.path.join(a.out, f)
            ppl, n = ref_perplexity(d, tok, text, a.eval_chunks)
            report.setdefault(f, {})["reference_heldout_ppl"] = ppl
            log(f"{f}: held-out perplexity (numpy reference) {ppl:.3f} over {n} tokens")
    with open(os.path.join(a.out, "quantize_report.json"), "w") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    log(f"done in {time.time() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
